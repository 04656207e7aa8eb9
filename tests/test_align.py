from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streameval.kafka.align import Aligner, Entry
from streameval.records import Engagement, Ignored, Impression, Rejection


def imp(offset: int, ts: float) -> Entry:
    return Entry("imps", offset, Impression(f"q{offset}", ts, ("a",), ()), None)


def ev(offset: int, ts: float) -> Entry:
    return Entry("evs", offset, Engagement("q", "a", "click", ts, None), None)


def test_merges_topics_in_event_time_order() -> None:
    aligner = Aligner(["imps", "evs"], clock=lambda: 0.0)
    for e in (imp(0, 10), imp(1, 30), ev(0, 20), ev(1, 40)):
        aligner.push(e)
    order = []
    while (entry := aligner.pop(lambda topic: True)) is not None:
        order.append(entry.record.ts)  # type: ignore[union-attr]
    assert order == [10, 20, 30, 40]


def test_waits_for_a_topic_that_is_behind_then_gives_up_after_max_wait() -> None:
    now = [0.0]
    aligner = Aligner(["imps", "evs"], clock=lambda: now[0], max_wait=5.0)
    aligner.push(imp(0, 10))
    assert aligner.pop(lambda topic: topic == "imps") is None  # evs has data not fetched yet
    now[0] = 4.9
    assert aligner.pop(lambda topic: topic == "imps") is None
    now[0] = 5.0
    assert aligner.pop(lambda topic: topic == "imps") is not None


def test_a_caught_up_topic_does_not_block() -> None:
    aligner = Aligner(["imps", "evs"], clock=lambda: 0.0)
    aligner.push(imp(0, 10))
    assert aligner.pop(lambda topic: True) is not None


def test_rejections_go_out_at_the_head_of_their_topic_in_offset_order() -> None:
    aligner = Aligner(["imps", "evs"], clock=lambda: 0.0)
    aligner.push(imp(0, 50))
    aligner.push(Entry("imps", 1, Rejection("not_json", "x"), None))
    aligner.push(ev(0, 10))
    offsets = []
    while (entry := aligner.pop(lambda topic: True)) is not None:
        offsets.append((entry.topic, entry.offset))
    assert offsets == [("evs", 0), ("imps", 0), ("imps", 1)]


def test_the_wait_is_timed_per_topic_and_starts_again_when_a_topic_runs_dry() -> None:
    """A topic that waited out its time (here: one that never gets data) must not let the merge
    run ahead of another topic that falls behind later."""
    now = [0.0]
    aligner = Aligner(["imps", "evs", "buys"], clock=lambda: now[0], max_wait=5.0)
    behind = {"buys"}  # never caught up, never any data

    def caught_up(topic: str) -> bool:
        return topic not in behind

    aligner.push(imp(0, 10))
    aligner.push(ev(0, 11))
    assert aligner.pop(caught_up) is None
    now[0] = 5.0
    assert aligner.pop(caught_up).offset == 0  # type: ignore[union-attr]  # buys waited out
    # evs runs dry with records still to fetch: the merge waits for it again, 5 s from now
    aligner.push(imp(1, 20))
    assert aligner.pop(caught_up).topic == "evs"  # type: ignore[union-attr]
    behind.add("evs")
    assert aligner.pop(caught_up) is None
    now[0] = 9.9
    assert aligner.pop(caught_up) is None
    now[0] = 10.0
    assert aligner.pop(caught_up).topic == "imps"  # type: ignore[union-attr]


def test_a_topic_with_records_on_the_broker_blocks_without_a_time_limit() -> None:
    """Records known to be on the broker past what was fetched are waited for however long the
    fetch takes; once none are known, the timed wait starts from then."""
    now = [0.0]
    aligner = Aligner(["imps", "evs"], clock=lambda: now[0], max_wait=5.0)
    aligner.push(imp(0, 10))
    behind = {"evs"}

    def is_behind(topic: str) -> bool:
        return topic in behind

    def caught_up(topic: str) -> bool:
        return topic == "imps"

    assert aligner.pop(caught_up, is_behind) is None
    now[0] = 600.0
    assert aligner.pop(caught_up, is_behind) is None
    behind.clear()  # fetched up to the listed end; the end may still grow
    assert aligner.pop(caught_up, is_behind) is None
    now[0] = 604.9
    assert aligner.pop(caught_up, is_behind) is None
    now[0] = 605.0
    assert aligner.pop(caught_up, is_behind) is not None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["imps", "evs", "buys"]),
            st.one_of(st.none(), st.just(-1), st.integers(0, 20)),  # None: rejected; -1: ignored
        ),
        max_size=40,
    ),
    st.sets(st.sampled_from(["imps", "evs", "buys"])),
    st.sampled_from([("imps", "evs", "buys"), ("imps", "evs")]),
)
def test_take_hands_out_what_pop_does_in_the_same_order(records, caught, topics) -> None:
    """take() -- the loop's way, a fast path while every topic holds a record (one of its
    own for two topics) -- and pop() called until None give the same entries in the same
    order, and leave the same behind."""

    def fill() -> Aligner:
        aligner = Aligner(topics, clock=lambda: 0.0, max_wait=5.0)
        for offset, (topic, ts) in enumerate(records):
            topic = topic if topic in topics else topics[-1]
            record = (
                Rejection("not_json", "x")
                if ts is None
                else Ignored("view")
                if ts == -1
                else Engagement("q", "a", "click", float(ts), None)
                if topic != "imps"
                else Impression("q", float(ts), ("a",), ())
            )
            aligner.push(Entry(topic, offset, record, None))
        return aligner

    def caught_up(topic: str) -> bool:
        return topic in caught

    by_pop, popped = fill(), []
    while (entry := by_pop.pop(caught_up)) is not None:
        popped.append(entry.offset)
    by_take = fill()
    assert [e.offset for e in by_take.take(caught_up)] == popped
    assert len(by_take) == len(by_pop)
