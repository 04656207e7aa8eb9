"""Pieces of the confluent-kafka backend that need no broker: what librdkafka's answers become."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from streameval.config import load_settings
from streameval.errors import InputError
from streameval.kafka.topics import check_layout

ck = pytest.importorskip("confluent_kafka")
from streameval.kafka.librdkafka import AdminOffsets  # noqa: E402


def _answered(offsets: dict[tuple[str, int], int]) -> AdminOffsets:
    futures = {}
    for (topic, partition), offset in offsets.items():
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(SimpleNamespace(offset=offset))
        futures[ck.TopicPartition(topic, partition)] = future
    return AdminOffsets(futures)


def test_listed_offsets_are_taken_and_invalid_ones_are_no_answer() -> None:
    assert _answered({("a", 0): 5, ("a", 1): 0}).result() == {
        TopicPartition("a", 0): 5,
        TopicPartition("a", 1): 0,
    }
    # with the broker away, librdkafka 2.12 completes the request with OFFSET_INVALID
    with pytest.raises(KafkaTimeoutError):
        _answered({("a", 0): 5, ("a", 1): ck.OFFSET_INVALID}).result()


class Unanswered:
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        raise KafkaError("Failed to get metadata: Local: Broker transport failure")


def test_the_layout_check_goes_on_without_the_partition_counts_when_the_brokers_do_not_answer() -> None:
    settings = load_settings(None, {}, {"events_topics": ["clicks"]})
    both = {TopicPartition(t, 0) for t in ("impressions", "clicks")}
    check_layout(settings, Unanswered(), 2, both)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no longer co-partitioned"):
        check_layout(settings, Unanswered(), 2, {TopicPartition("impressions", 0)})  # type: ignore[arg-type]
