"""Partition state as changelog entries: checkpoint, restore, carry on -- as if never stopped."""

from __future__ import annotations

import functools
import math
import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streameval import packs as packs_module
from streameval import state
from streameval.config import load_settings
from streameval.errors import StateError
from streameval.pipeline import Pipeline
from streameval.scoring.query import OLD_SEP, SEP
from tests.logs import random_log
from tests.pipelines import ingest

T0 = 1_700_000_000.0
SETTINGS = load_settings(
    None,
    {},
    {
        "metrics": ["map@5", "ndcg@5", "wmap@5", "recall@3", "mrr@5"],
        "horizon": "10m",
        "horizons": '{purchase = "30m"}',
        "orphan_ttl": "2m",
        "windows": ["5m", "1h"],
    },
)


def raw_records(seed: int, n_queries: int = 120) -> list[tuple[str, bytes]]:
    """Records in arrival order (roughly by time), with bad ones, as a topic would hold them."""
    log = random_log(random.Random(seed), n_queries=n_queries, t0=T0, span=3 * 3600.0, horizon=600.0)
    out = [("impressions", r) for r in log.impressions] + [("clicks", r) for r in log.events]

    def ts(item: tuple[str, bytes]) -> float:
        try:
            obj = orjson.loads(item[1])
            return float(obj["ts"]) if isinstance(obj.get("ts"), int | float) else T0
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            return T0

    return sorted(out, key=ts)


def feed(pipeline: Pipeline, records: list[tuple[str, bytes]]) -> None:
    for topic, raw in records:
        ingest(pipeline, raw, topic, topic == "impressions")


def changelog_replay(log: list[tuple[bytes, bytes | None]]) -> Pipeline:
    records = [(k, v, f"changelog[0]@{i}") for i, (k, v) in enumerate(log)]
    return state.restore(SETTINGS, state.latest(records))


def comparable(p: Pipeline) -> dict:
    snap = p.snapshot()

    def table(t: dict) -> dict:
        return {g: (s.queries, s.with_relevant, s.relevant_items, s.sums, s.squares) for g, s in t.items()}

    c = snap.counters
    return {
        "watermark": snap.watermark,
        "frontier": snap.frontier,
        "windows": {w: table(groups) for w, groups in snap.windows.items()},
        "settled": table(snap.settled),
        "provisional": {g: v for g, v in table(snap.provisional).items() if v[0]},
        "open": snap.open_queries,
        "orphans": snap.orphans_held,
        "tombstones": len(p.joiner.tombstones),
        "seen": len(p.joiner.seen),
        "counters": (c.consumed, c.rejected, c.unattributed, c.duplicates, c.attributed, c.late_impressions),
    }


def assert_same(a: Pipeline, b: Pipeline) -> None:
    left, right = comparable(a), comparable(b)
    assert left.keys() == right.keys()
    for key in left:
        assert _close(left[key], right[key]), key


def _close(x, y) -> bool:
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_close(i, j) for i, j in zip(x, y, strict=True))
    if isinstance(x, float) and isinstance(y, float):
        return x == y or math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-9)
    return bool(x == y)


