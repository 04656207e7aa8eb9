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
from streameval.kafka.rdrecords import TIMESTAMP_NOT_AVAILABLE, by_partition  # noqa: E402


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


class _Message:
    """What by_partition asks of a confluent_kafka.Message (which cannot be made outside it)."""

    def __init__(self, topic: str, partition: int, offset: int, error: object = None, ts: int = 7) -> None:
        self._where, self._offset, self._error, self._ts = (topic, partition), offset, error, ts

    def error(self) -> object:
        return self._error

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (TIMESTAMP_NOT_AVAILABLE, -1) if self._ts < 0 else (ck.TIMESTAMP_CREATE_TIME, self._ts)


def test_consumed_messages_are_grouped_by_partition_in_their_order() -> None:
    assert TIMESTAMP_NOT_AVAILABLE == ck.TIMESTAMP_NOT_AVAILABLE
    skipped = ck.KafkaError(ck.KafkaError._PARTITION_EOF)
    messages = [
        _Message("a", 0, 1),
        _Message("a", 0, 2),
        _Message("b", 0, 5, ts=-1),
        _Message("a", 1, 3),
        _Message("a", 0, 0, error=skipped),
        _Message("a", 0, 4),
    ]
    batches = by_partition(messages)
    assert {tp: [r.offset for r in rs] for tp, rs in batches.items()} == {
        TopicPartition("a", 0): [1, 2, 4],
        TopicPartition("b", 0): [5],
        TopicPartition("a", 1): [3],
    }
    record = batches[TopicPartition("b", 0)][0]
    read = (record.topic, record.partition, record.value, record.key, record.headers)
    assert read == ("b", 0, b"v5", b"k5", [])
    assert record.timestamp == -1 and batches[TopicPartition("a", 1)][0].timestamp == 7
    with pytest.raises(KafkaError):
        by_partition([_Message("a", 0, 1, error=ck.KafkaError(ck.KafkaError._FATAL, fatal=True))])
