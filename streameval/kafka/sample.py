"""The first records of a topic, for ``streameval check``: read from the earliest offsets of
every partition, without a consumer group (nothing is committed, no group is joined)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from streameval.check import Sample
from streameval.config import Settings
from streameval.errors import InputError
from streameval.kafka.clients import _connect, restore_consumer_config

#: how long to wait for records before taking what has come
READ_TIMEOUT_S = 20.0


def partition_count(settings: Settings, topic: str) -> int:
    """The partitions of ``topic`` (0 when it does not exist)."""
    config = restore_consumer_config(settings)
    consumer: KafkaConsumer = _connect("consumer", KafkaConsumer, settings, **config)
    try:
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        consumer.close()


def topic_samples(settings: Settings, topic: str, limit: int) -> Iterator[Sample]:
    """Up to ``limit`` records of ``topic`` from the start of its partitions (each partition up
    to the end it had when reading began)."""
    config = restore_consumer_config(settings)
    consumer: KafkaConsumer = _connect("consumer", KafkaConsumer, settings, **config)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise InputError(f"topic {topic!r} does not exist (or may not be described)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        left = {tp for tp in tps if ends[tp] > starts[tp]}
        n = 0
        deadline = time.monotonic() + READ_TIMEOUT_S
        while left and n < limit and time.monotonic() < deadline:
            for tp, messages in consumer.poll(timeout_ms=500).items():
                for message in messages:
                    if n >= limit:
                        break
                    n += 1
                    timestamp = message.timestamp
                    yield Sample(
                        message.value if message.value is not None else b"",
                        f"partition {tp.partition} offset {message.offset}",
                        timestamp / 1000 if timestamp is not None and timestamp >= 0 else None,
                        tp.partition,
                    )
            for tp in list(left):  # a partition's end may be a transaction marker, not a record
                if consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
    except KafkaError as exc:
        raise InputError(f"topic {topic!r} cannot be read: {exc}") from None
    finally:
        consumer.close()
