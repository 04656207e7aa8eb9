"""The consumer loop: poll, decode, align, process, dead-letter, checkpoint, publish.

One instance's share of the consumer group, by partition number: each owned partition is a
:class:`~streameval.kafka.partitions.PartitionState` that goes through named phases (awaiting
offsets, restoring, active, giving up; that module says what each means). The parts beside it:
:class:`~streameval.kafka.ends.EndOffsets` (how far each input goes, and the lag),
:class:`~streameval.kafka.flow.FlowControl` (pausing inputs), :mod:`~streameval.kafka.compat`
(kafka-python's workarounds), :class:`~streameval.kafka.loglines.LoopLog`.

The group's side has a named state too: :class:`Membership` (joining, member, closing), and
:class:`Rebalanced`, what the last poll's rebalance left to do (nothing, follow the new
assignment, or rewind everything because the membership expired).

Every ``commit_interval``, a checkpoint commits the changed state, the dead-letter records and
the input offsets as one transaction (:mod:`streameval.kafka.checkpoint`). A partition given up
in a cooperative rebalance (:mod:`streameval.kafka.assignor`) is checkpointed in the rebalance
listener, before the member rejoins for the rebalance that hands it over, then dropped; the
kept ones go on untouched. Lost partitions, a failed checkpoint or a failed dead-letter send
all take one path, the rewind: abort the open transaction, drop every partition's state and
start each again from its last committed checkpoint. Nothing is lost (the offsets never pass
what a committed checkpoint covers) and nothing counts twice (what an aborted transaction held
is redone once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import InconsistentGroupProtocolError

from streameval import collector
from streameval.config import Settings
from streameval.errors import InputError
from streameval.kafka import compat
from streameval.kafka.align import Aligner, Entry
from streameval.kafka.assignor import NAME
from streameval.kafka.changelog import Restorer
from streameval.kafka.checkpoint import CheckpointFailed, Transactions, commit_checkpoint
from streameval.kafka.deadletter import dead_letter_record
from streameval.kafka.ends import EndOffsets
from streameval.kafka.flow import PAUSE_ABOVE, RESUME_BELOW, FlowControl
from streameval.kafka.loglines import LoopLog
from streameval.kafka.membership import Membership, Rebalance, Rebalanced
from streameval.kafka.partitions import PartitionState
from streameval.kafka.placement import Placement
from streameval.kafka.recovery import Recovery
from streameval.kafka.topics import Topics, check_layout
from streameval.pipeline import GroupCap, Pipeline
from streameval.records import Ignored, Rejection
from streameval.view import Latency, Operations, View, merge_snapshots

__all__ = ["PAUSE_ABOVE", "RESUME_BELOW", "ConsumerLoop", "Membership", "Rebalanced"]

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.5
POLL_TIMEOUT_MS = 200
ALIGN_MAX_WAIT_S = 5.0  # longest wait for a topic that is behind before the others go on
DEAD_LETTER_LIMIT = 1_000_000
MIN_DEAD_LETTER_LIMIT = 256


class ConsumerLoop:
    """One instance's share of the consumer group."""

    def __init__(
        self,
        settings: Settings,
        consumer: KafkaConsumer,
        transactions: Transactions,
        restorer: Restorer,
        wall_clock: Callable[[], float] = time.time,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        partition_count: int | None = None,
        topics: Topics | None = None,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.transactions = transactions
        self.restorer = restorer
        self.wall_clock = wall_clock
        self.topics = (settings.impressions_topic, *settings.events_topics)
        self.partitions: dict[int, PartitionState] = {}
        self.membership = Membership.JOINING
        self.rebalanced = Rebalanced.NOTHING
        #: the checkpoint of partitions being given up failed (raised after the poll)
        self._give_up_failed: CheckpointFailed | None = None
        self.group_cap = GroupCap.of(settings)
        self.latency = Latency()
        self.ops = Operations()
        self.ends = EndOffsets(consumer)
        self.flow = FlowControl(consumer)
        self.recovery = Recovery(
            settings,
            consumer,
            restorer,
            self.flow,
            self.ops,
            wall_clock,
            self.group_cap,
            self._check_changelog,
        )
        self.loglines = LoopLog(self.topics)
        #: bytes a dead-letter record may take (the smaller of the producer's max_request_size and
        #: the topic's max.message.bytes; halved when the broker still refuses one)
        self.dead_letter_limit = dead_letter_limit
        #: the partition count of the inputs (and the changelog) at start-up
        self.partition_count = partition_count
        #: where the default partitioner puts each query (records elsewhere count as misrouted)
        self.placement = Placement(partition_count) if partition_count else None
        #: the cluster's topics (None: not asked, as in the unit tests)
        self.cluster = topics
        self.view: View | None = None
        self._next_checkpoint = 0.0
        self._next_publish = 0.0

    def subscribe(self) -> None:
        self.consumer.subscribe(list(self.topics), listener=Rebalance(self))

    def note(self, what: Rebalanced) -> None:
        """What a rebalance left to do (from the listener)."""
        self.rebalanced = max(self.rebalanced, what)

    @property
    def ready(self) -> bool:
        return self.membership is Membership.MEMBER and all(ps.active for ps in self.partitions.values())

    # --- assignment, restore, rewind -----------------------------------------------------------

    def rewind(self) -> None:
        """Abort the open transaction and start every owned partition again from its last
        committed checkpoint (after lost partitions, a failed checkpoint or a failed send)."""
        self.rebalanced = Rebalanced.NOTHING
        self.transactions.abort()
        self.restorer.cancel(list(self.restorer.restoring))
        self.partitions = {}
        collector.reclaim_now()  # the dropped state is held in reference cycles
        self.flow.forget(list(self.flow.paused))
        self.ends.reset()
        self._take()
        self.publish(force=True)

    def give_up(self, partitions: set[int]) -> None:
        """Partitions given up in a cooperative rebalance (from the rebalance listener): commit
        a checkpoint now, so that their next owner starts exactly where this one stopped, then
        drop their state. A failed checkpoint is raised after the poll, and rewinds everything."""
        self.note(Rebalanced.REASSIGNED)
        gone = [p for p in self.partitions if p in partitions]
        if self.membership is Membership.CLOSING or not gone:
            return  # closing: the final checkpoint has been taken
        for p in gone:
            self.partitions[p].revoke()
        try:
            self.checkpoint()
        except CheckpointFailed as exc:
            self._give_up_failed = exc
            return
        for p in gone:
            del self.partitions[p]
            inputs = [TopicPartition(t, p) for t in self.topics]
            self.flow.forget(inputs)
            self.ends.forget(inputs)
        self.restorer.cancel([p for p in gone if p in self.restorer.restoring])
        collector.reclaim_now()  # the dropped state is held in reference cycles
        log.info("partitions %s given up to another member", gone)

    def follow_assignment(self) -> None:
        """After a cooperative rebalance: start restoring the partitions added; the kept ones go
        on untouched (those given up were checkpointed and dropped by :meth:`give_up`)."""
        self.rebalanced = Rebalanced.NOTHING
        owned = {tp.partition for tp in self.consumer.assignment()}
        if any(p not in owned for p in self.partitions):
            # given up without the listener's checkpoint (not expected): from the checkpoints
            log.warning("partitions given up without a checkpoint; rewinding to the last one")
            self.rewind()
            return
        self._take()
        self.publish(force=True)

    def _take(self) -> None:
        """Check that the assignment is still co-partitioned, then start restoring every assigned
        partition this instance does not hold yet: pause its inputs, ask for its committed
        offsets."""
        assignment = set(self.consumer.assignment())
        owned = {tp.partition for tp in assignment}
        new = sorted(owned - set(self.partitions))
        self.membership = Membership.MEMBER
        if not owned:
            log.info("no partitions assigned to this instance")
            return
        check_layout(self.settings, self.consumer, self.partition_count, assignment)
        if not new:
            return
        for p in new:
            self.partitions[p] = PartitionState(
                Aligner(self.topics, self.wall_clock, max_wait=ALIGN_MAX_WAIT_S)
            )
        self.flow.hold([TopicPartition(t, p) for p in new for t in self.topics])
        log.info("partitions %s: restoring state from %s", new, self.settings.changelog_topic)

    def _check_changelog(self) -> None:
        """After a failure that may be a deleted changelog: stop if it is."""
        if self.cluster is not None:
            self.cluster.check_lost_state()

    # --- the loop ------------------------------------------------------------------------------

    def run_once(self) -> int:
        """One poll and everything it allows; returns the number of records processed."""
        try:
            return self._round()
        except CheckpointFailed as exc:
            self.ops.failed(self.wall_clock(), str(exc))
            if exc.too_large and self.dead_letter_limit > MIN_DEAD_LETTER_LIMIT:
                # the broker knows a lower limit than we were told: cut dead-letter copies shorter
                self.dead_letter_limit = max(MIN_DEAD_LETTER_LIMIT, self.dead_letter_limit // 2)
            self.loglines.failure(str(exc))
            if exc.topic == self.settings.changelog_topic or exc.topic is None:
                self._check_changelog()
            if exc.topic == self.settings.dead_letter_topic and self.cluster is not None:
                self.cluster.ensure_dead_letter()  # deleted while running: create it again
            self.rewind()
            return 0

    def _round(self) -> int:
        if self.rebalanced is Rebalanced.LOST:
            self.rewind()
        if any(not ps.active for ps in self.partitions.values()):
            self.recovery.step(self.partitions)
        compat.release_parked_fetches(self.consumer)
        batches = self._poll()
        compat.keep_join_awaited(self.consumer)
        failed, self._give_up_failed = self._give_up_failed, None
        if failed is not None:
            raise failed  # the one failure path: a rewind (run_once)
        self.ends.refresh([tp for tp in self.consumer.assignment() if tp not in self.flow.paused])
        if self.rebalanced is Rebalanced.LOST:
            return 0  # every partition starts again from its checkpoint: these are read again
        if self.rebalanced is Rebalanced.REASSIGNED:
            self.follow_assignment()
        for tp, messages in batches.items():
            ps = self.partitions.get(tp.partition)
            if ps is None or not ps.active:
                continue
            for message in messages:
                ps.aligner.push(self._decode(ps.pipeline, tp.topic, message))  # type: ignore[arg-type]
            if messages:
                ps.fetched[tp.topic] = messages[-1].offset + 1
        processed = sum(self._drain(p, ps) for p, ps in self.partitions.items() if ps.active)
        self.flow.balance(self.partitions, self.topics)
        if time.monotonic() >= self._next_checkpoint and not compat.rejoining(self.consumer):
            # while the group rebalances a checkpoint would likely be refused (its generation is
            # about to end) and cost a rewind: the periodic one waits until it is over
            self.checkpoint()
        self.loglines.status(self.publish(), processed)
        return processed

    def _poll(self) -> dict[TopicPartition, list[Any]]:
        try:
            return compat.poll(self.consumer, POLL_TIMEOUT_MS, broker_silent=self.ends.broker_silent)
        except InconsistentGroupProtocolError:
            raise InputError(
                f"consumer group {self.settings.group_id} has members that assign partitions another "
                f"way (the {NAME} assignor is not among theirs): an older streameval, or another "
                "application using this group_id. Stop them, then start this version; no rolling "
                "upgrade across this change (README, Guarantees)"
            ) from None

    def _decode(self, pipeline: Pipeline, topic: str, message: Any) -> Entry:
        raw = message.value if message.value is not None else b""
        kafka_ts = None
        if pipeline.decoder.wants_kafka_ts:  # ts = "@timestamp": the record's own, in ms
            timestamp = getattr(message, "timestamp", None)
            kafka_ts = timestamp / 1000 if timestamp is not None and timestamp >= 0 else None
        return Entry(topic, message.offset, pipeline.decode(topic, raw, kafka_ts), message)

    def _drain(self, partition: int, ps: PartitionState) -> int:
        """Feeds the pipeline what the aligner lets go, in order; ticks it when all is caught up."""
        pipeline = ps.pipeline
        assert pipeline is not None  # active
        caught_up = self.ends.caught_up(partition, ps)
        processed = 0
        now = self.wall_clock()
        placement = self.placement
        while True:
            entry = ps.aligner.pop(caught_up)
            if entry is None:
                break
            record = entry.record
            if isinstance(record, Rejection):
                self._dead_letter(partition, entry, record)
                pipeline.counters.dead_lettered[(entry.topic, record.reason)] += 1
            elif placement is not None and type(record) is not Ignored:
                if placement.partition_of(record.query_id) != partition:  # type: ignore[union-attr]
                    pipeline.counters.misrouted[entry.topic] += 1
            pipeline.handle(entry.topic, record)
            timestamp = getattr(entry.message, "timestamp", None)
            if timestamp is not None and timestamp > 0:
                self.latency.observe(now - timestamp / 1000.0)
            ps.next_offsets[entry.topic] = entry.offset + 1
            processed += 1
        if not len(ps.aligner) and all(caught_up(t) for t in self.topics):
            pipeline.tick()
        return processed

    def _dead_letter(self, partition: int, entry: Entry, rejection: Rejection) -> None:
        key, value, headers = dead_letter_record(
            entry.message.key,
            entry.message.value,
            rejection.reason,
            rejection.detail,
            entry.topic,
            partition,
            entry.offset,
            self.dead_letter_limit,
        )
        self.transactions.send(self.settings.dead_letter_topic, value=value, key=key, headers=headers)
        log.debug("rejected %s[%d]@%d: %s", entry.topic, partition, entry.offset, rejection.detail)

    # --- checkpoints and the published view ----------------------------------------------------

    def checkpoint(self) -> None:
        """Commit the changed state of every partition with a pipeline (active, or giving up),
        the dead-letter records sent since the last checkpoint and the input offsets, as one
        transaction. Raises CheckpointFailed (the transaction is then ended; nothing of it is
        visible)."""
        self._next_checkpoint = time.monotonic() + self.settings.commit_interval
        if not self.transactions.open and not any(
            ps.pipeline is not None and ps.changed() for ps in self.partitions.values()
        ):
            return
        started = time.monotonic()
        before = self.transactions.bytes_sent
        entries = commit_checkpoint(
            self.transactions, self.settings.changelog_topic, self.partitions, self.consumer.group_metadata()
        )
        self.ops.checkpointed(
            self.wall_clock(), time.monotonic() - started, entries, self.transactions.bytes_sent - before
        )

    def publish(self, force: bool = False) -> View:
        """Build the merged view the exporter reads (at most every PUBLISH_INTERVAL_S)."""
        now = self.wall_clock()
        if self.view is not None and not force and now < self._next_publish:
            return self.view
        self._next_publish = now + PUBLISH_INTERVAL_S
        snapshots = {
            p: ps.pipeline.snapshot() for p, ps in self.partitions.items() if ps.pipeline is not None
        }
        self.ops.partitions_restoring = sum(1 for ps in self.partitions.values() if not ps.active)
        self.view = View(
            settings=self.settings,
            snapshot=merge_snapshots(snapshots.values()),
            partition_watermarks={p: s.watermark for p, s in snapshots.items()},
            consumer_lag=self.ends.lag(self.partitions, self.topics),
            latency_buckets=tuple(self.latency.cumulative()),
            latency_sum=self.latency.total,
            wall_time=now,
            ops=self.ops.copy(),
            ready=self.ready,
        )
        self.loglines.misrouted(self.view)
        return self.view

    def close(self) -> bool:
        """A final checkpoint, then close every client within ``shutdown_timeout``; returns
        whether the final checkpoint committed."""
        deadline = time.monotonic() + self.settings.shutdown_timeout
        self.membership = Membership.CLOSING
        ok = True
        self.transactions.timeout = max(1.0, self.settings.shutdown_timeout * 0.6)
        try:
            if self.rebalanced is Rebalanced.LOST or compat.rejoining(self.consumer):
                # lost, or the generation is about to end: it would be refused; the next owner
                # resumes from the last checkpoint
                log.info("final checkpoint skipped: the group is rebalancing")
            else:
                self.checkpoint()
        except CheckpointFailed as exc:
            log.error("final checkpoint failed: %s; the next owner resumes from the previous one", exc)
            ok = False
        finally:
            remaining = max(0.5, deadline - time.monotonic())
            self.restorer.close()
            self.transactions.close(timeout=remaining / 2)
            self.consumer.close(
                autocommit=False, timeout_ms=int(max(0.5, deadline - time.monotonic()) * 1000)
            )
        return ok
