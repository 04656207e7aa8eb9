"""The consumer loop: poll, decode, align, process, dead-letter, checkpoint, publish.

One instance's share of the consumer group, by partition number: each owned partition is a
:class:`~streameval.kafka.partitions.PartitionState` that goes through named phases (awaiting
offsets, restoring, active, giving up; that module says what each means). Beside it: ``ends``
(how far each input goes, the lag), ``flow`` (pausing inputs), ``loglines``. The clients are
those of the interface in :mod:`~streameval.kafka.client`.

The group's side has a named state too: :class:`Membership` (joining, member, closing), and
:class:`Rebalanced`, what the last poll's rebalance left to do (nothing, follow the new
assignment, or rewind everything because the membership expired).

Every ``commit_interval``, a checkpoint commits the changed state, the dead-letter records and
the input offsets as one transaction (:mod:`streameval.kafka.checkpoint`). A partition given up
in a rebalance is checkpointed in the listener, before the member rejoins for the rebalance
that hands it over, then dropped (kept aside, if eager: :mod:`streameval.kafka.kept`); those
not revoked go on untouched. Lost partitions, a failed checkpoint or a failed dead-letter send
all take one path, the rewind: abort the open transaction, drop every partition's state and
start each again from its last committed checkpoint. Nothing is lost (the offsets never pass
what a committed checkpoint covers) and nothing counts twice (what an aborted transaction held
is redone once).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from kafka import TopicPartition

from streameval import collector
from streameval.config import Settings
from streameval.kafka.align import Aligner
from streameval.kafka.checkpoint import CheckpointFailed, commit_checkpoint
from streameval.kafka.client import ChangelogReader, CheckpointProducer, Consumer, GroupProtocolMismatch
from streameval.kafka.detection import MinutesReader
from streameval.kafka.ends import EndOffsets
from streameval.kafka.feed import DEAD_LETTER_LIMIT, Feed
from streameval.kafka.flow import PAUSE_ABOVE, RESUME_BELOW, FlowControl
from streameval.kafka.kept import Held, Kept
from streameval.kafka.loglines import LoopLog
from streameval.kafka.membership import Membership, Rebalance, Rebalanced, mixed_group
from streameval.kafka.partitions import PartitionState
from streameval.kafka.recovery import Recovery
from streameval.kafka.sources import Sources
from streameval.kafka.stage import Stage
from streameval.kafka.topics import Topics, check_layout
from streameval.pipeline import GroupCap
from streameval.view import Operations, View, merge_snapshots

__all__ = ["PAUSE_ABOVE", "RESUME_BELOW", "ConsumerLoop", "Membership", "Rebalanced"]

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.5
IDLE_PUBLISH_GAP_S = 0.1  # after a round that leaves nothing to do: sooner, but no more often
POLL_TIMEOUT_MS = 200
ALIGN_MAX_WAIT_S = 5.0  # longest wait for a topic that is behind before the others go on
#: transaction.abort.timed.out.transaction.cleanup.interval.ms, Kafka's default
TRANSACTION_CLEANUP_S = 10.0
MIN_DEAD_LETTER_LIMIT = 256


class ConsumerLoop:
    """One instance's share of the consumer group."""

    def __init__(
        self,
        settings: Settings,
        consumer: Consumer,
        transactions: CheckpointProducer,
        restorer: ChangelogReader,
        wall_clock: Callable[[], float] = time.time,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        partition_count: int | None = None,
        topics: Topics | None = None,
        transaction_timeout: float = 30.0,
        detectors: bool = True,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.transactions = transactions
        self.restorer = restorer
        self.wall_clock = wall_clock
        #: the topics the join reads (co-partitioned)
        self.topics = settings.join_topics
        self.partitions: dict[int, PartitionState] = {}
        self.kept = Kept()  # state given up in an eager rebalance, in case it is handed back
        self.membership = Membership.JOINING
        self.rebalanced = Rebalanced.NOTHING
        #: the checkpoint of partitions being given up failed (raised after the poll)
        self._give_up_failed: CheckpointFailed | None = None
        self.group_cap = GroupCap.of(settings)
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
            partition_count if topics is not None and detectors else None,  # the detectors' minutes
        )
        self.minutes = MinutesReader(settings)
        self.loglines = LoopLog(self.topics)
        #: the repartition stage, when some events topics are re-keyed (README, Repartitioning)
        self.stage = (
            Stage(
                settings, consumer, transactions, restorer, partition_count, wall_clock, self.ends, self.flow
            )
            if settings.repartition and partition_count
            else None
        )
        #: whether the stage, wherever it runs, has committed every source record
        self.sources = (
            Sources(settings.repartition, consumer, restorer.last_committed) if self.stage else None
        )
        self.feed = Feed(
            settings,
            transactions,
            self.ends,
            self.stage,
            partition_count,
            wall_clock,
            dead_letter_limit,
            consumer.known_position,
            self.sources,
        )
        # A repartition topic's records arrive with the stage's commits, one interval late; and a
        # stage that died with its transaction open holds back what its next owner writes after it
        # until the broker aborts it (its transaction timeout, then the broker's next check for
        # expired transactions, every 10 s by default): the merge waits that long for one.
        rekeyed_wait = (
            transaction_timeout + TRANSACTION_CLEANUP_S + settings.commit_interval + ALIGN_MAX_WAIT_S
        )
        self._waits = {t: rekeyed_wait for t in self.feed.counted_as}
        self.partition_count = partition_count  # of the inputs (and the changelog) at start-up
        #: the cluster's topics (None: not asked, as in the unit tests)
        self.cluster = topics
        self.view: View | None = None
        self._next_checkpoint, self._published = 0.0, -math.inf
        self._stale = False  # records processed since the view was built

    def subscribe(self) -> None:
        self.consumer.subscribe([*self.topics, *self.settings.repartition], listener=Rebalance(self))

    def note(self, what: Rebalanced) -> None:
        """What a rebalance left to do (from the listener)."""
        self.rebalanced = max(self.rebalanced, what)

    @property
    def ready(self) -> bool:
        stage_ready = self.stage is None or self.stage.ready
        return (
            self.membership is Membership.MEMBER
            and stage_ready
            and all(ps.active for ps in self.partitions.values())
        )

    # --- assignment, restore, rewind -----------------------------------------------------------

    def rewind(self) -> None:
        """Abort the open transaction and start every owned partition again from its last
        committed checkpoint (after lost partitions, a failed checkpoint or a failed send)."""
        self.rebalanced = Rebalanced.NOTHING
        self.transactions.abort()
        self.restorer.cancel(list(self.restorer.restoring))
        self.partitions = {}
        self.kept.clear()
        collector.reclaim_now()  # the dropped state is held in reference cycles
        self.flow.forget(list(self.flow.paused))
        self.ends.reset()
        if self.stage is not None:
            self.stage.rewind()
        self._take()
        self.publish(force=True)

    def give_up(self, revoked: set[TopicPartition]) -> None:
        """Partitions given up in a rebalance (from the rebalance listener): commit a checkpoint
        now, so that their next owner starts exactly where this one stopped, then drop their
        state (kept aside if the protocol is eager: :mod:`~streameval.kafka.kept`). A failed
        checkpoint is raised after the poll, and rewinds everything."""
        self.note(Rebalanced.REASSIGNED)
        numbers = {tp.partition for tp in revoked if tp.topic in self.topics}
        gone = [p for p in self.partitions if p in numbers]
        sources = [tp for tp in revoked if self.stage is not None and tp in self.stage.inputs]
        if self.membership is Membership.CLOSING or not (gone or sources):
            return  # closing: the final checkpoint has been taken
        for p in gone:
            self.partitions[p].revoke()
        try:
            self.checkpoint()
        except CheckpointFailed as exc:
            self._give_up_failed = exc
            return
        if self.stage is not None:
            self.stage.drop(sources)
        held = {p: Held(ps.pipeline, dict(ps.committed)) for p in gone if (ps := self.partitions[p]).pipeline}
        self.kept.hold(held, self.consumer.eager_generation())
        for p in gone:
            del self.partitions[p]
            inputs = [TopicPartition(t, p) for t in self.topics]
            self.flow.forget(inputs)
            self.ends.forget(inputs)
        self.restorer.cancel([p for p in gone if p in self.restorer.restoring])
        collector.reclaim_now()  # the dropped state is held in reference cycles
        log.info("partitions %s given up in a rebalance", gone)

    def follow_assignment(self) -> None:
        """After a cooperative rebalance: start restoring the partitions added; the kept ones go
        on untouched (those given up were checkpointed and dropped by :meth:`give_up`)."""
        self.rebalanced = Rebalanced.NOTHING
        assignment = self.consumer.assignment()
        owned = {tp.partition for tp in assignment if tp.topic in self.topics}
        sources_lost = self.stage is not None and any(tp not in assignment for tp in self.stage.inputs)
        if any(p not in owned for p in self.partitions) or sources_lost:
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
        owned = {tp.partition for tp in assignment if tp.topic in self.topics}
        new = sorted(owned - set(self.partitions))
        self.membership = Membership.MEMBER
        if self.stage is not None:
            self.stage.take(tp for tp in assignment if tp.topic in self.settings.repartition)
        if not owned:
            log.info("no partitions assigned to this instance")
            return
        check_layout(self.settings, self.consumer, self.partition_count, assignment)
        if not new:
            return
        for p in new:
            aligner = Aligner(self.topics, self.wall_clock, max_wait=ALIGN_MAX_WAIT_S, waits=self._waits)
            self.partitions[p] = PartitionState(aligner, kept=self.kept.take(p))
        self.flow.hold([TopicPartition(t, p) for p in new for t in self.topics])
        kept = [p for p in new if self.partitions[p].kept]  # taken back unless the offsets moved
        if kept:
            log.info("partitions %s: handed back by the rebalance, kept unless their offsets moved", kept)
        if restore := [p for p in new if p not in kept]:
            log.info("partitions %s: restoring state from %s", restore, self.settings.changelog_topic)

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
            feed = self.feed
            if exc.too_large and feed.dead_letter_limit > MIN_DEAD_LETTER_LIMIT:
                # the broker knows a lower limit than we were told: cut dead-letter copies shorter
                feed.dead_letter_limit = max(MIN_DEAD_LETTER_LIMIT, feed.dead_letter_limit // 2)
            self.loglines.failure(str(exc))
            if exc.topic == self.settings.changelog_topic or exc.topic is None:
                self._check_changelog()
            dead_letters = exc.topic == self.settings.dead_letter_topic or exc.with_dead_letters
            if dead_letters and self.cluster is not None:
                self.cluster.ensure_dead_letter()  # deleted while running: create it again
            self.rewind()
            return 0

    def _round(self) -> int:
        if self.rebalanced is Rebalanced.LOST:
            self.rewind()
        if any(not ps.active for ps in self.partitions.values()):
            self.recovery.step(self.partitions)
        if self.stage is not None:
            self.stage.step()
        batches = self._poll()
        failed, self._give_up_failed = self._give_up_failed, None
        if failed is not None:
            raise failed  # the one failure path: a rewind (run_once)
        if self.sources is not None and self.sources.refresh():
            self.ends.ask_again()  # the repartition topics' ends listed after their sources' offsets
        self.ends.refresh([tp for tp in self.consumer.assignment() if tp not in self.flow.paused])
        if self.rebalanced is Rebalanced.LOST:
            return 0  # every partition starts again from its checkpoint: these are read again
        if self.rebalanced is Rebalanced.REASSIGNED:
            self.follow_assignment()
        processed = self.feed.feed(batches, self.partitions)
        self.minutes.step(self.partitions)
        self.flow.balance(self.partitions, self.topics)
        if time.monotonic() >= self._next_checkpoint and not self.consumer.rejoining():
            # while the group rebalances a checkpoint would likely be refused (its generation is
            # about to end) and cost a rewind: the periodic one waits until it is over
            self.checkpoint()
        self.loglines.status(self.publish(processed=processed), processed)
        return processed

    def _poll(self) -> dict[TopicPartition, list[Any]]:
        try:
            return self.consumer.poll_round(POLL_TIMEOUT_MS, broker_silent=self.ends.broker_silent)
        except GroupProtocolMismatch:
            raise mixed_group(self.settings.group_id) from None

    # --- checkpoints and the published view ----------------------------------------------------

    def checkpoint(self) -> None:
        """Commit the changed state of every partition with a pipeline (active, or giving up),
        the dead-letter records sent since the last checkpoint and the input offsets, as one
        transaction. Raises CheckpointFailed (the transaction is then ended; nothing of it is
        visible)."""
        self._next_checkpoint = time.monotonic() + self.settings.commit_interval
        sources = self.stage.moved_offsets() if self.stage is not None else {}
        changed = any(ps.pipeline is not None and ps.changed() for ps in self.partitions.values())
        if not self.transactions.open and not changed and not sources:
            return
        started = time.monotonic()
        before = self.transactions.bytes_sent
        entries = commit_checkpoint(
            self.transactions,
            self.settings.changelog_topic,
            self.partitions,
            self.consumer.group_metadata(),
            sources,
            self.settings.minutes_topic if self.recovery.partition_count else None,
        )
        if self.stage is not None:
            self.stage.committed_now(sources)
        self.ops.checkpointed(
            self.wall_clock(), time.monotonic() - started, entries, self.transactions.bytes_sent - before
        )

    def publish(self, force: bool = False, processed: int = -1) -> View:
        """Build the merged view the exporter reads: every PUBLISH_INTERVAL_S while a round's
        ``processed`` records leave more to do; after one that leaves nothing, at once (but not
        within IDLE_PUBLISH_GAP_S of the last)."""
        now, published = self.wall_clock(), self._published
        self._stale = self._stale or processed > 0
        idle = self._stale and (processed == 0 or self.feed.idle) and now >= published + IDLE_PUBLISH_GAP_S
        if self.view is not None and not (force or idle) and now < published + PUBLISH_INTERVAL_S:
            return self.view
        self._published, self._stale = now, False
        snapshots = {
            p: ps.pipeline.snapshot() for p, ps in self.partitions.items() if ps.pipeline is not None
        }
        self.ops.partitions_restoring = sum(1 for ps in self.partitions.values() if not ps.active)
        self.view = View(
            settings=self.settings,
            snapshot=merge_snapshots(snapshots.values()),
            partition_watermarks={p: s.watermark for p, s in snapshots.items()},
            consumer_lag={
                **self.ends.lag(self.partitions, self.topics),
                **(self.stage.lag() if self.stage else {}),
            },
            latency_buckets=tuple(self.feed.latency.cumulative()),
            latency_sum=self.feed.latency.total,
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
            if self.rebalanced is Rebalanced.LOST or self.consumer.rejoining():
                # lost, or its generation about to end: refused; the next owner resumes
                log.info("final checkpoint skipped: the group is rebalancing")
            else:
                self.checkpoint()
        except CheckpointFailed as exc:
            log.error("final checkpoint failed: %s; the next owner resumes from the previous one", exc)
            ok = False
        finally:
            remaining = max(0.5, deadline - time.monotonic())
            self.restorer.close()
            self.minutes.close()
            self.transactions.close(timeout=remaining / 2)
            self.consumer.close(
                autocommit=False, timeout_ms=int(max(0.5, deadline - time.monotonic()) * 1000)
            )
        return ok
