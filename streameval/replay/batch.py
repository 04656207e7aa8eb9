"""The batch join: every query of the inputs settled at once, in four phases (dedup the
impressions, dedup the events, judge the events, score the queries), then added up.

Why a batch gives the daemon's answer: with everything remembered until the end, nothing the
join decides depends on the watermark. Each rule of the join (README, Definitions) then reads
only times: an impression's duplicates lose to the first in the merged order, the earliest copy;
an event's duplicates likewise; a kept event counts for the kept impression of its query when
``imp.ts <= ev.ts <= imp.ts + horizon`` (an event before its impression waits as an orphan and
is then judged ``before_impression`` -- the same verdict), is ``unknown_query`` without one, and
nothing is late. A query's values depend on the best grade of each item only, whatever the order
of its events. What does depend on order is done in it: groups are admitted under the
``max_groups`` cap in the order they first settle.
"""

from __future__ import annotations

import array
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from streameval import native
from streameval.config import Settings
from streameval.detect import MINUTE, Detectors
from streameval.minutes import MinuteSums
from streameval.pipeline import Pipeline
from streameval.records import EventFields, ImpressionFields, fields_key
from streameval.replay.progress import Progress
from streameval.scoring import Scorer, Sums

#: a kept impression: [ts, group labels, shown list (compact), best grades of the items
#: attributed to it: None or a dict item -> grade]
Entry = list[Any]


class GroupPart(NamedTuple):
    """A group's queries in one shard: when the first settles, how many, how many with a relevant
    item, the relevant items, and per metric the values of its queries as the bytes of an array
    of doubles (summed correctly rounded when the shards are added up) -- or, from the native
    core, ``partials`` instead (``columns`` then empty)."""

    first_ts: float
    queries: int
    with_relevant: int
    relevant: int
    columns: list[bytes]
    #: minute -> the first metric's counted values of its queries (array of doubles), for the
    #: regression detectors (empty when they are off)
    minutes: dict[int, bytes]
    #: per metric, floats whose exact sums are those of its queries' values and of their squares
    #: (``math.fsum``'s partials, :func:`streameval.native.exact_partials`): far fewer to send
    #: and add up than the values; None: the values are in ``columns``
    partials: list[tuple[list[float], list[float]]] | None = None


class Joined(NamedTuple):
    """One shard's answer: its counts and its groups; ``held`` is what the join built (the
    records), for a caller that leaves freeing it to the end of the process."""

    counts: dict[str, int]
    groups: dict[tuple[str, ...], GroupPart]
    held: tuple[object, ...] = ()

    def wire(self) -> tuple[dict[str, int], dict[tuple[str, ...], tuple[Any, ...]]]:
        """As plain tuples and dicts, which marshal writes (it refuses named tuples)."""
        return self.counts, {labels: tuple(part) for labels, part in self.groups.items()}

    @classmethod
    def from_wire(cls, data: tuple[dict[str, int], dict[tuple[str, ...], tuple[Any, ...]]]) -> Joined:
        counts, groups = data
        return cls(counts, {labels: GroupPart(*part) for labels, part in groups.items()})


_NOT_SCORED = (0, None)  # a query with no attributed event: no relevant item


def dedup_impressions(impressions: Iterable[ImpressionFields]) -> tuple[dict[str, Entry], int]:
    """The earliest copy of each query's impression, and how many copies lost.

    A dict keeps the position of a key's first insertion; an impression that replaces an
    earlier copy is deleted and inserted again, so the dict stays in the order its winners came
    in, and a stable sort by time gives the merged order, in which the groups first settle."""
    kept: dict[str, Entry] = {}
    duplicates = 0
    # one tuple per group, held by all its queries (records from another process come with their own)
    shared_labels: dict[tuple[str, ...], tuple[str, ...]] = {}
    for query_id, ts, items, group in impressions:
        group = shared_labels.setdefault(group, group)
        entry = kept.get(query_id)
        if entry is None:
            kept[query_id] = [ts, group, items, None]
        else:
            duplicates += 1
            if ts < entry[0]:  # earlier in time: it comes first in the merge
                del kept[query_id]
                kept[query_id] = [ts, group, items, None]
    return kept, duplicates


