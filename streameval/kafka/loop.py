"""The consumer loop: poll, decode, align, process, dead-letter, checkpoint, publish.

State is per partition number: partition p of the impressions topic and partition p of every
events topic feed one :class:`~streameval.pipeline.Pipeline` through one
:class:`~streameval.kafka.align.Aligner`, and its state lives in partition p of the changelog
topic. The life of a partition:

1. assigned: its input partitions are paused; their committed offsets are fetched (with
   ``read_committed`` the broker answers only once no transaction holding offsets for them is
   open); then its state is read back from the changelog up to the end it has at that moment
   (:class:`~streameval.kafka.changelog.Restorer`, a bounded step per loop round);
2. restored: the inputs are sought to those offsets -- exactly what the restored state covers --
   and resumed;
3. every ``commit_interval``, a checkpoint commits the changed state, the dead-letter records
   and the input offsets as one transaction (:mod:`streameval.kafka.checkpoint`);
4. given up in a rebalance (cooperative, :mod:`streameval.kafka.assignor`): in the rebalance
   listener, before the member rejoins for the rebalance that hands it over, a checkpoint
   commits it with the rest, then its state is dropped; the partitions kept go on untouched and
   the ones added start at step 1;
5. lost (the membership expired, so nothing can be committed any more): the open transaction is
   aborted and every owned partition starts again from step 1.

Either way a partition always resumes from a committed checkpoint.

A failed checkpoint or dead-letter send takes the same path as lost partitions: abort, rewind to the
last committed checkpoint, go on. Nothing is lost (the offsets never pass what a committed
checkpoint covers) and nothing counts twice (what an aborted transaction held is redone once).
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.coordinator.base import MemberState
from kafka.errors import InconsistentGroupProtocolError, KafkaError

from streameval import state
from streameval.config import Settings
from streameval.errors import InputError
from streameval.kafka.align import Aligner, Entry
from streameval.kafka.assignor import NAME
from streameval.kafka.changelog import Restorer, lost_state_message
from streameval.kafka.checkpoint import CheckpointFailed, Transactions
from streameval.kafka.deadletter import dead_letter_record
from streameval.kafka.placement import Placement
from streameval.pipeline import GroupCap, Pipeline
from streameval.records import Ignored, Rejection
from streameval.view import Latency, Operations, View, merge_snapshots

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.5
POLL_TIMEOUT_MS = 200
STATUS_LOG_INTERVAL_S = 60.0
PAUSE_ABOVE = 5_000  # buffered records of one topic-partition before it is paused
RESUME_BELOW = 1_000
ALIGN_MAX_WAIT_S = 5.0  # longest wait for a topic that is behind before the others go on
FAILURE_LOG_INTERVAL_S = 60.0
END_OFFSETS_INTERVAL_S = 1.0  # how often the end offsets of the inputs are asked for
END_OFFSETS_MAX_BACKOFF_S = 8.0  # ... at most, while the broker does not answer
DEAD_LETTER_LIMIT = 1_000_000
MIN_DEAD_LETTER_LIMIT = 256


@dataclass
class PartitionState:
    """Everything owned for one partition number. ``pipeline`` is None while restoring."""

    aligner: Aligner
    pipeline: Pipeline | None = None
    next_offsets: dict[str, int] = field(default_factory=dict)  # topic -> first unprocessed
    #: topic -> first offset not fetched yet (the fetch position, tracked here: asking the client
    #: for it costs a scan and may call the group coordinator in the middle of a rebalance)
    fetched: dict[str, int] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)  # topic -> covered by the checkpoint


class _Rebalance(ConsumerRebalanceListener):
    """Called inside ``poll()`` (and ``close()``), on the client's I/O thread while the main thread
    waits for that call, so the state is never changed under it."""

    def __init__(self, loop: ConsumerLoop) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: Any) -> None:
        # Cooperative (KIP-429): this runs before the member rejoins for the follow-up rebalance
        # that hands these partitions to their next owner -- the one moment a checkpoint of them
        # is sure to commit (or be fenced) before that owner reads the committed offsets.
        self.loop.give_up({tp.partition for tp in revoked})

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.loop.reassigned = True

    def on_partitions_lost(self, lost: Any) -> None:
        self.loop.lost = True


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
        ensure_dead_letter_topic: Callable[[], None] | None = None,
        partition_count: int | None = None,
        topic_exists: Callable[[str], bool | None] | None = None,
    ) -> None:
        self.settings = settings
        self.consumer = consumer
        self.transactions = transactions
        self.restorer = restorer
        self.wall_clock = wall_clock
        self.topics = (settings.impressions_topic, *settings.events_topics)
        self.partitions: dict[int, PartitionState] = {}
        self.group_cap = GroupCap.of(settings)
        self.latency = Latency()
        self.ops = Operations()
        #: bytes a dead-letter record may take (the smaller of the producer's max_request_size and
        #: the topic's max.message.bytes; halved when the broker still refuses one)
        self.dead_letter_limit = dead_letter_limit
        self.ensure_dead_letter_topic = ensure_dead_letter_topic
        #: the partition count of the inputs (and the changelog) at start-up
        self.partition_count = partition_count
        #: where the default partitioner puts each query (records elsewhere count as misrouted)
        self.placement = Placement(partition_count) if partition_count else None
        self._misrouted_logged: dict[str, int] = {}
        self._misrouted_next_log = 0.0
        #: asks the cluster whether a topic exists (None: cannot tell now)
        self.topic_exists = topic_exists
        self._changelog_checked = -math.inf
        #: partitions were lost (the membership expired): everything restarts from its checkpoint
        self.lost = False
        #: partitions were given up or added in a cooperative rebalance
        self.reassigned = False
        #: the checkpoint of partitions being given up failed (raised after the poll)
        self._give_up_failed: CheckpointFailed | None = None
        self.closing = False
        self.assigned = False
        self._awaiting_offsets: set[int] = set()
        self._ends: dict[TopicPartition, int] = {}
        self._ends_due = 0.0
        self._ends_backoff = END_OFFSETS_INTERVAL_S
        self.view: View | None = None
        self._next_checkpoint = 0.0
        self._next_publish = 0.0
        self._next_status = time.monotonic() + STATUS_LOG_INTERVAL_S
        self._processed_since_status = 0
        self._paused: set[TopicPartition] = set()
        self._failures_logged_at = -math.inf
        self._failures_unlogged = 0

    def subscribe(self) -> None:
        self.consumer.subscribe(list(self.topics), listener=_Rebalance(self))

    @property
    def ready(self) -> bool:
        return self.assigned and not self.restorer.restoring and not self._awaiting_offsets

    # --- assignment, restore, rewind -----------------------------------------------------------

    def rewind(self) -> None:
        """Abort the open transaction and start every owned partition again from its last
        committed checkpoint (after lost partitions, a failed checkpoint or a failed send)."""
        self.lost = self.reassigned = False
        self.transactions.abort()
        self.restorer.cancel(list(self.restorer.restoring))
        self.partitions = {}
        _reclaim_dropped_state()
        self._awaiting_offsets = set()
        self._paused = set()
        self._ends_backoff = END_OFFSETS_INTERVAL_S
        self._take()
        self.publish(force=True)

    def give_up(self, partitions: set[int]) -> None:
        """Partitions given up in a cooperative rebalance (from the rebalance listener): commit
        a checkpoint now, so that their next owner starts exactly where this one stopped, then
        drop their state. A failed checkpoint is raised after the poll, and rewinds everything."""
        self.reassigned = True
        gone = [p for p in self.partitions if p in partitions]
        if self.closing or not gone:
            return  # closing: the final checkpoint has been taken
        try:
            self.checkpoint()
        except CheckpointFailed as exc:
            self._give_up_failed = exc
            return
        for p in gone:
            del self.partitions[p]
            inputs = {TopicPartition(t, p) for t in self.topics}
            self._paused -= inputs
            for tp in inputs:
                self._ends.pop(tp, None)
        self.restorer.cancel([p for p in gone if p in self.restorer.restoring])
        self._awaiting_offsets.difference_update(gone)
        _reclaim_dropped_state()
        log.info("partitions %s given up to another member", gone)

    def follow_assignment(self) -> None:
        """After a cooperative rebalance: start restoring the partitions added; the kept ones go
        on untouched (those given up were checkpointed and dropped by :meth:`give_up`)."""
        self.reassigned = False
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
        self.assigned = True
        if not owned:
            log.info("no partitions assigned to this instance")
            return
        self._check_layout()
        for p in sorted(owned):
            missing = [t for t in self.topics if TopicPartition(t, p) not in assignment]
            if missing:
                raise InputError(
                    f"partition {p} of {', '.join(missing)} went to another member: the input topics "
                    "are no longer co-partitioned (partitions added to one of them?); give every input "
                    "topic the same partition count and restart"
                )
        if not new:
            return
        inputs = [TopicPartition(t, p) for p in new for t in self.topics]
        for p in new:
            self.partitions[p] = PartitionState(
                Aligner(self.topics, self.wall_clock, max_wait=ALIGN_MAX_WAIT_S)
            )
        self.consumer.pause(*inputs)
        self._paused.update(inputs)
        self._awaiting_offsets.update(new)
        log.info("partitions %s: restoring state from %s", new, self.settings.changelog_topic)

    def _check_layout(self) -> None:
        """The input topics as the cluster has them now must be the layout the state was built
        for: every topic there, each with the partition count of the changelog."""
        counts = {t: len(self.consumer.partitions_for_topic(t) or ()) for t in self.topics}
        gone = [t for t, n in counts.items() if n == 0]
        if gone:
            raise InputError(
                f"input topic(s) {', '.join(gone)} no longer exist (deleted while running?); "
                "create them again with the partition count of the others and restart"
            )
        expected = self.partition_count or max(counts.values())
        if any(n != expected for n in counts.values()):
            described = ", ".join(f"{t}: {n}" for t, n in counts.items())
            raise InputError(
                f"the input topics now have {described} partitions, but the state in "
                f"{self.settings.changelog_topic} was built for {expected} each: a query's records no "
                "longer meet in one partition number. Give every input topic the same partition count, "
                "then rebuild the state (README, Guarantees)"
            )

    def _check_changelog(self) -> None:
        """After a failure that may be a deleted changelog (checked at most every 5 s): stop, as
        its state is lost and going on would give wrong numbers."""
        now = time.monotonic()
        if self.topic_exists is None or now - self._changelog_checked < 5.0:
            return
        self._changelog_checked = now
        if self.topic_exists(self.settings.changelog_topic) is False:
            raise InputError(lost_state_message(self.settings))

    def _fetch_offsets(self) -> None:
        """Committed offsets of the partitions about to be restored; a partition whose offsets
        are not stable yet (a transaction still open) is asked again next round."""
        for p in sorted(self._awaiting_offsets):
            try:
                offsets = self.restorer.committed([TopicPartition(t, p) for t in self.topics])
                self.restorer.start([p])
            except KafkaError as exc:
                log.info("partition %d: committed offsets not available yet (%s)", p, type(exc).__name__)
                self._check_changelog()
                continue
            ps = self.partitions[p]
            for tp, offset in offsets.items():
                if offset is not None:
                    ps.committed[tp.topic] = ps.next_offsets[tp.topic] = offset
            self._awaiting_offsets.discard(p)

    def _restore_step(self) -> None:
        if self._awaiting_offsets:
            self._fetch_offsets()
        for p, (values, records, seconds) in self.restorer.step(timeout_ms=100).items():
            ps = self.partitions.get(p)
            if ps is None:
                continue
            ps.pipeline = state.restore(self.settings, values, self.wall_clock, self.group_cap)
            inputs = [TopicPartition(t, p) for t in self.topics]
            for tp in inputs:
                offset = ps.committed.get(tp.topic)
                if offset is None:
                    offset = self._reset_offset(tp)
                if offset is not None:
                    self.consumer.seek(tp, offset)
                    ps.fetched[tp.topic] = offset
            self.consumer.resume(*inputs)
            self._paused.difference_update(inputs)
            self.ops.restored(records, seconds)
            log.info(
                "partition %d restored: %d changelog records, %d open queries, in %.2f s",
                p,
                records,
                len(ps.pipeline.joiner.open),
                seconds,
            )

    def _reset_offset(self, tp: TopicPartition) -> int | None:
        """Where a partition with no committed offset starts (``auto_offset_reset``), as a
        number; None (and the client's own reset) when the broker cannot say now."""
        earliest = self.settings.kafka.get("auto_offset_reset", "earliest") == "earliest"
        try:
            offsets = (self.consumer.beginning_offsets if earliest else self.consumer.end_offsets)(
                [tp], timeout_ms=2_000
            )
            return int(offsets[tp])
        except (KafkaError, KeyError):
            if earliest:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek_to_end(tp)
            return None

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
            self._log_failure(str(exc))
            if exc.topic == self.settings.changelog_topic or exc.topic is None:
                self._check_changelog()
            if exc.topic == self.settings.dead_letter_topic and self.ensure_dead_letter_topic is not None:
                self.ensure_dead_letter_topic()  # deleted while running: create it again
            self.rewind()
            return 0

    def _round(self) -> int:
        if self.lost:
            self.rewind()
        if self._awaiting_offsets or self.restorer.restoring:
            self._restore_step()
        _release_parked_fetches(self.consumer)
        batches = self._poll()
        keep_join_awaited(self.consumer)
        failed, self._give_up_failed = self._give_up_failed, None
        if failed is not None:
            raise failed  # the one failure path: a rewind (run_once)
        self._refresh_ends()
        if self.lost:
            return 0  # every partition starts again from its checkpoint: these are read again
        if self.reassigned:
            self.follow_assignment()
        for tp, messages in batches.items():
            ps = self.partitions.get(tp.partition)
            if ps is None or ps.pipeline is None:
                continue
            for message in messages:
                ps.aligner.push(self._decode(ps.pipeline, tp.topic, message))
            if messages:
                ps.fetched[tp.topic] = messages[-1].offset + 1
        processed = sum(self._drain(p, ps) for p, ps in self.partitions.items() if ps.pipeline is not None)
        self._flow_control()
        if time.monotonic() >= self._next_checkpoint and not self._rejoining():
            self.checkpoint()
        view = self.publish()
        self._processed_since_status += processed
        if time.monotonic() >= self._next_status:
            self._log_status(view)
        return processed

    def _poll(self) -> dict[TopicPartition, list[Any]]:
        try:
            if self._ends_backoff > END_OFFSETS_INTERVAL_S:
                # the broker does not answer: kafka-python 3.0.12's poll() then spins inside its
                # timeout (a full core with a hung broker), so poll without waiting and wait here
                batches = self.consumer.poll(timeout_ms=0)
                if not batches:
                    time.sleep(POLL_TIMEOUT_MS / 1000)
                return batches
            return self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
        except InconsistentGroupProtocolError:
            raise InputError(
                f"consumer group {self.settings.group_id} has members that assign partitions another "
                f"way (the {NAME} assignor is not among theirs): an older streameval, or another "
                "application using this group_id. Stop them, then start this version; no rolling "
                "upgrade across this change (README, Guarantees)"
            ) from None

    def _rejoining(self) -> bool:
        """The group is rebalancing: a checkpoint now would likely be refused (its generation is
        about to end) and cost a rewind, so the periodic one waits until it is over."""
        return getattr(self.consumer.group_metadata(), "state", None) is MemberState.REBALANCING

    def _log_failure(self, message: str) -> None:
        """The first failure in a minute is logged; the rest are counted into one line a minute."""
        now = time.monotonic()
        if now - self._failures_logged_at >= FAILURE_LOG_INTERVAL_S:
            more = (
                f" ({self._failures_unlogged} more failures in the last minute)"
                if self._failures_unlogged
                else ""
            )
            log.warning("checkpoint failed, rewinding to the last committed checkpoint: %s%s", message, more)
            self._failures_logged_at = now
            self._failures_unlogged = 0
        else:
            self._failures_unlogged += 1

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

    def _log_misrouted(self, view: View) -> None:
        """The topics whose records are not where murmur2 of their query id puts them, and what
        to do: when first seen, then at most once a minute while the counts grow."""
        if time.monotonic() < self._misrouted_next_log:
            return
        misrouted = view.snapshot.counters.misrouted
        grown = {t: n for t, n in misrouted.items() if n > self._misrouted_logged.get(t, 0)}
        if not grown:
            return
        self._misrouted_logged = dict(misrouted)
        self._misrouted_next_log = time.monotonic() + STATUS_LOG_INTERVAL_S
        # the impressions placed one way and some events another: their records need not meet
        # in one partition, and the join misses them (that is what breaks the numbers)
        placed_apart = len({topic in misrouted for topic in self.topics}) > 1
        log.warning(
            "misrouted records (not in the partition murmur2 of their query_id gives), so far: %s.%s "
            "Fix the producer's partitioner (librdkafka's default is CRC32: set "
            "partitioner=murmur2_random) or its key (query_id), or re-key the topic by query_id into "
            "one co-partitioned with the impressions",
            ", ".join(f"{t} {n}" for t, n in sorted(misrouted.items())),
            " The impressions and the events are placed differently, so a query's records may not "
            "meet: the join counts them unknown_query."
            if placed_apart
            else "",
        )

    def _decode(self, pipeline: Pipeline, topic: str, message: Any) -> Entry:
        raw = message.value if message.value is not None else b""
        kafka_ts = None
        if pipeline.decoder.wants_kafka_ts:  # ts = "@timestamp": the record's own, in ms
            timestamp = getattr(message, "timestamp", None)
            kafka_ts = timestamp / 1000 if timestamp is not None and timestamp >= 0 else None
        if topic == self.settings.impressions_topic:
            record: Any = pipeline.decode_impression(raw, kafka_ts)
        else:
            record = pipeline.decode_event(raw, topic, kafka_ts)
        return Entry(topic, message.offset, record, message)

    def _end(self, tp: TopicPartition) -> int | None:
        """The end of an input partition as far as it is known: the larger of the end offset
        asked for at most every END_OFFSETS_INTERVAL_S (the last stable offset, with
        read_committed) and the high watermark of the latest fetch response."""
        try:
            highwater = self.consumer.highwater(tp)
        except KafkaError:
            highwater = None
        listed = self._ends.get(tp)
        if highwater is None:
            return listed
        return highwater if listed is None else max(highwater, listed)

    def _refresh_ends(self) -> None:
        now = time.monotonic()
        if now < self._ends_due:
            return
        self._ends_due = now + END_OFFSETS_INTERVAL_S
        owned = [tp for tp in self.consumer.assignment() if tp not in self._paused]
        if not owned:
            self._ends_backoff = END_OFFSETS_INTERVAL_S  # nothing to ask: poll as usual (and rejoin)
            return
        try:
            self._ends.update(self.consumer.end_offsets(owned, timeout_ms=500))
            self._ends_backoff = END_OFFSETS_INTERVAL_S
        except (KafkaError, KeyError) as exc:  # KeyError: a topic deleted (the rebalance then stops us)
            # the broker is away or hung: an unanswered request stays in flight until the
            # client's request timeout, so asking every second would pile them up (and keep the
            # client's network thread busy): ask less often until it answers again
            self._ends_backoff = min(END_OFFSETS_MAX_BACKOFF_S, self._ends_backoff * 2)
            self._ends_due = now + self._ends_backoff
            log.debug("end offsets not available: %s", exc)

    def _caught_up(self, partition: int, ps: PartitionState) -> Callable[[str], bool]:
        """A topic of this partition is caught up when it has nothing more to fetch now: what
        was fetched reaches its known end (see :meth:`_end`). (An input topic written in
        transactions ends on a commit marker that no fetched record covers: it then counts as
        behind, and the merge waits for it at most ALIGN_MAX_WAIT_S each time it runs dry.)"""

        def caught_up(topic: str) -> bool:
            tp = TopicPartition(topic, partition)
            end = self._end(tp)
            fetched = ps.fetched.get(topic)
            return end is not None and fetched is not None and fetched >= end

        return caught_up

    def _drain(self, partition: int, ps: PartitionState) -> int:
        pipeline = ps.pipeline
        assert pipeline is not None
        caught_up = self._caught_up(partition, ps)
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

    def _flow_control(self) -> None:
        pause, resume = [], []
        for p, ps in self.partitions.items():
            if ps.pipeline is None:
                continue  # restoring: all its inputs stay paused
            for topic in self.topics:
                tp = TopicPartition(topic, p)
                n = ps.aligner.buffered(topic)
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

    # --- checkpoints and the published view ----------------------------------------------------

    def checkpoint(self) -> None:
        """Commit the changed state of every restored partition, the dead-letter records sent
        since the last checkpoint and the input offsets, as one transaction. Raises
        CheckpointFailed (the transaction is then ended; nothing of it is visible)."""
        self._next_checkpoint = time.monotonic() + self.settings.commit_interval
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        owners = []
        for p, ps in self.partitions.items():
            if ps.pipeline is None:
                continue
            moved = {t: o for t, o in ps.next_offsets.items() if ps.committed.get(t) != o}
            if not moved and not state.pending(ps.pipeline):
                continue
            owners.append((p, ps.pipeline, ps, moved))
            for topic, offset in moved.items():
                offsets[TopicPartition(topic, p)] = OffsetAndMetadata(offset, "", -1)
        if not owners and not self.transactions.open:
            return
        started = time.monotonic()
        before = self.transactions.bytes_sent
        entries = 0
        for p, pipeline, _, _ in owners:
            entries += self.transactions.send_many(
                self.settings.changelog_topic, p, state.checkpoint_entries(pipeline)
            )
        self.transactions.commit(offsets, self.consumer.group_metadata())
        for _, _, ps, moved in owners:
            ps.committed.update(moved)
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
        lag = {}
        for p, ps in self.partitions.items():
            for topic in self.topics:
                end = self._end(TopicPartition(topic, p))
                start = ps.next_offsets.get(topic, ps.committed.get(topic))
                if end is not None:
                    lag[(topic, p)] = max(0, end - (start if start is not None else 0))
        self.ops.partitions_restoring = len(self.restorer.restoring) + len(self._awaiting_offsets)
        self.view = View(
            settings=self.settings,
            snapshot=merge_snapshots(snapshots.values()),
            partition_watermarks={p: s.watermark for p, s in snapshots.items()},
            consumer_lag=lag,
            latency_buckets=tuple(self.latency.cumulative()),
            latency_sum=self.latency.total,
            wall_time=now,
            ops=self.ops.copy(),
            ready=self.ready,
        )
        self._log_misrouted(self.view)
        return self.view

    def close(self) -> bool:
        """A final checkpoint, then close every client within ``shutdown_timeout``; returns
        whether the final checkpoint committed."""
        deadline = time.monotonic() + self.settings.shutdown_timeout
        self.closing = True
        ok = True
        self.transactions.timeout = max(1.0, self.settings.shutdown_timeout * 0.6)
        try:
            if self.lost or self._rejoining():
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


def _reclaim_dropped_state() -> None:
    """A partition's dropped state is held in reference cycles (its pipeline and join point at
    each other), which only a full collection reclaims; the daemon runs those itself, every few
    minutes (``streameval/collector.py``), so a dropped state is collected now instead."""
    gc.collect()


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


class _AwaitedJoin:
    """A group join that a poll gave up waiting for, shown to the next poll as still running, so
    that the next poll awaits it (and takes its result) whether or not it has finished since."""

    __slots__ = ("task",)
    is_done = False  # what kafka-python's join loop reads to decide to send a new JoinGroup

    def __init__(self, task: Any) -> None:
        self.task = task

    def add_callback(self, f: Any, *args: Any, **kwargs: Any) -> _AwaitedJoin:
        self.task.add_callback(f, *args, **kwargs)
        return self

    def add_errback(self, f: Any, *args: Any, **kwargs: Any) -> _AwaitedJoin:
        self.task.add_errback(f, *args, **kwargs)
        return self

    def __await__(self) -> Any:
        return self.task.__await__()


def keep_join_awaited(consumer: KafkaConsumer) -> None:
    """Work around a kafka-python 3.0.12 rebalance that never ends (README, Guarantees).

    A poll waits for the group join (JoinGroup, then SyncGroup) at most its own timeout and leaves
    the join running on the client's network thread for the next poll to await. But when the
    join has finished by then, the next poll sees a finished task and sends a new JoinGroup
    instead of taking its result: the assignment is dropped and the member stays "rejoining".
    A new JoinGroup from the group's leader starts a new rebalance, the other members rejoin
    (learning it at their next heartbeat, seconds later), the leader's 200 ms poll gives up
    again, and so on forever: the leader never takes its assignment, and the others' commits
    fail with RebalanceInProgress. Reproduced with two bare consumers (a leader made to rejoin
    first rebalanced the group every 3 s for as long as it was watched; with this, it rejoined
    once). Wrapping the running join after each poll makes the next poll await it, finished or
    not.

    A second way to lose the assignment: a rebalance this member starts because a subscribed
    topic changed (deleted, partitions added) is "needed" only while the metadata differs from
    what the last assignment was made for -- and as leader, this member's own assignment inside
    the running join makes them equal again. When the join outlives the poll, the next poll
    finds no rejoin needed and never awaits it: the new assignment is never taken, and the
    member stays "rebalancing" (seen in the test that deletes an input topic, about one run in
    two). Marking the rejoin as needed while the join runs makes the next poll await it; the
    flag is cleared when the join's result is taken. Guarded so that a client without these
    attributes is left alone.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_join_task", None)
    if task is None or not hasattr(task, "add_errback") or not hasattr(coordinator, "rejoin_needed"):
        return
    coordinator.rejoin_needed = True  # type: ignore[union-attr]
    if not isinstance(task, _AwaitedJoin):
        coordinator._join_task = _AwaitedJoin(task)  # type: ignore[union-attr]
