"""Flow control: an input partition is paused while the aligner holds many of its records
(another topic of the partition is behind), and while its partition is not active."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafka import TopicPartition

from streameval.kafka.client import Consumer
from streameval.kafka.partitions import PartitionState

PAUSE_ABOVE = 5_000  # buffered records of one topic-partition before it is paused
RESUME_BELOW = 1_000


class FlowControl:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.paused: set[TopicPartition] = set()

    def hold(self, partitions: list[TopicPartition]) -> None:
        """Pause these (a partition about to be restored)."""
        self.consumer.pause(*partitions)
        self.paused.update(partitions)

    def release(self, partitions: list[TopicPartition]) -> None:
        """Resume these."""
        self.consumer.resume(*partitions)
        self.paused.difference_update(partitions)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """No longer owned: nothing to resume."""
        self.paused.difference_update(partitions)

    def balance(self, partitions: Mapping[int, PartitionState], topics: Iterable[str]) -> None:
        """Pause the inputs of active partitions whose aligner holds more than PAUSE_ABOVE of
        their records, resume those below RESUME_BELOW."""
        pause, resume = [], []
        topics = tuple(topics)
        for p, ps in partitions.items():
            if not ps.active:
                continue  # restoring: all its inputs stay paused
            for topic in topics:
                tp = TopicPartition(topic, p)
                n = ps.aligner.buffered(topic)
                if n > PAUSE_ABOVE and tp not in self.paused:
                    pause.append(tp)
                elif n < RESUME_BELOW and tp in self.paused:
                    resume.append(tp)
        if pause:
            self.hold(pause)
        if resume:
            self.release(resume)
