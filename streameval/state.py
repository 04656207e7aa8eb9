"""What one partition's state *is*, and how it becomes changelog entries and back. No I/O.

A partition's results depend on: its open queries (with their incremental scores), the
tombstones of settled queries and the event dedup keys it still remembers, the orphans it holds,
the window buckets, the cumulative settled sums, every counter, and the watermark. They are
stored per key, as Kafka Streams stores a key-value store in a compacted changelog topic:

====================  ==========================================================================
key                   value (JSON; every value carries ``"v"``, the format version)
====================  ==========================================================================
``p:<n>``             a pack (:mod:`streameval.packs`): entries of open queries (``q``: id, time,
                      group, score), of tombstones of settled ones (``t``: id, impression time)
                      or of event dedup keys (``s``: key, when it is forgotten); deleted once
                      none of its queries is the newest entry of a query still held, or once the
                      watermark passed the latest time of its dedup keys
``o:<query_id>``      the orphans waiting for that query; deleted when none is left
``w:<window>:<n>``    bucket n of a window: per group, the sums of its settled queries
``m:<minute>``        a minute not handed on to the detectors yet: per group, the moments of its
                      settled queries (README, Regression detectors)
``d``                 partition 0 only: the consumer group's detectors and the minutes topic
                      offset they have read to
``t``                 the totals: watermark, settled frontier, cumulative settled sums, counters,
                      the last minute handed on, the number of the next pack
====================  ==========================================================================

A checkpoint writes only what changed since the previous one: the changed queries and the dedup
keys remembered since then in new packs (and a null for each pack left with nothing held), each
other changed key (a deleted one as a null value, which compaction removes), plus ``t`` and the
open ``m:`` minutes (one or two, at the settled frontier: cheaper to write each time than to
record per settled query). So the write cost of a checkpoint is a few entries per record
processed in a few records, however large the state, and a restore reads the live state (plus
what compaction has not removed yet), not the history.

Format 3 and older kept a record per query (``q:<query_id>``) and per dedup key
(``s:<dedup key>``). A restore reads them, and the first checkpoint after it writes all of them
into packs and deletes the old records, in one transaction. Format 4 joined a shown list held as
one string with another separator (:data:`~streameval.scoring.query.OLD_SEP`); a restore reads
it as it is (``QueryScore.from_row``), and the query's next entry is written in format 5.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from streameval import native
from streameval.config import Settings
from streameval.errors import StateError
from streameval.join import OpenQuery
from streameval.minutes import Combiner
from streameval.packs import Entries, Packs, by_kind, number
from streameval.pipeline import Counters, GroupCap, Pipeline
from streameval.records import Engagement
from streameval.scoring import QueryScore, Sums

#: The version of the layout above that checkpoints write. Version 2 stores a query's shown
#: list as ``items`` (version 1: ``rank_of``, item -> first rank, slower to write); version 3
#: adds the ``m:`` and ``d`` keys of the regression detectors (an older reader would not know
#: them: the version makes it say so); version 4 keeps queries and dedup keys in packs; version
#: 5 joins a shown list with DEL instead of the unit separator (which JSON escapes: a 20-item
#: list's entry took ~400 bytes instead of ~290, and longer to encode and decode).
FORMAT_VERSION = 5
#: The versions a restore reads; it refuses any other.
READABLE_VERSIONS = (1, 2, 3, 4, 5)
TOTALS_KEY = b"t"
DETECTORS_KEY = b"d"

Entry = tuple[bytes, bytes | None]


def pending(pipeline: Pipeline) -> int:
    """How many keys changed since the last checkpoint (the detectors' state counts as one, as
    does a minute due to be handed on)."""
    combiner, minutes = pipeline.combiner, pipeline.minutes
    due = minutes is not None and minutes.due(pipeline.windows.frontier)
    return len(pipeline.changes) + (combiner is not None and combiner.changed) + due


def checkpoint_entries(pipeline: Pipeline) -> list[Entry]:
    """The entries of every key that changed since the last call, then the totals; clears the
    record of changes."""
    changes = pipeline.changes
    keys = changes.take()
    if pipeline.minutes is not None and pipeline.minutes.open:  # the minute(s) at the frontier
        keys = list(dict.fromkeys([*keys, *(("m", m) for m in pipeline.minutes.open)]))
    watermark = pipeline.watermark.value
    remembered = [entry for entry in changes.take_seen() if entry[1] >= watermark]  # else forgotten
    out = pipeline.packs.write(
        [key for key in keys if key[0] == "q"],
        _packed_entries(pipeline),
        FORMAT_VERSION,
        pipeline.packs.empty(),
        remembered,
        watermark,
    )
    out += [_entry(pipeline, key) for key in keys if key[0] != "q"]
    combiner = pipeline.combiner
    if combiner is not None and combiner.changed:
        combiner.changed = False
        out.append((DETECTORS_KEY, _dumps(combiner.to_dict())))
    out.append((TOTALS_KEY, _dumps(_totals(pipeline))))
    return out


def all_entries(pipeline: Pipeline) -> list[Entry]:
    """Every entry of the whole state, as a restore would need it (tests and benchmarks)."""
    joiner = pipeline.joiner
    packed: list[Any] = [("q", q) for q in (*joiner.open, *joiner.tombstones)]
    keys: list[Any] = [("o", q) for q in joiner.orphans]
    keys += [("w", ring.window.name, i) for ring in pipeline.windows.rings for i in ring.buckets]
    keys += [("m", m) for m in (pipeline.minutes.open if pipeline.minutes else ())]
    pipeline.packs = Packs(pipeline.packs.next)
    seen = list(joiner.seen.items())
    out = pipeline.packs.write(packed, _packed_entries(pipeline), FORMAT_VERSION, seen=seen)
    out += [_entry(pipeline, key) for key in keys]
    if pipeline.combiner is not None:
        out.append((DETECTORS_KEY, _dumps(pipeline.combiner.to_dict())))
    out.append((TOTALS_KEY, _dumps(_totals(pipeline))))
    return out


# --- encoding -----------------------------------------------------------------------------------


def _dumps(value: dict[str, Any]) -> bytes:
    return orjson.dumps({"v": FORMAT_VERSION, **value})


def _finite(x: float) -> float | None:
    """JSON has no infinity: -inf (nothing seen yet) is written as null."""
    return x if math.isfinite(x) else None


def _groups(table: dict[tuple[str, ...], Sums]) -> list[list[Any]]:
    return [[list(group), sums.to_dict()] for group, sums in table.items()]


def _packed_entries(pipeline: Pipeline) -> Entries:
    """A checkpoint's query entries (:data:`~streameval.packs.Entries`): each as its JSON text
    through the native core where it is installed, else JSON-ready for orjson."""
    joiner = pipeline.joiner
    open_queries, tombstones = joiner.open, joiner.tombstones

    def entry(key: tuple[Any, ...]) -> tuple[str, Any] | None:
        query_id = key[1]
        query = open_queries.get(query_id)
        if query is not None:
            return "q", (query_id, query.ts, query.group, query.score.to_row())
        settled = tombstones.get(query_id)
        return None if settled is None else ("t", (query_id, settled))

    def entries(changed: list[tuple[Any, ...]]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        return native.pack_entries(changed, open_queries, tombstones) or by_kind(changed, entry)

    return entries


def _entry(pipeline: Pipeline, key: tuple[Any, ...]) -> Entry:
    joiner = pipeline.joiner
    kind = key[0]
    if kind == "o":
        name = b"o:" + key[1].encode()
        waiting = joiner.orphans.get(key[1])
        if not waiting:
            return name, None
        events = [[e.query_id, e.item, e.type, e.ts, e.event_id] for e in waiting]
        return name, _dumps({"events": events})
    if kind == "m":
        name = f"m:{key[1]}".encode()
        moments = pipeline.minutes.open.get(key[1]) if pipeline.minutes is not None else None
        return name, None if not moments else _dumps({"groups": [[list(g), m] for g, m in moments.items()]})
    # ("w", window, index)
    name = f"w:{key[1]}:{key[2]}".encode()
    ring = pipeline.windows.ring(key[1])
    groups = ring.buckets.get(key[2]) if ring is not None else None
    return name, None if not groups else _dumps({"groups": _groups(groups)})


def _totals(pipeline: Pipeline) -> dict[str, Any]:
    c = pipeline.counters
    return {
        "max_event_ts": _finite(pipeline.watermark.max_event_ts),
        "watermark": _finite(pipeline.watermark.value),
        "frontier": _finite(pipeline.windows.frontier),
        "settled": _groups(pipeline.settled_totals),
        "minutes_through": pipeline.minutes.through if pipeline.minutes is not None else None,
        "next_pack": pipeline.packs.next,
        "counters": {
            "consumed": list(c.consumed.items()),
            "rejected": [[t, r, n] for (t, r), n in c.rejected.items()],
            "ignored": [[t, r, n] for (t, r), n in c.ignored.items()],
            "misrouted": list(c.misrouted.items()),
            "dead_lettered": [[t, r, n] for (t, r), n in c.dead_lettered.items()],
            "unattributed": list(c.unattributed.items()),
            "duplicates": list(c.duplicates.items()),
            "attributed": c.attributed,
            "groups_folded": c.groups_folded,
            "late_impressions": c.late_impressions,
        },
    }


# --- restoring ----------------------------------------------------------------------------------


Values = dict[bytes, tuple[dict[str, Any], str]]


def latest(records: Iterable[tuple[bytes | None, bytes | None, str]], into: Values | None = None) -> Values:
    """The last value of every key (a null value deletes it), decoded and version-checked.

    ``records`` are (key, value, where) in log order, ``where`` naming the record for errors
    (e.g. ``topic[partition]@offset``); ``into`` is updated in place when given (a restore
    that reads in steps). Raises StateError on anything it cannot read.
    """
    out: Values = {} if into is None else into
    for key, raw, where in records:
        if key is None:
            raise StateError(f"{where}: changelog record without a key")
        if raw is None:
            out.pop(key, None)
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise StateError(f"{where}: changelog record {key[:60]!r} is not JSON") from None
        if not isinstance(value, dict) or value.get("v") not in READABLE_VERSIONS:
            found = value.get("v") if isinstance(value, dict) else None
            raise StateError(
                f"{where}: changelog record {key[:60]!r} has state format {found!r}, this version "
                f"reads {' and '.join(map(str, READABLE_VERSIONS))}"
            )
        out[key] = (value, where)
    return out


def restore(
    settings: Settings,
    values: Values,
    wall_clock: Callable[[], float] | None = None,
    group_cap: GroupCap | None = None,
    combiner: Combiner | None = None,
) -> Pipeline:
    """A tracking pipeline holding the state that ``values`` (from :func:`latest`) describe;
    ``combiner``: the group's detectors, for partition 0."""
    pipeline = Pipeline(settings, wall_clock=wall_clock, group_cap=group_cap)
    pipeline.combiner = combiner
    packs: list[tuple[int, dict[str, Any], str]] = []
    legacy: list[bytes] = []
    next_pack = 0
    for key, (value, where) in values.items():
        n = number(key)
        if n is not None:
            packs.append((n, value, where))
            continue
        if key[:2] in (b"q:", b"s:"):
            legacy.append(key)
        try:
            _apply(pipeline, key, value)
            if key == TOTALS_KEY:
                next_pack = int(value.get("next_pack", 0))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise StateError(
                f"{where}: changelog record {key[:60]!r} does not fit this state: {exc!r}"
            ) from None
    pipeline.packs = _apply_packs(pipeline, sorted(packs, key=lambda p: p[0]), next_pack)
    if wall_clock is not None:
        # idle time counts from the restore: the time the partition was unowned is not quiet
        # input, its records are still to be read
        pipeline.watermark.mark_active()
    pipeline.record_changes()
    if legacy:  # an older layout: the next checkpoint moves every query and dedup key into packs
        pipeline.packs.legacy = legacy
        joiner = pipeline.joiner
        pipeline.changes.update(("q", q) for q in (*joiner.open, *joiner.tombstones))
        pipeline.changes.seen += joiner.seen.items()
    return pipeline


