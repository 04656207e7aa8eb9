"""The repartition stage (README, Repartitioning): events topics that are not keyed by query_id,
or not co-partitioned with the impressions, re-keyed by the daemon itself.

The stage reads the partitions of those topics that this member owns (any count, any key) and
writes each record, unchanged (value, headers, timestamp), keyed by its query_id into partition
murmur2(query_id) % N of ``<group_id>-repartition-<topic>`` (N: the impressions' partitions),
which the join then reads like any co-partitioned events topic. A record without a usable
query_id goes to partition (its source partition % N), where the join rejects it with its reason
and dead-letters it, as it would from the source. The writes go into the open transaction, and
the stage's source offsets into the checkpoint that commits it: a crash, a rebalance or a broker
restart gives each record exactly once (what an aborted transaction held is written again).

Order: one member runs the stage (the assignor gives it every partition of the repartitioned
topics, :class:`~streameval.kafka.assignor.CooperativeCopartitioned`), so each repartition
partition has one writer; the stage merges its source partitions in event-time order (an
:class:`Aligner` over them), so a repartition partition is in time order, as a co-partitioned
topic would be, also across a failover (the next owner resumes from the committed offsets). The
join side counts a repartition topic as caught up only while the stage has nothing pending and
the topic's end has not grown for a commit interval: a backlog gives the numbers live traffic
gives. The stage holds no state but its offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafka import TopicPartition
from kafka.errors import KafkaError

from streameval.config import Settings
from streameval.decoding import Decoder
from streameval.kafka.align import Aligner, Entry, kafka_seconds
from streameval.kafka.client import ChangelogReader, CheckpointProducer, Consumer
from streameval.kafka.ends import EndOffsets
from streameval.kafka.flow import PAUSE_ABOVE, RESUME_BELOW, FlowControl
from streameval.kafka.placement import Placement
from streameval.kafka.recovery import reset_offset
from streameval.records import Engagement

log = logging.getLogger("streameval.kafka.loop")

ALIGN_MAX_WAIT_S = 5.0


@dataclass
class StageInput:
    """One owned source partition. ``active`` once sought to its committed offset."""

    active: bool = False
    committed: int | None = None  # covered by the last checkpoint
    next: int | None = None  # first offset not written yet
    fetched: int | None = None  # first offset not fetched yet


def _key(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"


class Stage:
    def __init__(
        self,
        settings: Settings,
        consumer: Consumer,
        transactions: CheckpointProducer,
        restorer: ChangelogReader,
        partitions: int,
        wall_clock: Callable[[], float],
        ends: EndOffsets,
        flow: FlowControl,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.transactions = transactions
        self.restorer = restorer
        self.partitions = partitions
        self.ends = ends
        self.flow = flow
        self.targets = {t: settings.repartition_topic(t) for t in settings.repartition}
        self.decoder = Decoder(settings, wall_clock)
        self.placement = Placement(partitions)
        self.inputs: dict[TopicPartition, StageInput] = {}
        self.aligner = Aligner((), wall_clock, max_wait=ALIGN_MAX_WAIT_S)

    @property
    def ready(self) -> bool:
        return all(i.active for i in self.inputs.values())

    # --- ownership -----------------------------------------------------------------------------

    def take(self, assigned: Iterable[TopicPartition]) -> None:
        """Own these source partitions too: paused until sought to their committed offsets."""
        new = [tp for tp in assigned if tp not in self.inputs]
        for tp in new:
            self.inputs[tp] = StageInput()
            self.aligner.add(_key(tp))
        if new:
            self.flow.hold(new)
            log.info("repartitioning %s", ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(new)))

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """No longer owned (checkpointed first, by the caller)."""
        gone = [tp for tp in partitions if tp in self.inputs]
        for tp in gone:
            del self.inputs[tp]
            self.aligner.remove(_key(tp))
        self.flow.forget(gone)
        self.ends.forget(gone)

    def rewind(self) -> None:
        """Forget every source partition (after an abort): the loop takes those still assigned
        again, from their committed offsets."""
        self.drop(list(self.inputs))

    def step(self) -> None:
        """Seek the partitions awaiting it to their committed offsets (retried next round while
        a transaction holding them is open), and resume them."""
        waiting = [tp for tp, i in self.inputs.items() if not i.active]
        if not waiting:
            return
        try:
            committed = self.restorer.committed(waiting)
        except KafkaError as exc:
            log.info("repartitioned inputs: committed offsets not available yet (%s)", type(exc).__name__)
            return
        for tp in waiting:
            offset = committed.get(tp)
            if offset is None:
                offset = reset_offset(self.consumer, self.settings, tp)
            stage_input = self.inputs[tp]
            if offset is not None:
                self.consumer.seek(tp, offset)
            # a partition without a committed offset gets its starting one committed at the next
            # checkpoint: every member can then tell that nothing before it is to be written
            stage_input.committed = committed.get(tp)
            stage_input.next = stage_input.fetched = offset
            stage_input.active = True
        self.flow.release(waiting)

    # --- records -------------------------------------------------------------------------------

    def push(self, tp: TopicPartition, messages: list[Any]) -> None:
        """Fetched records of an owned source partition."""
        stage_input = self.inputs.get(tp)
        if stage_input is None or not stage_input.active or not messages:
            return
        key, topic = _key(tp), tp.topic
        for message in messages:
            raw = message.value if message.value is not None else b""
            kafka_ts = kafka_seconds(message) if self.decoder.wants_kafka_ts else None
            fields = self.decoder.event(raw, topic, kafka_ts)
            record: Any = Engagement(*fields) if type(fields) is tuple else fields
            self.aligner.push(Entry(key, message.offset, record, (tp, message)))
        stage_input.fetched = messages[-1].offset + 1

    def _caught_up(self, key: str) -> bool:
        topic, _, partition = key.rpartition("/")
        tp = TopicPartition(topic, int(partition))
        stage_input = self.inputs.get(tp)
        end = self.ends.end(tp)
        return stage_input is not None and end is not None and (stage_input.fetched or 0) >= end

    def _behind(self, key: str) -> bool:
        topic, _, partition = key.rpartition("/")
        tp = TopicPartition(topic, int(partition))
        stage_input = self.inputs.get(tp)
        fetched = stage_input.fetched if stage_input is not None else None
        return self.ends.behind(tp, fetched, self.consumer.known_position(tp))

    def drain(self) -> int:
        """Write what the merge lets go, in event-time order; returns how many."""
        written = 0
        while True:
            entry = self.aligner.pop(self._caught_up, self._behind)
            if entry is None:
                break
            tp, message = entry.message
            record = entry.record
            if isinstance(record, Engagement):
                partition, key = self.placement.partition_of(record.query_id), record.query_id.encode()
            else:  # rejected or ignored: the join decides, as it would from the source
                partition, key = tp.partition % self.partitions, message.key
            timestamp = getattr(message, "timestamp", None)
            self.transactions.send(
                self.targets[tp.topic],
                value=message.value if message.value is not None else b"",
                key=key,
                partition=partition,
                timestamp_ms=timestamp if timestamp is not None and timestamp >= 0 else None,
                headers=list(getattr(message, "headers", None) or []),
            )
            self.inputs[tp].next = entry.offset + 1
            written += 1
        self._to_position()
        self._balance()
        return written

    def _to_position(self) -> None:
        """A source partition whose fetched records are all written moves on to the consumer's
        position, which passes commit markers and aborted records that no record covers: its
        committed offset then reaches the partition's end (:mod:`~streameval.kafka.sources`)."""
        for tp, stage_input in self.inputs.items():
            if not stage_input.active or stage_input.next != stage_input.fetched:
                continue
            if self.aligner.buffered(_key(tp)):
                continue
            position = self.consumer.known_position(tp)
            if position is not None and stage_input.next is not None and position > stage_input.next:
                stage_input.next = stage_input.fetched = position

    def _balance(self) -> None:
        pause, resume = [], []
        for tp, stage_input in self.inputs.items():
            if not stage_input.active:
                continue
            n = self.aligner.buffered(_key(tp))
            if n > PAUSE_ABOVE and tp not in self.flow.paused:
                pause.append(tp)
            elif n < RESUME_BELOW and tp in self.flow.paused:
                resume.append(tp)
        if pause:
            self.flow.hold(pause)
        if resume:
            self.flow.release(resume)

    # --- checkpoints ---------------------------------------------------------------------------

    def moved_offsets(self) -> dict[TopicPartition, int]:
        """The source offsets written past what the last checkpoint covers."""
        return {
            tp: i.next
            for tp, i in self.inputs.items()
            if i.active and i.next is not None and i.next != i.committed
        }

    def committed_now(self, offsets: dict[TopicPartition, int]) -> None:
        """These offsets were committed (with everything written before them)."""
        for tp, offset in offsets.items():
            if tp in self.inputs:
                self.inputs[tp].committed = offset

    def idle(self) -> bool:
        """Nothing fetched waits to be written, nothing written waits for a commit, and every
        owned source partition is read to its end."""
        if len(self.aligner) or self.moved_offsets():
            return False
        return all(i.active and self._caught_up(_key(tp)) for tp, i in self.inputs.items())

    def lag(self) -> dict[tuple[str, int], int]:
        lag = {}
        for tp, stage_input in self.inputs.items():
            end = self.ends.end(tp)
            if end is not None:
                start = stage_input.next if stage_input.next is not None else 0
                lag[(tp.topic, tp.partition)] = max(0, end - start)
        return lag
