"""The cooperative assignor's plan: whole partition numbers, balanced, sticky, never two owners,
and settled after the follow-up rebalance its moves start."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import TopicPartition
from kafka.cluster import ClusterMetadata

from streameval.kafka.assignor import CooperativeCopartitioned, plan


@st.composite
def groups(draw):
    partitions = draw(st.integers(0, 12))
    members = [f"m{i}" for i in range(draw(st.integers(1, 5)))]
    owned = {m: set(draw(st.lists(st.integers(0, partitions + 1), max_size=partitions))) for m in members}
    return partitions, members, owned


@settings(max_examples=400, deadline=None)
@given(groups())
def test_plan_is_balanced_sticky_and_never_gives_a_number_two_owners(group) -> None:
    partitions, members, owned = group
    final, now = plan(partitions, members, owned)
    placed = [p for m in members for p in final[m]]
    assert sorted(placed) == list(range(partitions))
    sizes = [len(final[m]) for m in members]
    assert max(sizes) - min(sizes) <= 1
    for m in members:
        assert now[m] <= final[m]
        for other in members:
            if other != m:
                assert not now[m] & owned[other], "assigned while another member still holds it"
    # a member holding no more than the smallest share, unchallenged, keeps all it holds
    contested = {p for m in members for o in members if o != m for p in owned[m] & owned[o]}
    for m in members:
        mine = {p for p in owned[m] if p < partitions} - contested
        if len(mine) <= partitions // len(members):
            assert mine <= now[m]


@settings(max_examples=400, deadline=None)
@given(groups())
def test_plan_settles_after_the_follow_up_rebalance(group) -> None:
    partitions, members, owned = group
    for _ in range(3):
        final, now = plan(partitions, members, owned)
        if now == final and all(owned[m] == final[m] for m in members):
            break
        owned = now  # every member gives up what it lost and rejoins
    else:
        raise AssertionError(f"not settled after three rounds: {owned} -> {final}")
    assert plan(partitions, members, owned) == (final, final)


class _Member:
    def __init__(self, member_id: str, assignor: CooperativeCopartitioned, topics: list[str]) -> None:
        self.member_id = member_id
        self.group_instance_id = None
        self.metadata = assignor.metadata(topics)


def test_assign_gives_each_member_the_same_numbers_of_every_topic() -> None:
    cluster = ClusterMetadata()
    topics = ["impressions", "clicks"]
    cluster._partitions = {t: {p: None for p in range(4)} for t in topics}
    a, b = CooperativeCopartitioned(), CooperativeCopartitioned()
    a.owned = lambda: [TopicPartition(t, p) for t in topics for p in range(4)]
    first = a.assign(cluster, [_Member("a", a, topics), _Member("b", b, topics)])
    # round 1: a keeps two numbers of both topics, b waits until a has given up the other two
    assert sorted(first["a"].partitions()) == sorted(TopicPartition(t, p) for t in topics for p in (0, 1))
    assert first["b"].partitions() == []
    a.owned = lambda: first["a"].partitions()
    second = a.assign(cluster, [_Member("a", a, topics), _Member("b", b, topics)])
    assert sorted(second["b"].partitions()) == sorted(TopicPartition(t, p) for t in topics for p in (2, 3))
    assert sorted(second["a"].partitions()) == sorted(first["a"].partitions())


def test_members_subscribed_to_other_topics_take_nothing_from_the_others() -> None:
    cluster = ClusterMetadata()
    topics = ["impressions", "clicks"]
    cluster._partitions = {t: {p: None for p in range(3)} for t in topics} | {"other": {0: None}}
    a, b = CooperativeCopartitioned(), CooperativeCopartitioned()
    a.owned = lambda: [TopicPartition(t, p) for t in topics for p in range(3)]
    out = a.assign(cluster, [_Member("a", a, topics), _Member("b", b, ["other"])])
    assert sorted(out["a"].partitions()) == sorted(a.owned())
    assert out["b"].partitions() == [TopicPartition("other", 0)]


def test_the_stage_topics_go_to_one_member_and_stay_with_it() -> None:
    cluster = ClusterMetadata()
    joined, staged = ["impressions", "rekeyed"], ["clicks"]
    cluster._partitions = {t: {p: None for p in range(3)} for t in joined} | {
        "clicks": {p: None for p in range(5)}
    }
    topics = joined + staged
    a, b = CooperativeCopartitioned(staged), CooperativeCopartitioned(staged)
    # b runs the stage and holds one join number; a holds the others
    b.owned = lambda: [TopicPartition("clicks", p) for p in range(5)] + [TopicPartition(t, 2) for t in joined]
    a.owned = lambda: [TopicPartition(t, p) for t in joined for p in (0, 1)]
    out = a.assign(cluster, [_Member("a", a, topics), _Member("b", b, topics)])
    clicks = {
        m: sorted(tp.partition for tp in out[m].partitions() if tp.topic == "clicks") for m in ("a", "b")
    }
    assert clicks == {"a": [], "b": [0, 1, 2, 3, 4]}  # sticky: where it is
    numbers = {m: {tp.partition for tp in out[m].partitions() if tp.topic in joined} for m in ("a", "b")}
    assert numbers == {"a": {0, 1}, "b": {2}}  # the join numbers balanced as before
    # b gone: a takes the stage over at once (nobody else holds it)
    alone = a.assign(cluster, [_Member("a", a, topics)])
    assert sorted(tp.partition for tp in alone["a"].partitions() if tp.topic == "clicks") == [0, 1, 2, 3, 4]
