"""The client interface (streameval/kafka/client.py) on the real broker, with each client library."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from streameval.config import load_settings
from streameval.kafka.backends import backend_for
from tests.integration.conftest import KAFKA_CLIENTS, Topics

pytestmark = pytest.mark.integration


def _answer(pending, seconds: float = 15.0):
    deadline = time.monotonic() + seconds
    while (offsets := pending.result()) is None:
        assert time.monotonic() < deadline, "no answer"
        time.sleep(0.01)
    return offsets


@pytest.mark.parametrize("client", KAFKA_CLIENTS)
def test_end_offsets_asked_without_waiting_are_the_ends_waited_for(tmp_path, topics: Topics, client) -> None:
    topics.create(partitions=2)
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap)
    for i in range(30):
        producer.send(topics.impressions, value=b"{}", partition=i % 3 % 2)
    producer.flush()
    producer.close()
    settings = load_settings(str(topics.config(tmp_path / "c.toml", kafka_client=client)))
    consumer = backend_for(settings).consumer(settings)
    try:
        tps = [TopicPartition(topics.impressions, p) for p in (0, 1)]
        pending = consumer.request_end_offsets(tps, timeout_ms=5_000)
        assert _answer(pending) == {tps[0]: 20, tps[1]: 10} == consumer.end_offsets(tps, timeout_ms=5_000)
        missing = consumer.request_end_offsets([TopicPartition(topics.impressions, 7)], timeout_ms=500)
        with pytest.raises(KafkaError):
            _answer(missing)
    finally:
        consumer.close(autocommit=False)