def _apply_packs(pipeline: Pipeline, packs: list[tuple[int, dict[str, Any], str]], next_pack: int) -> Packs:
    """The queries and dedup keys of the packs (in their order: a later entry of a key is newer),
    less what the watermark has passed (:mod:`streameval.packs`); which pack holds each."""
    queries: dict[str, tuple[int, list[Any], bool]] = {}
    seen: dict[Any, tuple[int, float]] = {}
    for n, value, where in packs:
        try:
            for entry in value.get("q", ()):
                queries[entry[0]] = (n, entry, True)
            for entry in value.get("t", ()):
                queries[entry[0]] = (n, entry, False)
            for key, until in value.get("s", ()):
                seen[tuple(key) if isinstance(key, list) else key] = (n, float(until))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise StateError(f"{where}: changelog pack {n} does not fit this state: {exc!r}") from None
    out = Packs(max(next_pack, packs[-1][0] + 1) if packs else next_pack)
    out.live = {n: 0 for n, _, _ in packs}
    joiner, watermark = pipeline.joiner, pipeline.watermark.value
    for query_id, (n, entry, is_open) in queries.items():
        ts = float(entry[1])
        if ts + joiner.max_horizon + joiner.retention < watermark:
            continue  # forgotten (its tombstone's time has passed)
        if is_open and ts + joiner.max_horizon >= watermark:
            _open(pipeline, query_id, ts, entry[2], pipeline.scorer.from_row(entry[3]))
        else:  # a tombstone, or an entry from before it settled whose tombstone's pack is gone
            joiner.add_tombstone(query_id, ts)
        out.held(("q", query_id), n)
    for key, (n, until) in seen.items():
        if until >= watermark:  # else forgotten
            joiner.add_seen(key, until)
            out.remembered(n, until)
    return out


