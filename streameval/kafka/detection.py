"""The minutes topic (README, Regression detectors): each partition's complete minutes written
into it inside the checkpoint that commits the partition's state, and read back by the member
that owns partition 0 into the group's detectors (:class:`~streameval.minutes.Combiner`, part
of partition 0's state). See :mod:`streameval.minutes` for the record and why it is exact.

The reader is a consumer of its own (no group, read_committed) assigned the topic's one
partition while partition 0 is active here, and sought to the offset the restored state has read
to; the offset moves with the state, in the same checkpoints, so nothing is read twice or lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from streameval.config import Settings
from streameval.detect import Detectors
from streameval.kafka.clients import restore_consumer_config
from streameval.kafka.partitions import PartitionState
from streameval.minutes import Combiner

log = logging.getLogger("streameval.kafka.loop")

#: records of the minutes topic read per loop round, at most
MAX_RECORDS = 500
#: how long the reader waits before it asks again once a poll found nothing: each partition
#: completes a minute a minute, and a poll of kafka-python's costs the loop about a millisecond
#: (0.12-0.13 s of a 4.3 s backlog, polled every round)
IDLE_POLL_INTERVAL_S = 0.5


def combiner_for(settings: Settings, partition: int, partitions: int | None) -> Combiner | None:
    """The group's detectors for the state of ``partition``: partition 0 holds them."""
    if partition != 0 or not partitions:
        return None
    detectors = Detectors.of(settings)
    return None if detectors is None else Combiner(detectors, partitions)


def hand_on(topic: str, send: Callable[..., None], partitions: dict[int, PartitionState]) -> None:
    """Write each partition's newly complete minutes into the minutes topic (in the open
    transaction; the caller commits it with the partitions' state)."""
    for p, ps in sorted(partitions.items()):
        pipeline = ps.pipeline
        if pipeline is None or pipeline.minutes is None:
            continue
        record = pipeline.minutes.hand_on(p, pipeline.windows.frontier)
        if record is not None:
            send(topic, orjson.dumps(record), str(p).encode(), partition=0)


class MinutesReader:
    """Reads the minutes topic into partition 0's combiner, while partition 0 is active here."""

    def __init__(self, settings: Settings) -> None:
        self.tp = TopicPartition(settings.minutes_topic, 0)
        self.make_consumer = lambda: KafkaConsumer(**restore_consumer_config(settings))
        self.consumer: KafkaConsumer | None = None
        #: the combiner the consumer is positioned for (a restore or a rewind makes a new one)
        self.combiner: Combiner | None = None
        #: when to poll next (monotonic): at once while polls find records
        self._next_poll = 0.0

    def step(self, partitions: dict[int, PartitionState]) -> None:
        ps = partitions.get(0)
        combiner = ps.pipeline.combiner if ps is not None and ps.active and ps.pipeline else None
        if combiner is None:
            self.combiner = None
            return
        if combiner is self.combiner and time.monotonic() < self._next_poll:
            return
        try:
            if self.consumer is None:
                self.consumer = self.make_consumer()
                self.consumer.assign([self.tp])
            if combiner is not self.combiner:
                self.consumer.seek(self.tp, combiner.offset)
                self.combiner = combiner
            batches = self.consumer.poll(timeout_ms=0, max_records=MAX_RECORDS)
        except KafkaError as exc:
            log.info("minutes topic not readable now (%s); trying again", type(exc).__name__)
            return
        records = batches.get(self.tp, ())
        self._next_poll = 0.0 if records else time.monotonic() + IDLE_POLL_INTERVAL_S
        for record in records:
            try:
                value: Any = orjson.loads(record.value)
                raised = combiner.add(record.offset, value)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                # only the daemon writes it; a record it cannot read is skipped, not fatal
                log.warning("minutes topic record at offset %d skipped: %r", record.offset, exc)
                combiner.offset = record.offset + 1
                combiner.changed = True
                continue
            for kind, group in raised:
                log.warning("regression detector alarm: %s versus %s", ", ".join(group), kind)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
