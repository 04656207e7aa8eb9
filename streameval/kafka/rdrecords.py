"""Records as the confluent-kafka backend's consumer hands them to the loop: librdkafka's
messages with the attributes of the interface (kafka-python's names), grouped by partition."""

from __future__ import annotations

import logging
from typing import Any

from kafka import TopicPartition
from kafka.errors import KafkaError

log = logging.getLogger("streameval.kafka.librdkafka")

#: confluent_kafka.TIMESTAMP_NOT_AVAILABLE: the message has no timestamp
TIMESTAMP_NOT_AVAILABLE = 0


def by_partition(messages: list[Any]) -> dict[TopicPartition, list[Record]]:
    """A consume call's messages grouped by partition, in their order; an error message is
    skipped (logged), a fatal one raised as KafkaError."""
    # grouped by (topic, partition) as plain tuples: a TopicPartition made per group, not per record
    out: dict[tuple[str, int], list[Record]] = {}
    batch: list[Record] = []
    last: tuple[str, int] | None = None
    for message in messages:
        error = message.error()
        if error is not None:
            if error.fatal():
                raise KafkaError(error.str())
            log.debug("consume: %s", error.str())
            continue
        topic, partition = message.topic(), message.partition()
        if last is None or partition != last[1] or topic != last[0]:  # runs of one partition
            last = (topic, partition)
            batch = out.setdefault(last, [])
        batch.append(Record(message, topic, partition))
    return {TopicPartition(*key): batch for key, batch in out.items()}


class Record:
    """A consumed record with the attributes of the interface (kafka-python's names). The key
    and headers are asked of librdkafka's message when read: only a dead-letter copy and the
    repartition stage read them, not the join."""

    __slots__ = ("topic", "partition", "offset", "value", "timestamp", "_message")

    def __init__(self, message: Any, topic: str, partition: int) -> None:
        self._message = message
        self.topic = topic
        self.partition = partition
        self.offset = message.offset()
        self.value = message.value()
        kind, timestamp = message.timestamp()
        self.timestamp = timestamp if kind != TIMESTAMP_NOT_AVAILABLE else -1

    @property
    def key(self) -> bytes | None:
        return self._message.key()

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return self._message.headers() or []