def _open(pipeline: Pipeline, query_id: str, ts: float, labels: list[str], score: QueryScore) -> None:
    query = OpenQuery(query_id, ts, _group(labels, pipeline), score)
    query.n_relevant = score.n_relevant
    query.values = pipeline.scorer.values(score)
    pipeline.joiner.add_open(query)
    pipeline.restored_open(query)


def _group(labels: list[str], pipeline: Pipeline) -> tuple[str, ...]:
    group = tuple(labels)
    if group != pipeline.group_cap.other:
        group = pipeline.group_cap.admit(group)  # the previous owner admitted it
    return group


def _apply(pipeline: Pipeline, key: bytes, value: dict[str, Any]) -> None:
    joiner = pipeline.joiner
    kind, _, rest = key.partition(b":")
    if key in (TOTALS_KEY, DETECTORS_KEY) or kind == b"m":
        _apply_detection_or_totals(pipeline, key, kind, rest, value)
    elif kind == b"q":
        query_id = rest.decode()
        if "settled" in value:
            joiner.add_tombstone(query_id, float(value["settled"]))
            return
        score = QueryScore.from_dict(value["score"])
        _open(pipeline, query_id, float(value["ts"]), value["group"], score)
    elif kind == b"o":
        for query_id, item, event_type, ts, event_id in value["events"]:
            joiner.add_orphan(Engagement(query_id, item, event_type, float(ts), event_id))
    elif kind == b"s":
        dedup = orjson.loads(rest)
        joiner.add_seen(tuple(dedup) if isinstance(dedup, list) else dedup, float(value["until"]))
    elif kind == b"w":
        window, _, index = rest.decode().rpartition(":")
        ring = pipeline.windows.ring(window)
        if ring is None:
            return  # a window no longer configured
        ring.buckets[int(index)] = {_group(g, pipeline): Sums.from_dict(s) for g, s in value["groups"]}
    else:
        raise ValueError(f"unknown kind of key {kind!r}")


