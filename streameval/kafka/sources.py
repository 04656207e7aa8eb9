"""Whether every record of the repartitioned topics has reached their repartition topics.

The repartition stage (:mod:`streameval.kafka.stage`) commits its source offsets in the same
transaction as the records it wrote, so a source partition whose committed offset has reached
its end (the last stable offset) has every one of its records in the repartition topic. While
some source partition has records past its committed offset -- the stage is behind, or its
member died and another one is about to re-read them from there -- the repartition topics are
*pending*: the join waits for them as for a topic with records on the broker, without a time
limit (:class:`~streameval.kafka.align.Aligner`), wherever the stage runs. Otherwise a join
could count a repartition topic complete, go on with the impressions, and count those records
late when they arrive.

Asked at most once a second (less often while the broker does not answer): the group's last
committed offsets first, then the ends, so a record appended in between never reads as
committed. Until the first answer, the topics count as pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from kafka import TopicPartition
from kafka.errors import KafkaError

from streameval.kafka.client import Consumer
from streameval.kafka.ends import END_OFFSETS_INTERVAL_S, END_OFFSETS_MAX_BACKOFF_S

log = logging.getLogger(__name__)

Committed = Callable[[list[TopicPartition]], Mapping[TopicPartition, int | None]]


class Sources:
    def __init__(
        self,
        topics: Iterable[str],
        consumer: Consumer,
        committed: Committed,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topics = tuple(topics)
        self.consumer = consumer
        self.committed = committed
        self.clock = clock
        #: some source partition has records its committed offset does not cover (or not known yet)
        self.pending = True
        self.due = 0.0
        self.backoff = END_OFFSETS_INTERVAL_S

    def partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, p)
            for topic in self.topics
            for p in sorted(self.consumer.partitions_for_topic(topic) or ())
        ]

    def refresh(self) -> bool:
        """Ask again, when due; returns whether it asked (and got an answer)."""
        now = self.clock()
        if now < self.due:
            return False
        self.due = now + self.backoff
        partitions = self.partitions()
        try:
            committed = self.committed(partitions)
            ends = self.consumer.end_offsets(partitions, timeout_ms=500)
        except (KafkaError, KeyError) as exc:
            self.backoff = min(END_OFFSETS_MAX_BACKOFF_S, self.backoff * 2)
            self.due = now + self.backoff
            log.debug("repartitioned topics: committed offsets or ends not available: %s", exc)
            return False
        self.backoff = END_OFFSETS_INTERVAL_S
        self.pending = not partitions or any(
            (end := ends.get(tp)) is not None and end > (committed.get(tp) or 0) for tp in partitions
        )
        return True
