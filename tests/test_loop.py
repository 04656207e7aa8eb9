"""The consumer loop's decisions against fake clients (tests/fakes.py): the phases of a partition,
checkpoints, rebalances, rewinds, flow control, end offsets. The same loop on the real broker:
tests/integration."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as settings_hypothesis
from hypothesis import strategies as st
from kafka import TopicPartition
from kafka.partitioner.default import murmur2 as kafka_murmur2

from streameval.config import load_settings
from streameval.kafka.checkpoint import CheckpointFailed
from streameval.kafka.ends import END_OFFSETS_INTERVAL_S, END_OFFSETS_MAX_BACKOFF_S, EndOffsets
from streameval.kafka.flow import PAUSE_ABOVE, RESUME_BELOW, FlowControl
from streameval.kafka.loop import ConsumerLoop, Membership, Rebalanced
from streameval.kafka.partitions import PartitionState, Phase
from streameval.kafka.placement import Placement, murmur2
from tests.fakes import Cluster, FakeConsumer, FakeRestorer, FakeTransactions

T0 = 1_700_000_000.0
TOPICS = {"impressions": 2, "clicks": 2}


def settings(**overrides):
    return load_settings(None, {}, {"events_topics": ["clicks"], "commit_interval": "1s", **overrides})


def make_loop(cluster: Cluster, wall_clock=lambda: T0 + 3600, **kwargs):
    consumer = FakeConsumer(cluster)
    transactions = FakeTransactions(cluster)
    restorer = FakeRestorer(cluster)
    loop = ConsumerLoop(settings(), consumer, transactions, restorer, wall_clock=wall_clock, **kwargs)
    loop.subscribe()
    return loop, consumer, transactions, restorer


def inputs(*partitions: int) -> set[TopicPartition]:
    return {TopicPartition(t, p) for p in partitions for t in TOPICS}


def write_queries(cluster: Cluster, n: int, ts: float = T0) -> None:
    """n queries, each in the partition murmur2 of its id gives, with one click each."""
    placement = Placement(2)
    for i in range(n):
        qid = f"q{i}"
        p = placement.partition_of(qid)
        cluster.produce("impressions", p, orjson.dumps({"query_id": qid, "ts": ts + i, "items": ["a", "b"]}))
        click = {"query_id": qid, "item": "b", "type": "click", "ts": ts + i + 1}
        cluster.produce("clicks", p, orjson.dumps(click))


def rounds(loop: ConsumerLoop, n: int = 5) -> int:
    return sum(loop.run_once() for _ in range(n))


def assign(loop, consumer, *partitions: int) -> None:
    consumer.rebalance(inputs(*partitions))
    loop.run_once()  # the poll that rebalances


def test_an_assigned_partition_goes_from_awaiting_offsets_through_restoring_to_active() -> None:
    cluster = Cluster(TOPICS)
    loop, consumer, _, restorer = make_loop(cluster)
    assert loop.membership is Membership.JOINING and not loop.ready
    restorer.offsets_unavailable = 2  # the first asks (one per partition) find a transaction open
    assign(loop, consumer, 0, 1)
    assert loop.membership is Membership.MEMBER
    assert {p: ps.phase for p, ps in loop.partitions.items()} == {
        0: Phase.AWAITING_OFFSETS,
        1: Phase.AWAITING_OFFSETS,
    }
    assert consumer.paused == inputs(0, 1)  # nothing is read before the state is back
    assert not loop.ready
    loop.run_once()  # offsets unavailable: asked again next round
    assert all(ps.phase is Phase.AWAITING_OFFSETS for ps in loop.partitions.values())
    loop.run_once()
    assert all(ps.phase is Phase.ACTIVE for ps in loop.partitions.values())
    assert consumer.paused == set() and loop.ready
    assert consumer.positions == {tp: 0 for tp in inputs(0, 1)}  # nothing committed: the beginning


def test_phases_move_only_forward_along_their_transitions() -> None:
    cluster = Cluster(TOPICS)
    loop, *_ = make_loop(cluster)
    ps = PartitionState(aligner=None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="from awaiting offsets to active"):
        ps.restored(None)  # type: ignore[arg-type]
    ps.offsets_known({"impressions": 5, "clicks": None})
    assert ps.phase is Phase.RESTORING and ps.committed == {"impressions": 5}
    with pytest.raises(RuntimeError):
        ps.offsets_known({})
    ps.revoke()
    assert ps.phase is Phase.GIVING_UP
    ps.revoke()  # the listener may be told twice before the rewind


def test_records_are_processed_and_a_checkpoint_commits_their_offsets_with_the_state() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, transactions, _ = make_loop(cluster)
    assign(loop, consumer, 0, 1)
    assert rounds(loop) == 40
    loop.checkpoint()
    assert cluster.committed == {tp: len(cluster.logs[tp]) for tp in inputs(0, 1)}
    assert cluster.changelog  # the state went with them
    commits = len(transactions.commits)
    loop.checkpoint()  # nothing changed since: no transaction
    assert len(transactions.commits) == commits
    view = loop.publish(force=True)
    assert view.snapshot.counters.attributed == 20
    assert sum(view.consumer_lag.values()) == 0


def test_a_restart_resumes_from_the_checkpoint_with_the_same_state() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, _, _ = make_loop(cluster)
    assign(loop, consumer, 0, 1)
    rounds(loop)
    assert loop.close()
    before = loop.publish(force=True).snapshot.counters.attributed
    write_queries(cluster, 10, ts=T0 + 100)  # more while it was away (ids q0..q9 again: duplicates)
    loop2, consumer2, _, _ = make_loop(cluster)
    assign(loop2, consumer2, 0, 1)
    rounds(loop2)
    assert {tp: consumer2.positions[tp] for tp in inputs(0, 1)} == {
        tp: len(cluster.logs[tp]) for tp in inputs(0, 1)
    }
    counters = loop2.publish(force=True).snapshot.counters
    # restored: the new impressions are copies of open queries, which their clicks then count for
    assert counters.duplicates["impressions"] == 10
    assert counters.attributed == before + 10


def test_partitions_given_up_are_checkpointed_before_they_are_dropped() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, transactions, _ = make_loop(cluster)
    assign(loop, consumer, 0, 1)
    rounds(loop)
    assign(loop, consumer, 0)  # partition 1 goes to another member
    assert set(loop.partitions) == {0}
    assert all(cluster.committed[tp] == len(cluster.logs[tp]) for tp in inputs(1))
    assert loop.rebalanced is Rebalanced.NOTHING and loop.ready


def _eager_loop(cluster: Cluster):
    """A loop whose consumer rebalances eagerly (librdkafka's classic protocol), holding 0 and 1
    after the queries written so far."""
    loop, consumer, transactions, restorer = make_loop(cluster)
    consumer.eager = True
    assign(loop, consumer, 0, 1)
    rounds(loop)
    assert restorer.started == [0, 1]
    return loop, consumer, transactions, restorer


def _attributed(loop: ConsumerLoop) -> int:
    return loop.publish(force=True).snapshot.counters.attributed


def test_an_eager_rebalance_keeps_the_state_of_the_partitions_it_hands_back() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, _, restorer = _eager_loop(cluster)
    kept = loop.partitions[0].pipeline
    assign(loop, consumer, 0)  # every partition revoked and checkpointed; 0 handed back
    assert all(cluster.committed[tp] == len(cluster.logs[tp]) for tp in inputs(0, 1))
    write_queries(cluster, 30, ts=T0 + 100)  # q0..q19 again (duplicates), q20..q29 new
    rounds(loop)
    assert restorer.started == [0, 1]  # not restored again
    assert loop.partitions[0].pipeline is kept and loop.ready
    assert {tp: consumer.positions[tp] for tp in inputs(0)} == {tp: len(cluster.logs[tp]) for tp in inputs(0)}
    # the same as a member that held partition 0 throughout
    alone, alone_consumer, _, _ = make_loop(cluster)
    assign(alone, alone_consumer, 0)
    rounds(alone)
    assert _attributed(loop) == _attributed(alone) > 0


def test_state_is_restored_when_a_generation_was_missed_or_the_offsets_moved() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, _, restorer = _eager_loop(cluster)
    consumer.generations_missed = 1  # a generation passed without this member
    assign(loop, consumer, 0, 1)
    rounds(loop)
    assert restorer.started == [0, 1, 0, 1]
    before = _attributed(loop)
    assign(loop, consumer, 0, 1)  # the next generation this time, but another member committed
    cluster.committed[TopicPartition("impressions", 1)] = 1
    rounds(loop)
    assert restorer.started == [0, 1, 0, 1, 1]  # 0 kept, 1 restored
    consumer.rejoin_as = "member-2"  # handed back to this member under a new id
    assign(loop, consumer, 0)
    rounds(loop)
    assert restorer.started == [0, 1, 0, 1, 1, 0]
    assert _attributed(loop) <= before


def test_a_failed_checkpoint_in_an_eager_rebalance_keeps_nothing() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, transactions, restorer = _eager_loop(cluster)
    write_queries(cluster, 10, ts=T0 + 100)
    loop.run_once()
    transactions.fail_next_commit = True
    assign(loop, consumer, 0, 1)  # the give-up checkpoint fails: a rewind
    rounds(loop)
    assert restorer.started == [0, 1, 0, 1] and loop.ready
    assert len(loop.kept) == 0


def test_a_failed_checkpoint_while_giving_up_rewinds_every_partition() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, transactions, _ = make_loop(cluster)
    assign(loop, consumer, 0, 1)
    rounds(loop)
    transactions.fail_next_commit = True
    assign(loop, consumer, 0)
    # the failure is raised after the poll and rewinds: partition 0 restarts from its checkpoint
    assert set(loop.partitions) == {0}
    assert loop.partitions[0].phase is Phase.AWAITING_OFFSETS
    assert loop.view is not None and loop.view.ops.checkpoint_failures == 1
    rounds(loop)
    assert loop.partitions[0].active


def test_lost_partitions_abort_the_transaction_and_restart_from_the_checkpoint() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    loop, consumer, transactions, _ = make_loop(cluster)
    assign(loop, consumer, 0, 1)
    loop.run_once()  # offsets and restore
    loop.run_once()  # the first records, not checkpointed
    consumer.lose_next = True
    loop.run_once()
    assert loop.rebalanced is Rebalanced.LOST
    assign(loop, consumer, 0, 1)  # rewinds first, then takes the new assignment
    assert loop.rebalanced is Rebalanced.NOTHING
    rounds(loop)
    assert loop.publish(force=True).snapshot.counters.attributed == 20  # nothing counted twice


def test_records_placed_elsewhere_than_murmur2_puts_them_are_counted_misrouted() -> None:
    cluster = Cluster(TOPICS)
    write_queries(cluster, 10)
    placement = Placement(2)
    for i in range(5):  # clicks in the other partition
        qid = f"q{i}"
        wrong = 1 - placement.partition_of(qid)
        cluster.produce(
            "clicks", wrong, orjson.dumps({"query_id": qid, "item": "a", "type": "click", "ts": T0 + i})
        )
    loop, consumer, _, _ = make_loop(cluster, partition_count=2)
    assign(loop, consumer, 0, 1)
    rounds(loop)
    assert dict(loop.publish(force=True).snapshot.counters.misrouted) == {"clicks": 5}


class _Aligner:
    def __init__(self, held: dict[str, int]) -> None:
        self.held = held

    def buffered(self, topic: str) -> int:
        return self.held.get(topic, 0)


def test_flow_control_pauses_a_topic_held_back_and_resumes_it_once_drained() -> None:
    consumer = FakeConsumer(Cluster(TOPICS))
    flow = FlowControl(consumer)
    ps = PartitionState(_Aligner({"impressions": PAUSE_ABOVE + 1}), phase=Phase.ACTIVE)  # type: ignore[arg-type]
    restoring = PartitionState(_Aligner({"impressions": PAUSE_ABOVE + 1}))  # type: ignore[arg-type]
    flow.balance({0: ps, 1: restoring}, TOPICS)
    assert consumer.paused == flow.paused == {TopicPartition("impressions", 0)}
    ps.aligner.held["impressions"] = RESUME_BELOW  # type: ignore[attr-defined]
    flow.balance({0: ps}, TOPICS)
    assert flow.paused == {TopicPartition("impressions", 0)}  # not below RESUME_BELOW yet
    ps.aligner.held["impressions"] = RESUME_BELOW - 1  # type: ignore[attr-defined]
    flow.balance({0: ps}, TOPICS)
    assert consumer.paused == flow.paused == set()


def test_the_merge_waits_for_a_topic_with_records_on_the_broker_however_long_its_fetch_stalls() -> None:
    """A topic whose fetches bring nothing (a rebalance, a slow broker) while the broker has
    committed records past what was fetched holds the merge back for as long as that lasts --
    past the aligner's max_wait -- so none of those records is counted late."""
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    now = [T0 + 3600]
    loop, consumer, *_ = make_loop(cluster, wall_clock=lambda: now[0])
    consumer.stalled = {TopicPartition("clicks", 0), TopicPartition("clicks", 1)}
    assign(loop, consumer, 0, 1)
    processed = 0
    for _ in range(6):
        loop.ends.due = 0.0  # the end offsets listed every round
        processed += loop.run_once()
        now[0] += 10.0  # well past the aligner's max_wait each round
    assert processed == 0
    consumer.stalled = set()
    assert rounds(loop) == 40
    assert loop.publish(force=True).snapshot.counters.attributed == 20


def test_the_view_is_rebuilt_at_once_after_a_round_that_leaves_nothing_to_do() -> None:
    """While records are processed and more wait, the view is rebuilt every PUBLISH_INTERVAL_S;
    a round that processes nothing, or after which every partition has processed all there is,
    rebuilds it at once, unless it was built within IDLE_PUBLISH_GAP_S. (The wall clock moves
    0.2 s a round here: only those rounds can rebuild it.)"""
    cluster = Cluster(TOPICS)
    write_queries(cluster, 20)
    now = [T0 + 3600]
    loop, consumer, *_ = make_loop(cluster, wall_clock=lambda: now[0])
    consumer.stalled = {TopicPartition("clicks", 0)}  # partition 0's merge waits for its clicks

    def round_() -> int:
        now[0] += 0.2
        return loop.run_once()

    def consumed() -> int:
        assert loop.view is not None
        return sum(loop.view.snapshot.counters.consumed.values())

    assign(loop, consumer, 0, 1)
    assert consumed() == 0
    first = round_()  # partition 1 processes everything, partition 0 waits
    assert first > 0 and len(loop.partitions[0].aligner) > 0
    assert consumed() == 0  # more to do: not rebuilt
    assert round_() == 0
    assert consumed() == first  # nothing processed: rebuilt
    consumer.stalled = set()
    assert round_() == 40 - first
    assert consumed() == 40  # nothing left to do: rebuilt in the same round
    write_queries(cluster, 1, ts=T0 + 100)
    now[0] -= 0.15  # the next round comes 0.05 s after the last build
    assert round_() == 2 and consumed() == 40  # too soon after the last
    assert round_() == 0 and consumed() == 42


def test_end_offsets_are_asked_less_often_while_the_broker_does_not_answer() -> None:
    now = [0.0]
    consumer = FakeConsumer(Cluster(TOPICS))
    ends = EndOffsets(consumer, clock=lambda: now[0])
    tp = TopicPartition("impressions", 0)
    consumer.end_offsets_fail = True
    backoffs = []
    for _ in range(6):
        ends.refresh([tp])
        backoffs.append(ends.backoff)
        now[0] = ends.due
    assert backoffs == [2.0, 4.0, 8.0, 8.0, 8.0, 8.0] and END_OFFSETS_MAX_BACKOFF_S == 8.0
    assert ends.broker_silent
    consumer.end_offsets_fail = False
    ends.refresh([tp])
    assert ends.backoff == END_OFFSETS_INTERVAL_S and not ends.broker_silent
    assert ends.end(tp) == 0


class _Later:
    """An answer that comes in when the test says so."""

    def __init__(self) -> None:
        self.offsets: dict[TopicPartition, int] | None = None

    def result(self) -> dict[TopicPartition, int] | None:
        return self.offsets


def test_end_offsets_are_taken_when_the_answer_is_in_and_not_after_the_partitions_went() -> None:
    now = [0.0]
    consumer = FakeConsumer(Cluster(TOPICS))
    asked: list[_Later] = []

    def request(tps: list[TopicPartition], timeout_ms: int) -> _Later:
        asked.append(_Later())
        return asked[-1]

    consumer.request_end_offsets = request  # type: ignore[method-assign]
    ends = EndOffsets(consumer, clock=lambda: now[0])
    tp = TopicPartition("impressions", 0)
    ends.refresh([tp])
    ends.refresh([tp])
    assert len(asked) == 1 and ends.end(tp) is None  # not waited for, and not asked twice
    asked[0].offsets = {tp: 7}
    ends.refresh([tp])
    assert ends.end(tp) == 7 and not ends.broker_silent
    now[0] = ends.due
    ends.refresh([tp])
    assert len(asked) == 2
    ends.forget([tp])  # revoked: the answer to what was asked before is dropped
    asked[1].offsets = {tp: 9}
    ends.refresh([])
    assert ends.end(tp) is None and len(asked) == 2


def _run_until_idle(loop: ConsumerLoop, clock: list[float], rounds_: int = 12) -> None:
    """Rounds with a checkpoint after each (the stage's writes become visible on commit) and
    the end offsets' clock moving on, so that a repartition topic can count as complete."""
    for _ in range(rounds_):
        loop.run_once()
        loop.checkpoint()
        clock[0] += 10.0


def _rekeying_loop(cluster: Cluster) -> tuple[ConsumerLoop, FakeTransactions, list[float]]:
    """A loop with clicks (3 partitions) repartitioned for impressions on 2, assigned all of it at
    its next poll; its end offsets run on the returned clock."""
    consumer = FakeConsumer(cluster)
    transactions = FakeTransactions(cluster)
    loop = ConsumerLoop(
        settings(repartition=["clicks"]),
        consumer,
        transactions,
        FakeRestorer(cluster),
        wall_clock=lambda: T0 + 3600,
        partition_count=2,
    )
    clock = [0.0]
    loop.ends.clock = lambda: clock[0]
    loop.subscribe()
    consumer.rebalance(
        {TopicPartition(t, p) for t in ("impressions", "streameval-repartition-clicks") for p in (0, 1)}
        | {TopicPartition("clicks", p) for p in range(3)}
    )
    return loop, transactions, clock


def test_the_stage_rekeys_events_by_query_and_the_join_counts_them_as_from_their_topic() -> None:
    cluster = Cluster({"impressions": 2, "clicks": 3, "streameval-repartition-clicks": 2})
    placement = Placement(2)
    for i in range(30):
        qid = f"q{i}"
        cluster.produce(
            "impressions",
            placement.partition_of(qid),
            orjson.dumps({"query_id": qid, "ts": T0 + i, "items": ["a", "b"]}),
        )
        click = orjson.dumps({"query_id": qid, "item": "b", "type": "click", "ts": T0 + i + 1})
        cluster.produce("clicks", i % 3, click, key=b"user-%d" % (i % 7))  # keyed by user
    cluster.produce("clicks", 1, b"{not json", key=b"user-1")
    loop, transactions, clock = _rekeying_loop(cluster)
    _run_until_idle(loop, clock)
    counters = loop.publish(force=True).snapshot.counters
    assert counters.attributed == 30
    assert dict(counters.consumed) == {"impressions": 30, "clicks": 31}  # counted under their topic
    assert dict(counters.rejected) == {("clicks", "not_json"): 1}
    assert dict(counters.misrouted) == {}
    # each re-keyed record is in the partition of its query, keyed by its query id
    for p in (0, 1):
        for message in cluster.logs[TopicPartition("streameval-repartition-clicks", p)]:
            if message.value.startswith(b'{"'):
                assert placement.partition_of(message.key.decode()) == p
    # the stage's source offsets were committed with the writes
    assert {tp: o for tp, o in cluster.committed.items() if tp.topic == "clicks"} == {
        TopicPartition("clicks", p): len(cluster.logs[TopicPartition("clicks", p)]) for p in range(3)
    }
    assert loop.ready


def _queries_clicked_by_user(cluster: Cluster, n: int) -> list[tuple[int, bytes, str]]:
    """n queries on 2 impressions partitions, each clicked once, the clicks keyed by user on 3
    partitions; returns (the query's partition, the click, the query id) of each."""
    placement = Placement(2)
    clicks = []
    for i in range(n):
        qid = f"q{i}"
        cluster.produce(
            "impressions",
            placement.partition_of(qid),
            orjson.dumps({"query_id": qid, "ts": T0 + i, "items": ["a"]}),
        )
        click = orjson.dumps({"query_id": qid, "item": "a", "type": "click", "ts": T0 + i})
        cluster.produce("clicks", i % 3, click, key=b"user")
        clicks.append((placement.partition_of(qid), click, qid))
    return clicks


def test_an_aborted_checkpoint_writes_the_stages_records_again_once() -> None:
    cluster = Cluster({"impressions": 2, "clicks": 3, "streameval-repartition-clicks": 2})
    _queries_clicked_by_user(cluster, 12)
    loop, transactions, clock = _rekeying_loop(cluster)
    loop.run_once()  # the assignment
    loop.run_once()  # offsets known, sought; the stage writes into the open transaction
    loop.run_once()
    transactions.fail_next_commit = True
    with pytest.raises(CheckpointFailed):
        loop.checkpoint()
    loop.rewind()
    _run_until_idle(loop, clock)
    rekeyed = sum(len(cluster.logs[TopicPartition("streameval-repartition-clicks", p)]) for p in (0, 1))
    assert rekeyed == 12  # the aborted writes never became visible; written again once
    assert loop.publish(force=True).snapshot.counters.attributed == 12


def test_the_join_waits_for_source_records_another_members_stage_has_not_committed() -> None:
    """The stage runs elsewhere (here: nowhere yet, as after its member died) with source
    records past their committed offsets: however long that lasts, the join does not count the
    empty repartition topic complete; once those records are written and their offsets
    committed, every one is attributed."""
    cluster = Cluster({"impressions": 2, "clicks": 3, "streameval-repartition-clicks": 2})
    clicks = _queries_clicked_by_user(cluster, 12)
    now = [T0 + 3600]
    consumer = FakeConsumer(cluster)
    loop = ConsumerLoop(
        settings(repartition=["clicks"], allowed_lateness="0s", orphan_ttl="1s"),
        consumer,
        FakeTransactions(cluster),
        FakeRestorer(cluster),
        wall_clock=lambda: now[0],
        partition_count=2,
    )
    loop.subscribe()
    consumer.rebalance(
        {TopicPartition(t, p) for t in ("impressions", "streameval-repartition-clicks") for p in (0, 1)}
    )
    processed = 0
    for _ in range(8):
        assert loop.sources is not None
        loop.sources.due = loop.ends.due = 0.0
        processed += loop.run_once()
        now[0] += 60.0  # past every timed wait
    assert processed == 0 and loop.sources.pending
    # the stage's next owner writes them and commits its source offsets with them
    for p, click, qid in clicks:
        cluster.produce("streameval-repartition-clicks", p, click, key=qid.encode())
    for p in range(3):
        cluster.committed[TopicPartition("clicks", p)] = len(cluster.logs[TopicPartition("clicks", p)])
    loop.sources.due = 0.0
    assert rounds(loop) == 24
    assert loop.publish(force=True).snapshot.counters.attributed == 12


@pytest.mark.parametrize(
    ("key", "partition"),
    # Kafka's Java producer: Utils.toPositive(Utils.murmur2(key)) % 1000
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_placement_murmur2_is_the_java_clients(key: bytes, partition: int) -> None:
    assert (murmur2(key) & 0x7FFFFFFF) % 1000 == partition


@settings_hypothesis(max_examples=2000, deadline=None)
@given(st.binary(max_size=400))
def test_placement_murmur2_equals_kafka_pythons_for_every_key(key: bytes) -> None:
    assert murmur2(key) == kafka_murmur2(key)
