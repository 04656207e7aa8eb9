"""The join, settling and the watermark, as the daemon runs them (bounded memory)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streameval.config import load_settings
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression
from tests.logs import random_log
from tests.pipelines import remembering

T0 = 1_700_000_000.0


def records_of(log, drop_duplicate_impressions=True):
    seen = set()
    out = []
    for r in log.valid_impressions:
        if drop_duplicate_impressions and r["query_id"] in seen:
            continue
        seen.add(r["query_id"])
        group = (r.get("model", "unknown"), r.get("surface", "unknown"))
        out.append(Impression(r["query_id"], r["ts"], tuple(r["items"]), group))
    out += [
        Engagement(r["query_id"], str(r["item"]), r["type"], r["ts"], r.get("event_id"))
        for r in log.valid_events
    ]
    return out


def run(records, settings, remember=False):
    pipeline = Pipeline(remembering(settings) if remember else settings)
    for r in records:
        pipeline.process(r)
    pipeline.finish()
    return pipeline


def settled_parts(pipeline):
    return {
        g: (s.queries, s.with_relevant, s.relevant_items, [round(x, 9) for x in s.sums])
        for g, s in pipeline.settled_totals.items()
    }


@given(st.integers(0, 10**6), st.floats(0.0, 1.0))
def test_arrival_order_within_allowed_lateness_does_not_matter(seed, spread) -> None:
    settings = load_settings(None, {}, {"allowed_lateness": "30s"})
    rng = random.Random(seed)
    records = records_of(random_log(rng, n_queries=25, bad=False))
    in_order = sorted(records, key=lambda r: r.ts)
    # each record may arrive up to `allowed_lateness` after records with later timestamps
    jittered = sorted(records, key=lambda r: r.ts + rng.uniform(0, 30.0 * spread))
    a, b = run(in_order, settings), run(jittered, settings)
    assert settled_parts(a) == settled_parts(b)
    assert sum(a.counters.unattributed.values()) == sum(b.counters.unattributed.values())
    assert a.counters.attributed == b.counters.attributed


@pytest.mark.parametrize("seed", range(3))
def test_daemon_memory_bounds_give_the_batch_metrics(seed) -> None:
    settings = load_settings(None, {}, {})
    records = sorted(
        records_of(random_log(random.Random(seed), n_queries=80, bad=False, span=6 * 3600)),
        key=lambda r: r.ts,
    )
    bounded, batch = run(records, settings), run(records, settings, remember=True)
    assert settled_parts(bounded) == settled_parts(batch)
    assert not bounded.joiner.open and not bounded.joiner.orphans


@given(
    st.integers(0, 10**6),
    st.sampled_from(["0s", "10s", "5m"]),
    st.sampled_from(["1", "3", "50"]),
    st.booleans(),
)
def test_replay_batch_join_is_the_pipeline_on_time_ordered_input(seed, lateness, max_groups, ties) -> None:
    # replay's batch join (files in any order within themselves) against the daemon's pipeline
    # remembering until the end, fed the stable time-ordered merge (impressions first)
    from streameval.replay import join_in_batch
    from streameval.scoring.query import compact

    settings = load_settings(
        None,
        {},
        {"allowed_lateness": lateness, "horizons": {"purchase": "2h"}, "max_groups": max_groups},
    )
    rng = random.Random(seed)
    records = records_of(random_log(rng, n_queries=40, span=4 * 3600), drop_duplicate_impressions=False)
    if ties:  # many records at one time: the order of the files decides
        for r in records:
            r.ts = float(int(r.ts) // 600 * 600)
    imps = [r for r in records if type(r) is Impression]
    evs = [r for r in records if type(r) is Engagement]
    # copies of an event id with other content, earlier or later than the first
    for ev in [e for e in evs if e.event_id is not None][:4]:
        item, ts = rng.choice(["i1", "i2", "nowhere"]), ev.ts + rng.choice([-60.0, 0.0, 60.0])
        evs.append(Engagement(ev.query_id, item, "purchase", ts, ev.event_id))
    rng.shuffle(imps)
    rng.shuffle(evs)

    daemon = run(sorted(imps + evs, key=lambda r: r.ts), settings, remember=True)
    replay = Pipeline(settings)
    join_in_batch(
        replay,
        [(i.query_id, i.ts, compact(i.items), i.group) for i in imps],
        [(e.query_id, e.item, e.type, e.ts, e.event_id) for e in evs],
    )
    assert replay.counters == daemon.counters
    assert settled_parts(replay) == settled_parts(daemon)
    assert list(replay.group_cap.known) == list(daemon.group_cap.known)  # admitted in one order


def settings_(**overrides):
    base = {"horizon": "30m", "allowed_lateness": "10s", "orphan_ttl": "5m", "metrics": ["map@10"]}
    return load_settings(None, {}, base | overrides)


def imp(qid="q", ts=T0, items=("a", "b", "c")):
    return Impression(qid, ts, tuple(items), ("m", "s"))


def ev(qid="q", item="a", ts=T0 + 1, kind="click", event_id=None):
    return Engagement(qid, item, kind, ts, event_id)


def test_orphan_is_claimed_by_its_impression() -> None:
    p = Pipeline(settings_())
    p.process(ev(ts=T0 + 5))
    assert p.joiner.orphan_count == 1
    p.process(imp(ts=T0))
    assert p.joiner.orphan_count == 0 and p.counters.attributed == 1


def test_orphan_expires_after_ttl_as_unknown_query() -> None:
    p = Pipeline(settings_())
    p.process(ev(ts=T0))
    p.process(imp("other", ts=T0 + 300 + 10 + 1))  # watermark passes T0 + orphan_ttl
    assert p.counters.unattributed == {"unknown_query": 1}
    assert p.joiner.orphan_count == 0
    p.process(imp("q", ts=T0 - 1))
    assert p.counters.attributed == 0


def test_event_past_horizon_and_before_impression() -> None:
    p = Pipeline(settings_(horizons={"purchase": "24h"}))
    p.process(imp(ts=T0))
    p.process(ev(ts=T0 - 1))
    p.process(ev(item="b", ts=T0 + 1801))
    p.process(ev(item="c", ts=T0 + 1801, kind="purchase"))  # the purchase horizon is longer
    assert p.counters.unattributed == {"before_impression": 1, "after_horizon": 1}
    assert p.counters.attributed == 1


def test_settled_query_is_final_and_late_events_change_nothing() -> None:
    p = Pipeline(settings_())
    p.process(imp(ts=T0))
    p.process(imp("later", ts=T0 + 1800 + 10 + 1))  # watermark passes T0 + max horizon
    assert "q" not in p.joiner.open
    before = settled_parts(p)
    p.process(ev(ts=T0 + 60))  # within the horizon, but the query has settled
    p.process(ev(ts=T0 + 1900))  # past the horizon, judged by event time
    assert p.counters.unattributed == {"late": 1, "after_horizon": 1}
    assert settled_parts(p) == before


def test_duplicate_impression_first_wins_and_duplicate_event_counts_once() -> None:
    p = Pipeline(remembering(settings_()))
    p.process(imp(items=("a", "b")))
    p.process(imp(items=("b", "a")))
    p.process(ev(item="a", event_id="e1"))
    p.process(ev(item="b", event_id="e1"))
    p.process(ev(item="a", ts=T0 + 2))
    p.process(ev(item="a", ts=T0 + 2))
    p.finish()
    assert p.counters.duplicates == {"impressions": 1, "events": 2}
    (sums,) = p.settled_totals.values()
    assert sums.sums == [1.0]  # "a" at rank 1 of the first list


def test_watermark_never_moves_back_and_idles_with_the_wall_clock() -> None:
    now = [1000.0]
    p = Pipeline(settings_(), wall_clock=lambda: now[0])
    p.process(imp(ts=T0))
    assert p.watermark.value == T0 - 10
    p.process(imp("old", ts=T0 - 500))
    assert p.watermark.value == T0 - 10
    now[0] += 2000.0
    p.tick()
    assert p.watermark.value == T0 - 10 + 2000
    assert "q" not in p.joiner.open  # settled in the quiet period
    p.process(imp("new", ts=T0 + 5))
    assert p.watermark.value == T0 - 10 + 2000


def test_provisional_sums_follow_open_queries_and_drain_to_zero() -> None:
    p = Pipeline(settings_())
    p.process(imp(ts=T0))
    p.process(ev(item="b", ts=T0 + 1))
    prov = p.snapshot().provisional[("m", "s")]
    assert (prov.queries, prov.with_relevant, prov.sums) == (1, 1, [0.5])
    p.process(imp("later", ts=T0 + 4000))
    snap = p.snapshot()
    assert snap.settled[("m", "s")].sums == [0.5]
    assert snap.provisional[("m", "s")].with_relevant == 0


def test_windows_hold_settled_queries_by_impression_time() -> None:
    p = Pipeline(settings_(windows=["1h", "24h"]))
    p.process(imp("old", ts=T0))
    p.process(ev("old", item="a", ts=T0 + 1))
    p.process(imp("new", ts=T0 + 7200))
    p.process(ev("new", item="b", ts=T0 + 7201))
    p.process(imp("flush", ts=T0 + 7200 + 1800 + 11))  # settles "old" and "new"
    windows = p.snapshot().windows
    assert windows["24h"][("m", "s")].queries == 2
    assert windows["1h"][("m", "s")].queries == 1
    assert windows["1h"][("m", "s")].sums == [0.5]


def test_max_groups_folds_new_groups_into_other() -> None:
    p = Pipeline(remembering(settings_(max_groups=2)))
    for i in range(4):
        p.process(Impression(f"q{i}", T0 + i, ("a",), (f"m{i}", "s")))
    p.finish()
    assert set(p.settled_totals) == {("m0", "s"), ("m1", "s"), ("__other__", "__other__")}
    assert p.counters.groups_folded == 2


def test_impression_after_its_settling_time_is_dropped_as_late() -> None:
    p = Pipeline(settings_())
    p.process(imp("now", ts=T0 + 4000))
    p.process(imp("q", ts=T0))  # T0 + 1800 < watermark T0 + 3990
    assert p.counters.late_impressions == 1 and "q" not in p.joiner.open


def test_a_shared_group_cap_holds_across_pipelines() -> None:
    from streameval.pipeline import GroupCap

    settings = settings_(max_groups=2)
    cap = GroupCap(settings.max_groups, len(settings.group_by))
    a, b = Pipeline(settings, group_cap=cap), Pipeline(settings, group_cap=cap)
    a.process(Impression("q0", T0, ("a",), ("m0", "s")))
    b.process(Impression("q1", T0, ("a",), ("m1", "s")))
    b.process(Impression("q2", T0, ("a",), ("m2", "s")))
    a.process(Impression("q3", T0, ("a",), ("m0", "s")))
    assert set(a.provisional) == {("m0", "s")}
    assert set(b.provisional) == {("m1", "s"), ("__other__", "__other__")}
    assert b.counters.groups_folded == 1


def test_a_duplicate_impression_takes_no_group_slot() -> None:
    p = Pipeline(remembering(settings_(max_groups=1)))
    p.process(Impression("q", T0, ("a",), ("m0", "s")))
    p.process(Impression("q", T0 + 1, ("a",), ("m9", "s")))  # a duplicate, of another group
    p.process(Impression("r", T0 + 2, ("a",), ("m0", "s")))
    p.finish()
    assert set(p.settled_totals) == {("m0", "s")} and p.counters.groups_folded == 0