def dedup_events(events: Iterable[EventFields]) -> tuple[dict[Any, EventFields], dict[Any, EventFields], int]:
    """The earliest copy of each event: by event id, and those without one by their
    :func:`~streameval.records.fields_key`; and how many copies lost. Apart, so that the ids
    (which alone can be shared by shards) are a dict of strings only, hashed in C."""
    by_id: dict[Any, EventFields] = {}
    by_fields: dict[Any, EventFields] = {}
    key: str | tuple[str, ...]
    duplicates = 0
    for ev in events:
        query_id, item, event_type, ts, event_id = ev
        if event_id is None:
            seen, key = by_fields, fields_key(query_id, item, event_type, ts)
        else:
            seen, key = by_id, event_id
        first = seen.get(key)
        if first is None:
            seen[key] = ev
        else:
            duplicates += 1
            if ts < first[3]:  # copies of an event_id may differ: the earliest counts
                seen[key] = ev
    return by_id, by_fields, duplicates


def judge(settings: Settings, kept: dict[str, Entry], events: Iterable[EventFields]) -> dict[str, int]:
    """Each kept event judged against its query's impression: attributed ones raise the best
    grade of their item; returns the counts of each verdict."""
    rules = {t: (grade, settings.horizon_for(t)) for t, grade in settings.grades.items()}
    unknown = before = after = attributed = 0
    for query_id, item, event_type, ts, _ in events:
        entry = kept.get(query_id)
        if entry is None:
            unknown += 1
            continue
        grade, horizon = rules[event_type]
        imp_ts = entry[0]
        if ts < imp_ts:
            before += 1
        elif ts > imp_ts + horizon:
            after += 1
        else:
            attributed += 1
            best = entry[3]
            if best is None:
                entry[3] = {item: grade}
            elif grade > best.get(item, -math.inf):
                best[item] = grade
    return {
        "before_impression": before,
        "after_horizon": after,
        "unknown_query": unknown,
        "attributed": attributed,
    }


def _entry_ts(entry: Entry) -> float:
    return entry[0]