def _apply_detection_or_totals(
    pipeline: Pipeline, key: bytes, kind: bytes, rest: bytes, value: dict[str, Any]
) -> None:
    if key == TOTALS_KEY:
        _apply_totals(pipeline, value)
    elif key == DETECTORS_KEY:
        if pipeline.combiner is not None:  # else a partition that was 0 of more partitions
            pipeline.combiner.load(value)
    elif pipeline.minutes is not None:  # else the first metric is now weighted: no detectors
        pipeline.minutes.restore(int(rest), {_group(g, pipeline): list(m) for g, m in value["groups"]})


def _apply_totals(pipeline: Pipeline, value: dict[str, Any]) -> None:
    def number(x: float | None) -> float:
        return -math.inf if x is None else float(x)

    pipeline.watermark.max_event_ts = number(value["max_event_ts"])
    pipeline.watermark.value = number(value["watermark"])
    pipeline.windows.advance(number(value["frontier"]))
    pipeline.settled_totals = {_group(g, pipeline): Sums.from_dict(s) for g, s in value["settled"]}
    if pipeline.minutes is not None:
        pipeline.minutes.through = value.get("minutes_through")  # absent before the detectors
    c = value["counters"]
    pipeline.counters = Counters(
        consumed=Counter(dict(c["consumed"])),
        rejected=Counter({(t, r): n for t, r, n in c["rejected"]}),
        ignored=Counter({(t, r): n for t, r, n in c.get("ignored", ())}),  # absent before ignore_types
        misrouted=Counter(dict(c.get("misrouted", ()))),  # absent before misrouting was counted
        dead_lettered=Counter({(t, r): n for t, r, n in c["dead_lettered"]}),
        unattributed=Counter(dict(c["unattributed"])),
        duplicates=Counter(dict(c["duplicates"])),
        attributed=c["attributed"],
        groups_folded=c["groups_folded"],
        late_impressions=c["late_impressions"],
    )
