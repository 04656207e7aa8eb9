"""The changelog topic: created at start-up, read back when a partition is assigned.

One changelog partition per input partition number, ``cleanup.policy=compact``, so the topic
keeps the last value of every state key (see :mod:`streameval.state`) and compaction removes
deleted keys. It is written only inside the checkpoint transactions and read with
``isolation_level="read_committed"``, so a restore never sees a checkpoint that did not commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaConfigurationError, KafkaError

from streameval import state
from streameval.config import Settings
from streameval.kafka.clients import make_admin, restore_consumer_config

log = logging.getLogger(__name__)


class Restorer:
    """Reads changelog partitions from the beginning to a given end, a bounded step at a time,
    so the consumer loop keeps polling while a large state comes back.

    The end of a partition is its high watermark (a second consumer asks for it with
    ``read_uncommitted``), taken after the input offsets were fetched. Reading with
    ``read_committed``, the position passes a transaction only once it has ended, so reaching
    that end means every checkpoint that covers the fetched offsets has been read, and nothing of
    an aborted one.
    """

    def __init__(self, settings: Settings) -> None:
        self.topic = settings.changelog_topic
        self.consumer = KafkaConsumer(**restore_consumer_config(settings))
        self.ends = KafkaConsumer(
            **(restore_consumer_config(settings) | {"isolation_level": "read_uncommitted"})
        )
        # the group's committed offsets, asked by a client that is not a member: the member's own
        # coordinator is busy with rebalances, and its positions may run ahead of the commits
        self.offsets = KafkaConsumer(**(restore_consumer_config(settings) | {"group_id": settings.group_id}))
        self.settings = settings
        #: for the repartition stage's committed source offsets (README, Repartitioning)
        self._admin: KafkaAdminClient | None = (
            make_admin(settings, request_timeout_ms=2_000) if settings.repartition else None
        )
        self.values: dict[int, state.Values] = {}
        self.targets: dict[int, int] = {}
        self.records_read: dict[int, int] = {}
        self.started: dict[int, float] = {}

    @property
    def restoring(self) -> set[int]:
        return set(self.values)

    def start(self, partitions: Iterable[int]) -> None:
        """Begin (or begin again) restoring these partition numbers, up to their current end."""
        new = list(partitions)
        if not new:
            return
        tps = [TopicPartition(self.topic, p) for p in new]
        ends = self.ends.end_offsets(tps, timeout_ms=2_000)
        for tp in tps:
            self.values[tp.partition] = {}
            self.targets[tp.partition] = ends[tp]
            self.records_read[tp.partition] = 0
            self.started[tp.partition] = time.monotonic()
        self._assign()
        self.consumer.seek_to_beginning(*tps)

    def cancel(self, partitions: Iterable[int]) -> None:
        for p in list(partitions):
            for table in (self.values, self.targets, self.records_read, self.started):
                table.pop(p, None)
        self._assign()

    def _assign(self) -> None:
        self.consumer.assign([TopicPartition(self.topic, p) for p in sorted(self.values)])

    def step(self, timeout_ms: int = 200) -> dict[int, tuple[state.Values, int, float]]:
        """Read what one poll brings; returns the partitions now complete with their values,
        the records read and the seconds it took. Raises StateError on an unreadable record."""
        if not self.values:
            return {}
        waiting = [p for p in self.values if self.targets[p] > 0]
        batches = self.consumer.poll(timeout_ms=timeout_ms if waiting else 0, max_records=20_000)
        for tp, messages in batches.items():
            values = self.values.get(tp.partition)
            if values is None:
                continue
            where = f"{tp.topic}[{tp.partition}]@"
            state.latest(((m.key, m.value, f"{where}{m.offset}") for m in messages), into=values)
            self.records_read[tp.partition] += len(messages)
        done = {}
        for p in list(self.values):
            target = self.targets[p]
            if target > 0:
                try:
                    position = self.consumer.position(TopicPartition(self.topic, p), timeout_ms=0)
                except KafkaError:
                    continue
                if position is None or position < target:
                    continue
            done[p] = (self.values.pop(p), self.records_read.pop(p), time.monotonic() - self.started.pop(p))
            del self.targets[p]
        if done:
            self._assign()
        return done

    def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets; with ``read_committed`` the broker answers only once
        no open transaction holds offsets for them (KafkaError until then)."""
        return {tp: self.offsets.committed(tp, timeout_ms=2_000) for tp in partitions}

    def last_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's last committed offsets in one request, without waiting for a transaction
        that holds offsets for them to end (an admin's OffsetFetch does not ask for stable
        offsets; a transaction's offsets count once it has committed)."""
        if self._admin is None:
            raise KafkaConfigurationError("no topic is repartitioned: nothing asks for these offsets")
        group = self.settings.group_id
        found = self._admin.list_group_offsets({group: partitions}).get(group, {})
        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            offset = getattr(found.get(tp), "offset", None)
            out[tp] = offset if isinstance(offset, int) and offset >= 0 else None
        return out

    def close(self) -> None:
        for client in (self.consumer, self.ends, self.offsets):
            client.close(autocommit=False)
        if self._admin is not None:
            self._admin.close()