def score(
    scorer: Scorer, kept: dict[str, Entry], minutes: MinuteSums | None = None
) -> dict[tuple[str, ...], GroupPart]:
    """Every query scored once, from its best grades (a query with none has no relevant item),
    and its values gathered per group, the groups in the order they first settle; with
    ``minutes``, per minute too, as the detectors count them."""
    ordered = sorted(kept.values(), key=_entry_ts)
    scored = native.score_rows(scorer, ordered, _NOT_SCORED)
    if scored is None:
        values_once = scorer.values_once
        scored = [
            _NOT_SCORED if best is None else values_once(items, best.items()) for *_, items, best in ordered
        ]
    rows: dict[tuple[str, ...], tuple[float, list[tuple[int, tuple[float, ...] | None]]]] = {}
    per_minute: dict[tuple[str, ...], dict[int, list[float]]] = {}
    for (ts, labels, _, _), row in zip(ordered, scored, strict=True):
        group_rows = rows.get(labels)
        if group_rows is None:
            group_rows = rows[labels] = (ts, [])
        group_rows[1].append(row)
        if minutes is not None:
            x = minutes.counted(row[1])
            if x is not None:
                per_minute.setdefault(labels, {}).setdefault(int(ts // MINUTE), []).append(x)
    n_metrics = len(scorer.metrics)
    groups = {}
    for labels, (first_ts, label_rows) in rows.items():
        scored = [row for row in label_rows if row[1] is not None]
        columns = list(zip(*[values for _, values in scored], strict=True)) if scored else [()] * n_metrics
        partials = native.exact_partials(columns)
        groups[labels] = GroupPart(
            first_ts,
            len(label_rows),
            len(scored),
            sum([n for n, _ in scored]),
            [] if partials is not None else [array.array("d", column).tobytes() for column in columns],
            {m: array.array("d", xs).tobytes() for m, xs in per_minute.get(labels, {}).items()},
            partials,
        )
    return groups


def join(
    settings: Settings,
    scorer: Scorer,
    impressions: Iterable[ImpressionFields],
    events: Iterable[EventFields],
    progress: Progress | None = None,
    settle_ids: Callable[[dict[str, EventFields]], int] | None = None,
) -> Joined:
    """The four phases on one shard's records. With ``settle_ids``, the events kept by id are
    handed to it before they are judged: it leaves out copies of event ids that count in another
    shard, and says how many."""
    kept, duplicate_impressions = dedup_impressions(impressions)
    by_id, by_fields, duplicate_events = dedup_events(events)
    if settle_ids is not None:
        duplicate_events += settle_ids(by_id)
    if progress is not None:
        progress.stage(f"judging {len(by_id) + len(by_fields):,} events against {len(kept):,} queries")
    counts = judge(settings, kept, itertools.chain(by_id.values(), by_fields.values()))
    if progress is not None:
        progress.stage(f"scoring {len(kept):,} queries")
    counts["duplicate_impressions"] = duplicate_impressions
    counts["duplicate_events"] = duplicate_events
    return Joined(counts, score(scorer, kept, MinuteSums.of(settings)), (kept, by_id, by_fields))


def add_up(pipeline: Pipeline, shards: list[Joined]) -> None:
    """Add the shards' counts to the pipeline's, and their groups to its settled totals: the
    groups admitted under ``max_groups`` in the order they first settle, each group's values
    summed correctly rounded."""
    counters = pipeline.counters
    counts: Counter[str] = Counter()
    for shard in shards:
        counts.update(shard.counts)
    counters.duplicates["impressions"] += counts["duplicate_impressions"]
    counters.duplicates["events"] += counts["duplicate_events"]
    for reason in ("before_impression", "after_horizon", "unknown_query"):
        if counts[reason]:
            counters.unattributed[reason] += counts[reason]
    counters.attributed += counts["attributed"]

    parts: dict[tuple[str, ...], list[GroupPart]] = {}
    for shard in shards:
        for labels, part in shard.groups.items():
            parts.setdefault(labels, []).append(part)
    # sorted() is stable: one shard's groups stay in the order they first settled
    in_order = sorted(parts.items(), key=lambda item: min(part.first_ts for part in item[1]))
    admitted: dict[tuple[str, ...], list[GroupPart]] = {}
    for labels, group_parts in in_order:
        group = pipeline.group_of(labels, sum(part.queries for part in group_parts))
        admitted.setdefault(group, []).extend(group_parts)
    _detect(pipeline, admitted)
    n_metrics = len(pipeline.metrics)
    for group, group_parts in admitted.items():
        values = [part for part in group_parts if part.partials is None]
        exact = [part.partials for part in group_parts if part.partials is not None]
        pipeline.settled_totals.setdefault(group, Sums(n_metrics)).add_exact(
            sum(part.queries for part in group_parts),
            sum(part.with_relevant for part in group_parts),
            sum(part.relevant for part in group_parts),
            [[array.array("d", part.columns[i]) for part in values] for i in range(n_metrics)],
            [[partials[i] for partials in exact] for i in range(n_metrics)],
        )


def _detect(pipeline: Pipeline, admitted: dict[tuple[str, ...], list[GroupPart]]) -> None:
    """Every minute's moments per group, each sum correctly rounded, through the pipeline's
    regression detectors in minute order (made here unless the caller gave some)."""
    if pipeline.minutes is None:
        return
    if pipeline.detectors is None:
        pipeline.detectors = Detectors.of(pipeline.settings)
    by_minute: dict[int, dict[tuple[str, ...], list[array.array[float]]]] = {}
    for group, group_parts in admitted.items():
        for part in group_parts:
            for minute, values in part.minutes.items():
                by_minute.setdefault(minute, {}).setdefault(group, []).append(array.array("d", values))
    for minute in sorted(by_minute):
        sums = {}
        for group, pieces in by_minute[minute].items():
            n = sum(len(piece) for piece in pieces)
            exact = Sums(1)
            exact.add_exact(n, n, 0, [pieces])
            sums[group] = [float(n), exact.sums[0], exact.squares[0]]
        assert pipeline.detectors is not None
        pipeline.detectors.minute(minute, sums)


def join_in_batch(
    pipeline: Pipeline,
    impressions: Iterable[ImpressionFields],
    events: Iterable[EventFields],
    progress: Progress | None = None,
) -> tuple[object, ...]:
    """Settle every query of these records into ``pipeline`` as if its :meth:`~Pipeline.process`
    had been fed their merge in timestamp order (impressions first at equal times, the given
    order otherwise), remembering everything until the end, and then :meth:`~Pipeline.finish`:
    the same counters, and the same settled totals up to floating-point rounding (each query is
    scored once, from its best grades, where the daemon updates its values event by event; and
    each group's values are summed correctly rounded, where the daemon adds them in turn). The
    impressions' shown lists come as :func:`~streameval.scoring.query.compact` made them.
    Returns what the join built (see :attr:`Joined.held`)."""
    joined = join(pipeline.settings, pipeline.scorer, impressions, events, progress)
    add_up(pipeline, [joined])
    return joined.held
