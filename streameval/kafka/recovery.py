"""Recovery: a newly assigned partition's committed offsets fetched, its state read back from the
changelog a bounded step per loop round, its inputs sought to those offsets and resumed (the
phases AWAITING_OFFSETS -> RESTORING -> ACTIVE of :mod:`streameval.kafka.partitions`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka import TopicPartition
from kafka.errors import KafkaError

from streameval import state
from streameval.config import Settings
from streameval.groups import GroupCap
from streameval.kafka.client import ChangelogReader, Consumer
from streameval.kafka.detection import combiner_for
from streameval.kafka.flow import FlowControl
from streameval.kafka.partitions import PartitionState, Phase
from streameval.view import Operations

log = logging.getLogger("streameval.kafka.loop")


class Recovery:
    def __init__(
        self,
        settings: Settings,
        consumer: Consumer,
        restorer: ChangelogReader,
        flow: FlowControl,
        ops: Operations,
        wall_clock: Callable[[], float],
        group_cap: GroupCap,
        offsets_unavailable: Callable[[], None],
        partition_count: int | None = None,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.restorer = restorer
        self.flow = flow
        self.ops = ops
        self.wall_clock = wall_clock
        self.group_cap = group_cap
        #: called when committed offsets cannot be read (the changelog may have gone)
        self.offsets_unavailable = offsets_unavailable
        self.topics = settings.join_topics
        #: the inputs' partition count (None in tests without a cluster: no detectors)
        self.partition_count = partition_count

    def step(self, partitions: dict[int, PartitionState]) -> None:
        """Moves each partition that is not active on as far as it can go now."""
        self._fetch_offsets(partitions)
        for p, (values, records, seconds) in self.restorer.step(timeout_ms=100).items():
            ps = partitions.get(p)
            if ps is None or ps.phase is not Phase.RESTORING:
                continue
            combiner = combiner_for(self.settings, p, self.partition_count)
            pipeline = state.restore(self.settings, values, self.wall_clock, self.group_cap, combiner)
            if pipeline.minutes is not None and self.partition_count:
                pipeline.minutes.handed_on = True  # by each checkpoint, to partition 0's detectors
            ps.restored(pipeline)
            self._resume(p, ps)
            self.ops.restored(records, seconds)
            log.info(
                "partition %d restored: %d changelog records, %d open queries, in %.2f s",
                p,
                records,
                len(pipeline.joiner.open),
                seconds,
            )

    def _resume(self, p: int, ps: PartitionState) -> None:
        """Seek the inputs of an active partition to the offsets its state covers, and resume
        them."""
        inputs = [TopicPartition(t, p) for t in self.topics]
        for tp in inputs:
            offset = ps.committed.get(tp.topic)
            if offset is None:
                offset = reset_offset(self.consumer, self.settings, tp)
            if offset is not None:
                self.consumer.seek(tp, offset)
                ps.fetched[tp.topic] = offset
        self.flow.release(inputs)

    def _fetch_offsets(self, partitions: dict[int, PartitionState]) -> None:
        """Committed offsets of the partitions awaiting them; a partition whose offsets are not
        stable yet (a transaction still open) is asked again next round. One that kept its state
        through an eager rebalance, with those offsets unchanged, is active at once."""
        for p, ps in sorted(partitions.items()):
            if ps.phase is not Phase.AWAITING_OFFSETS:
                continue
            try:
                offsets = self.restorer.committed([TopicPartition(t, p) for t in self.topics])
                committed = {tp.topic: offset for tp, offset in offsets.items()}
                if not ps.keeps(committed):
                    self.restorer.start([p])
            except KafkaError as exc:
                log.info("partition %d: committed offsets not available yet (%s)", p, type(exc).__name__)
                self.offsets_unavailable()
                continue
            kept = ps.kept is not None
            ps.offsets_known(committed)
            if ps.active:
                self._resume(p, ps)
                log.info("partition %d: state kept through the rebalance, not restored", p)
            elif kept:
                log.info("partition %d: its committed offsets moved since it was given up; restoring", p)


def reset_offset(consumer: Consumer, settings: Settings, tp: TopicPartition) -> int | None:
    """Where a partition with no committed offset starts (``auto_offset_reset``), as a
    number; None (and the client's own reset) when the broker cannot say now."""
    earliest = settings.kafka.get("auto_offset_reset", "earliest") == "earliest"
    try:
        offsets = (consumer.beginning_offsets if earliest else consumer.end_offsets)([tp], timeout_ms=2_000)
        return int(offsets[tp])
    except (KafkaError, KeyError):
        if earliest:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek_to_end(tp)
        return None
