"""The consumer loop: poll, decode, align, process, dead-letter, commit, publish.

State is per partition number: partition p of the impressions topic and partition p of every
events topic feed one :class:`~streameval.pipeline.Pipeline` through one
:class:`~streameval.kafka.align.Aligner`. Offsets are committed every ``COMMIT_INTERVAL_S``
and on shutdown or revocation, only up to the last record processed, and only after the
dead-letter producer has flushed, so no rejected record is lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError

from streameval.config import Settings
from streameval.kafka.align import Aligner, Entry
from streameval.pipeline import GroupCap, Pipeline
from streameval.records import Rejection
from streameval.view import Latency, View, merge_snapshots

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 5.0
PUBLISH_INTERVAL_S = 0.5
POLL_TIMEOUT_MS = 200
STATUS_LOG_INTERVAL_S = 60.0
PAUSE_ABOVE = 5_000  # buffered records of one topic-partition before it is paused
RESUME_BELOW = 1_000
ALIGN_MAX_WAIT_S = 5.0  # longest wait for a topic that is behind before the others go on


@dataclass
class PartitionState:
    """Everything owned for one partition number."""

    pipeline: Pipeline
    aligner: Aligner
    next_offsets: dict[str, int] = field(default_factory=dict)  # topic -> first unprocessed
    received: dict[str, int] = field(default_factory=dict)  # topic -> first not yet received
    committed: dict[str, int] = field(default_factory=dict)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, loop: ConsumerLoop) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.loop.on_revoked(list(revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.loop.on_assigned(list(assigned))


class ConsumerLoop:
    """One instance's share of the consumer group."""

    def __init__(
        self,
        settings: Settings,
        consumer: KafkaConsumer,
        producer: KafkaProducer,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.producer = producer
        self.wall_clock = wall_clock
        self.topics = (settings.impressions_topic, *settings.events_topics)
        self.partitions: dict[int, PartitionState] = {}
        self.group_cap = GroupCap(settings.max_groups, len(settings.group_by))
        self.latency = Latency()
        self.dead_lettered: Counter[tuple[str, str]] = Counter()
        self.last_commit: float | None = None
        self.ready = False
        self.view: View | None = None
        self._next_commit = 0.0
        self._next_publish = 0.0
        self._next_status = time.monotonic() + STATUS_LOG_INTERVAL_S
        self._processed_since_status = 0
        self._paused: set[TopicPartition] = set()

    def subscribe(self) -> None:
        self.consumer.subscribe(list(self.topics), listener=_Rebalance(self))

    # --- rebalances ----------------------------------------------------------------------------

    def on_assigned(self, assigned: list[TopicPartition]) -> None:
        """Keep the state of partitions this instance still owns, drop the rest, open new ones.

        Rebalances are eager: every partition is revoked before the new assignment. For a
        partition it keeps, the loop keeps what it buffered and seeks each topic to the first
        offset it has not received, so the fetch goes on exactly after the buffer whether the
        client kept its fetch position or went back to the committed offset. A topic that has
        received nothing starts, either way, where it would have.
        """
        owned = {tp.partition for tp in assigned}
        for p in [p for p in self.partitions if p not in owned]:
            del self.partitions[p]
        for p in sorted(owned):
            state = self.partitions.get(p)
            if state is None:
                self.partitions[p] = PartitionState(
                    Pipeline(self.settings, wall_clock=self.wall_clock, group_cap=self.group_cap),
                    Aligner(self.topics, self.wall_clock, max_wait=ALIGN_MAX_WAIT_S),
                )
                continue
            for topic, offset in state.received.items():
                self.consumer.seek(TopicPartition(topic, p), offset)
        # the client may or may not keep a re-assigned partition paused: start from "none paused"
        if assigned:
            self.consumer.resume(*assigned)
        self._paused.clear()
        log.info("assigned partitions %s", sorted(owned))
        self.ready = True
        self.publish(force=True)

    def on_revoked(self, revoked: list[TopicPartition]) -> None:
        # runs on the client's IO thread, which must not block: commit without waiting (the
        # coordinator handles this connection's requests in order, so it lands before the rejoin)
        self.commit(wait=False)
        if revoked:
            log.info("revoked partitions %s", sorted({tp.partition for tp in revoked}))

    # --- the loop ------------------------------------------------------------------------------

    def run_once(self) -> int:
        """One poll and everything it allows; returns the number of records processed."""
        _release_parked_fetches(self.consumer)
        batches = self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        for tp, messages in batches.items():
            state = self.partitions.get(tp.partition)
            if state is None:
                continue
            for message in messages:
                state.aligner.push(self._decode(state.pipeline, tp.topic, message))
            if messages:
                state.received[tp.topic] = messages[-1].offset + 1
        processed = sum(self._drain(p, state) for p, state in self.partitions.items())
        self._flow_control()
        now = self.wall_clock()
        if now >= self._next_commit:
            self.commit()
        view = self.publish()
        self._processed_since_status += processed
        if time.monotonic() >= self._next_status:
            self._log_status(view)
        return processed

    def _log_status(self, view: View) -> None:
        """One line a minute, so a long backlog shows its progress in the log."""
        self._next_status = time.monotonic() + STATUS_LOG_INTERVAL_S
        watermark = view.snapshot.watermark
        log.info(
            "processed %d records in the last %.0f s; lag %d; %d open queries, %d orphans; watermark %s",
            self._processed_since_status,
            STATUS_LOG_INTERVAL_S,
            sum(view.consumer_lag.values()),
            view.snapshot.open_queries,
            view.snapshot.orphans_held,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(watermark)) if math.isfinite(watermark) else "-",
        )
        self._processed_since_status = 0

    def _decode(self, pipeline: Pipeline, topic: str, message: Any) -> Entry:
        raw = message.value if message.value is not None else b""
        if topic == self.settings.impressions_topic:
            record: Any = pipeline.decode_impression(raw)
        else:
            record = pipeline.decode_event(raw, topic)
        return Entry(topic, message.offset, record, message)

    def _caught_up(self, partition: int) -> Callable[[str], bool]:
        def caught_up(topic: str) -> bool:
            tp = TopicPartition(topic, partition)
            try:
                highwater = self.consumer.highwater(tp)
                position = self.consumer.position(tp, timeout_ms=0) if highwater is not None else None
            except KafkaError:
                return False
            return highwater is not None and position is not None and position >= highwater

        return caught_up

    def _drain(self, partition: int, state: PartitionState) -> int:
        caught_up = self._caught_up(partition)
        processed = 0
        now = self.wall_clock()
        while True:
            entry = state.aligner.pop(caught_up)
            if entry is None:
                break
            state.pipeline.handle(entry.topic, entry.record)
            if isinstance(entry.record, Rejection):
                self._dead_letter(partition, entry, entry.record)
            timestamp = getattr(entry.message, "timestamp", None)
            if timestamp is not None and timestamp > 0:
                self.latency.observe(now - timestamp / 1000.0)
            state.next_offsets[entry.topic] = entry.offset + 1
            processed += 1
        if not len(state.aligner) and all(caught_up(t) for t in self.topics):
            state.pipeline.tick()
        return processed

    def _dead_letter(self, partition: int, entry: Entry, rejection: Rejection) -> None:
        message = entry.message
        headers = [
            ("reason", rejection.reason.encode()),
            ("detail", rejection.detail.encode("utf-8", "replace")),
            ("topic", entry.topic.encode()),
            ("partition", str(partition).encode()),
            ("offset", str(entry.offset).encode()),
        ]
        self.producer.send(
            self.settings.dead_letter_topic, value=message.value, key=message.key, headers=headers
        )
        self.dead_lettered[(entry.topic, rejection.reason)] += 1
        log.debug("rejected %s[%d]@%d: %s", entry.topic, partition, entry.offset, rejection.detail)

    def _flow_control(self) -> None:
        pause, resume = [], []
        for p, state in self.partitions.items():
            for topic in self.topics:
                tp = TopicPartition(topic, p)
                n = state.aligner.buffered(topic)
                if n > PAUSE_ABOVE and tp not in self._paused:
                    pause.append(tp)
                elif n < RESUME_BELOW and tp in self._paused:
                    resume.append(tp)
        if pause:
            self.consumer.pause(*pause)
            self._paused.update(pause)
        if resume:
            self.consumer.resume(*resume)
            self._paused.difference_update(resume)

    # --- commits and the published view --------------------------------------------------------

    def commit(self, wait: bool = True) -> None:
        """Commit the offsets of everything processed, after the dead-letter records are durable."""
        self._next_commit = self.wall_clock() + COMMIT_INTERVAL_S
        offsets = {}
        for p, state in self.partitions.items():
            for topic, offset in state.next_offsets.items():
                if state.committed.get(topic) != offset:
                    offsets[TopicPartition(topic, p)] = OffsetAndMetadata(offset, "", -1)
        if not offsets:
            return
        try:
            self.producer.flush(timeout=30)
            if wait:
                self.consumer.commit(offsets)
            else:
                self.consumer.commit_async(offsets)
        except KafkaError as exc:
            # offsets are cumulative: what is not committed now is committed next time
            log.warning("commit failed, will retry in %.0f s: %s", COMMIT_INTERVAL_S, exc)
            return
        for tp, meta in offsets.items():
            if tp.partition in self.partitions:
                self.partitions[tp.partition].committed[tp.topic] = meta.offset
        self.last_commit = self.wall_clock()

    def publish(self, force: bool = False) -> View:
        """Build the merged view the exporter reads (at most every PUBLISH_INTERVAL_S)."""
        now = self.wall_clock()
        if self.view is not None and not force and now < self._next_publish:
            return self.view
        self._next_publish = now + PUBLISH_INTERVAL_S
        snapshots = {p: s.pipeline.snapshot() for p, s in self.partitions.items()}
        lag = {}
        for p, state in self.partitions.items():
            for topic in self.topics:
                try:
                    highwater = self.consumer.highwater(TopicPartition(topic, p))
                except KafkaError:
                    highwater = None
                if highwater is not None:
                    lag[(topic, p)] = max(0, highwater - state.next_offsets.get(topic, highwater))
        self.view = View(
            settings=self.settings,
            snapshot=merge_snapshots(snapshots.values()),
            partition_watermarks={p: s.watermark for p, s in snapshots.items()},
            consumer_lag=lag,
            latency_buckets=tuple(self.latency.cumulative()),
            latency_sum=self.latency.total,
            dead_lettered=Counter(self.dead_lettered),
            wall_time=now,
            last_commit=self.last_commit,
            ready=self.ready,
        )
        return self.view

    def close(self) -> None:
        """Final commit, then close both clients."""
        try:
            self.commit()
        finally:
            self.producer.close(timeout=10)
            self.consumer.close(autocommit=False)


def _release_parked_fetches(consumer: KafkaConsumer) -> None:
    """Work around a kafka-python 3.0.12 stall after pause()/resume().

    The fetcher parks records it fetched for a paused partition (KAFKA-7548) and never fetches
    that partition again while they are parked. After resume() it restores them only when its
    current record set ``is None``, but an exhausted record set stays in place and is merely
    falsy, so the parked data -- and the partition -- can stay stuck forever (seen here on a
    backlog larger than PAUSE_ABOVE). Everywhere else the fetcher treats a falsy record set as
    "none", so replacing an exhausted one by None changes nothing but lets the restore run.
    Guarded so that a client without these attributes is left alone.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not getattr(fetcher, "_paused_partition_records", None):
        return
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:
        fetcher._next_partition_records = None