@given(seed=st.integers(0, 10_000), cuts=st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_restore_from_checkpoints_then_carry_on_equals_never_stopping(seed: int, cuts: list[float]) -> None:
    records = raw_records(seed)
    uninterrupted = Pipeline(SETTINGS)
    feed(uninterrupted, records)

    # checkpoints at the cut points into one changelog; after the last one, a restore
    log: list[tuple[bytes, bytes | None]] = []
    live = Pipeline(SETTINGS)
    live.record_changes()
    done = 0
    for cut in sorted(cuts):
        upto = int(cut * len(records))
        feed(live, records[done:upto])
        done = upto
        log += state.checkpoint_entries(live)
    restored = changelog_replay(log)
    assert_same(restored, live)
    feed(restored, records[done:])
    assert_same(restored, uninterrupted)


def test_checkpoint_writes_only_what_changed() -> None:
    records = raw_records(7, n_queries=400)
    p = Pipeline(SETTINGS)
    p.record_changes()
    feed(p, records[:-20])
    state.checkpoint_entries(p)
    feed(p, records[-20:])
    entries = state.checkpoint_entries(p)
    assert len(entries) <= 20 * 4 + 1  # a record touches a few keys at most, plus the totals
    assert state.checkpoint_entries(p) == [entries[-1]]  # nothing changed: only the totals


def test_a_checkpoint_reads_the_queries_in_the_order_they_first_changed() -> None:
    """About the order they were made in, and so in memory: the query packs hold the queries
    in the order of their impressions, a query changed again keeping its place."""
    p = Pipeline(SETTINGS)
    p.record_changes()
    for q in ("c", "a", "b", "a"):
        ingest(p, orjson.dumps({"query_id": q, "ts": T0, "items": ["i1", "i2"]}), "impressions", True)
    ingest(p, orjson.dumps({"query_id": "c", "item": "i1", "type": "click", "ts": T0 + 1}), "clicks", False)
    p.changes.update([("q", "d"), ("q", "b")])
    assert [key for key in p.changes.take() if key[0] == "q"] == [
        ("q", "c"),
        ("q", "a"),
        ("q", "b"),
        ("q", "d"),
    ]
    ingest(p, orjson.dumps({"query_id": "e", "ts": T0, "items": ["i1"]}), "impressions", True)
    ingest(p, orjson.dumps({"query_id": "f", "ts": T0, "items": ["i1"]}), "impressions", True)
    (_, raw), *_ = state.checkpoint_entries(p)
    assert [entry[0] for entry in orjson.loads(raw)["q"]] == ["e", "f"]


def test_deleted_keys_are_written_as_nulls_and_state_stays_bounded() -> None:
    records = raw_records(3)
    p = Pipeline(SETTINGS)
    p.record_changes()
    log: list[tuple[bytes, bytes | None]] = []
    feed(p, records)
    log += state.checkpoint_entries(p)
    # far later: everything settles, tombstones, keys and buckets are forgotten
    ingest(p, orjson.dumps({"query_id": "late", "ts": T0 + 30 * 86400, "items": ["a"]}), "impressions", True)
    log += state.checkpoint_entries(p)
    live = state.latest([(k, v, "x") for k, v in log])
    assert set(live) == {b"p:1", b"t"}  # the first pack is deleted: all of it forgotten
    assert_same(changelog_replay(log), p)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_packs_restored_at_any_checkpoint_carry_on_as_never_stopped(seed: int) -> None:
    """Checkpoints every few dozen records over hours of traffic: packs outlive some of their
    entries (the restore drops what the watermark passed), and a restore from any checkpoint
    carries on as if never stopped, while the live packs stay few."""
    records = raw_records(seed, n_queries=300)
    uninterrupted = Pipeline(SETTINGS)
    feed(uninterrupted, records)
    rng = random.Random(seed)
    log: list[tuple[bytes, bytes | None]] = []
    live = Pipeline(SETTINGS)
    live.record_changes()
    stops = sorted(rng.sample(range(len(records)), 3))
    step = 40
    for start in range(0, len(records), step):
        feed(live, records[start : start + step])
        log += state.checkpoint_entries(live)
        if any(start <= stop < start + step for stop in stops):
            restored = changelog_replay(log)
            assert_same(restored, live)
            feed(restored, records[start + step :])
            assert_same(restored, uninterrupted)
    held = [k for k in state.latest([(k, v, "x") for k, v in log]) if k.startswith(b"p:")]
    assert len(held) < len(log) / 20


def test_packs_stay_under_their_size_and_hold_each_entry_once() -> None:
    """Checkpoints of entries of uneven sizes (one larger than a pack): every pack but a
    one-entry one stays under PACK_BYTES, a checkpoint writes each changed key in exactly one of
    its packs, in order, and ``where`` and ``live`` say which pack holds each key's newest entry
    and how many newest entries each pack holds."""
    rng = random.Random(5)
    packs = packs_module.Packs()
    big = packs_module.PACK_BYTES + 1
    for round_ in range(5):
        changed = list(dict.fromkeys(("q", f"q{rng.randrange(8000)}") for _ in range(6000)))
        sizes = {key: rng.choice([40, 300, 300, 320, 3000]) for key in changed}
        sizes[changed[len(changed) // 2]] = big if round_ == 2 else 300
        entries = {key: ("q", [key[1], "x" * size]) for key, size in sizes.items()}
        by_kind = functools.partial(packs_module.by_kind, entry=entries.__getitem__)
        out = packs.write(changed, by_kind, version=4)
        written: list[tuple[int, str]] = []
        for name, raw in out:
            if raw is None:
                continue
            held_entries = orjson.loads(raw)["q"]
            assert len(raw) <= packs_module.PACK_BYTES or len(held_entries) == 1
            written += [(packs_module.number(name), query_id) for query_id, _ in held_entries]
        assert [query_id for _, query_id in written] == [key[1] for key in changed]
        assert all(packs.where[("q", query_id)] == n for n, query_id in written)
        held: dict[int, int] = {}
        for n in packs.where.values():
            held[n] = held.get(n, 0) + 1
        assert packs.live == held


def test_a_dedup_key_pack_goes_when_the_watermark_passes_its_latest_key() -> None:
    """Dedup keys are written once and not accounted one by one: their pack is deleted at the
    first checkpoint whose watermark is past the latest time in it, and not before."""
    packs = packs_module.Packs()
    first = packs.write([], None, version=5, seen=[("a", 100.0), (["b", "x"], 300.0), ("c", 200.0)])
    second = packs.write([], None, version=5, seen=[("d", 150.0)], watermark=99.0)
    assert [name for name, _ in first + second] == [b"p:0", b"p:1"]
    assert orjson.loads(first[0][1])["s"] == [["a", 100.0], [["b", "x"], 300.0], ["c", 200.0]]
    assert packs.write([], None, version=5, watermark=150.0) == []  # a time equal to it is held
    assert packs.write([], None, version=5, watermark=150.5) == [(b"p:1", None)]
    assert packs.write([], None, version=5, watermark=300.0) == []
    assert packs.write([], None, version=5, watermark=301.0) == [(b"p:0", None)]
    assert packs.until == {} and packs.live == {} and packs.where == {}


def _format_3(p: Pipeline) -> list[tuple[bytes, bytes | None]]:
    """The whole state as format 3 wrote it: a record per query and per dedup key."""

    def dumps(value: dict) -> bytes:
        return orjson.dumps({"v": 3, **value})

    joiner = p.joiner
    out = [(k, v) for k, v in state.all_entries(p) if not k.startswith(b"p:")]
    for q in joiner.open.values():
        value = {"ts": q.ts, "group": q.group, "score": q.score.to_dict()}
        out.append((b"q:" + q.query_id.encode(), dumps(value)))
    for query_id, settled in joiner.tombstones.items():
        out.append((b"q:" + query_id.encode(), dumps({"settled": settled})))
    for key, until in joiner.seen.items():
        out.append((b"s:" + orjson.dumps(key), dumps({"until": until})))
    return out


def test_a_format_3_changelog_moves_into_packs_at_the_first_checkpoint() -> None:
    records = raw_records(11, n_queries=200)
    p = Pipeline(SETTINGS)
    feed(p, records[: len(records) // 2])
    log = _format_3(p)
    assert any(k.startswith(b"s:") for k, _ in log) and any(k.startswith(b"q:") for k, _ in log)
    restored = changelog_replay(log)
    assert_same(restored, p)
    log += state.checkpoint_entries(restored)
    held = state.latest([(k, v, "x") for k, v in log])
    assert not [k for k in held if k[:2] in (b"q:", b"s:")]
    again = changelog_replay(log)
    assert_same(again, p)
    feed(again, records[len(records) // 2 :])
    feed(p, records[len(records) // 2 :])
    assert_same(again, p)


def _format_4(log: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """The same changelog as format 4 wrote it: shown lists joined with the unit separator."""
    out = []
    for key, value in log:
        if value is not None and key.startswith(b"p:"):
            pack = orjson.loads(value)
            for row in pack.get("q", ()):
                if isinstance(row[3][0], str):
                    assert OLD_SEP not in row[3][0]
                    row[3][0] = row[3][0].replace(SEP, OLD_SEP)
            value = orjson.dumps({**pack, "v": 4})
        out.append((key, value))
    return out


def test_a_format_4_changelog_restores_and_carries_on_as_never_stopped() -> None:
    records = raw_records(13, n_queries=200)
    p = Pipeline(SETTINGS)
    p.record_changes()
    feed(p, records[: len(records) // 2])
    log = _format_4(state.checkpoint_entries(p))
    assert b"\\u001f" in b"".join(v or b"" for _, v in log)  # shown lists held as strings
    restored = changelog_replay(log)
    assert_same(restored, p)
    assert all(q.score.items == p.joiner.open[q.query_id].score.items for q in restored.joiner.open.values())
    log += state.checkpoint_entries(restored)  # nothing changed: nothing rewritten
    feed(restored, records[len(records) // 2 :])
    feed(p, records[len(records) // 2 :])
    assert_same(restored, p)
    again = changelog_replay(log + state.checkpoint_entries(restored))
    assert_same(again, p)


@pytest.mark.parametrize(
    "value,needle",
    [
        (b"{not json", "is not JSON"),
        (orjson.dumps({"v": 99, "settled": 1.0}), "format 99"),
        (orjson.dumps({"v": state.FORMAT_VERSION, "ts": 1.0}), "does not fit"),
    ],
)
def test_unreadable_state_names_where_it_is(value: bytes, needle: str) -> None:
    with pytest.raises(StateError) as err:
        state.restore(SETTINGS, state.latest([(b"q:x", value, "app-changelog[2]@17")]))
    assert "app-changelog[2]@17" in str(err.value) and needle in str(err.value)
