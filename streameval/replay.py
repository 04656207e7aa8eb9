"""``streameval replay``: JSONL logs -> the batch join -> a report.

The answer is the pipeline's on the inputs merged in timestamp order (impressions before events
at the same time, file order otherwise), with everything settling at the end. The records are
decoded by the daemon's decoders and scored by its scorer, but joined as one batch
(:func:`join_in_batch`, which says why that is the same), because a record at a time through
the pipeline costs several times more. Blank lines are not records.
"""

from __future__ import annotations

import functools
import gc
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from streameval.config import Settings
from streameval.errors import InputError
from streameval.pipeline import Pipeline
from streameval.records import (
    EventFields,
    ImpressionFields,
    Rejection,
    decode_event_fields,
    decode_impression_fields,
    fields_key,
)
from streameval.scoring import Sums
from streameval.scoring.query import compact

PROGRESS_AFTER_S = 2.0


class Progress:
    """Prints a line to stderr every couple of seconds, but only once work has taken that long."""

    def __init__(self, stream: TextIO | None = None, every: float = PROGRESS_AFTER_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        #: callers look at the clock only every mask + 1 records
        self.mask = 4095 if every > 0 else 0
        self.start = time.monotonic()
        self.next_at = self.start + every
        self.printed = False

    def update(self, what: str, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        rate = done / max(now - self.start, 1e-9)
        of = f"/{total}" if total else ""
        self.stream.write(f"streameval replay: {what} {done}{of} records ({rate:,.0f}/s)\n")
        self.stream.flush()
        self.printed = True

    def stage(self, what: str) -> None:
        """Say what a long run does next (a run shorter than the interval says nothing)."""
        if time.monotonic() - self.start >= self.every:
            self.stream.write(f"streameval replay: {what}\n")
            self.stream.flush()
            self.printed = True


def run_replay(
    settings: Settings,
    impressions: str,
    events: Sequence[str],
    progress: Progress | None = None,
    keep: list[object] | None = None,
) -> Pipeline:
    """Read and decode the files, join and score in one batch; returns the finished pipeline.

    With ``keep``, the records are left in it instead of being freed on return, for a caller
    that is about to exit (the command line: freeing millions of small objects one by one is
    work the end of the process does at once).
    """
    for path in (impressions, *events):
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file" if not Path(path).exists() else f"{path}: not a file")
    progress = progress or Progress()
    pipeline = Pipeline(settings)  # not fed: it holds the counters, the scorer and the totals
    reader = _Reader(pipeline, progress)
    # Replay holds every query until the end: the cyclic garbage collector would rescan that
    # growing heap again and again (a third of the run) and find nothing, since none of it
    # forms cycles. It is off for the run and back on afterwards.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        join_in_batch(
            pipeline,
            reader.impressions(impressions),
            (event for path in events for event in reader.events(path)),
            keep,
            progress,
        )
    finally:
        if keep is not None:
            gc.freeze()  # what is kept is not garbage: the collector need never scan it again
        if gc_was_enabled:
            gc.enable()
    return pipeline


class _Reader:
    """Decodes the lines of the input files, counting each as consumed and each bad one as
    rejected by its reason; yields the good records."""

    def __init__(self, pipeline: Pipeline, progress: Progress) -> None:
        self.settings = pipeline.settings
        self.counters = pipeline.counters
        self.progress = progress
        self.read = 0

    def impressions(self, path: str) -> Iterator[ImpressionFields]:
        decode = functools.partial(decode_impression_fields, group_by=self.settings.group_by)
        return self._records(path, self.settings.impressions_topic, decode)  # type: ignore[return-value]

    def events(self, path: str) -> Iterator[EventFields]:
        topic = Path(path).stem
        default_type = self.settings.topic_types.get(topic)
        grades = self.settings.grades
        decode = functools.partial(decode_event_fields, grades=grades, default_type=default_type)
        return self._records(path, topic, decode)  # type: ignore[return-value]

    def _records(
        self, path: str, topic: str, decode: Callable[[bytes], ImpressionFields | EventFields | Rejection]
    ) -> Iterator[ImpressionFields | EventFields]:
        progress, mask, rejected = self.progress, self.progress.mask, self.counters.rejected
        read = self.read
        try:
            with open(path, "rb") as handle:
                for raw in handle:
                    if raw.isspace():  # blank lines are not records (JSON allows the line end)
                        continue
                    read += 1
                    if not read & mask:
                        progress.update("read", read)
                    record = decode(raw)
                    if type(record) is Rejection:
                        rejected[(topic, record.reason)] += 1
                    else:
                        yield record  # type: ignore[misc]
        except OSError as exc:
            raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
        self.counters.consumed[topic] += read - self.read
        self.read = read


_NOT_SCORED = (0, None)  # a query with no attributed event: no relevant item


def _entry_ts(entry: list[Any]) -> float:
    return entry[0]


def join_in_batch(
    pipeline: Pipeline,
    impressions: Iterable[ImpressionFields],
    events: Iterable[EventFields],
    keep: list[object] | None = None,
    progress: Progress | None = None,
) -> None:
    """Settle every query of these records into ``pipeline`` as if its :meth:`~Pipeline.process`
    had been fed their merge in timestamp order (impressions first at equal times, the given
    order otherwise), remembering everything until the end, and then :meth:`~Pipeline.finish`:
    the same counters, and the same settled totals up to floating-point rounding (each query is
    scored once, from its best grades, where the daemon updates its values event by event).

    Why a batch gives the same answer: with everything remembered until the end, nothing the
    join decides depends on the watermark. Each rule of the join (README, Definitions) then
    reads only times: an impression's duplicates lose to the first in that order, the earliest
    copy; an event's duplicates likewise; a kept event counts for the kept impression of its
    query when ``imp.ts <= ev.ts <= imp.ts + horizon`` (an event before its impression waits
    as an orphan and is then judged ``before_impression`` -- the same verdict), is
    ``unknown_query`` without one, and nothing is late. A query's values depend on the best
    grade of each item only, whatever the order of its events. Two things do depend on order
    and are done in it: settled queries are added to their group's sums (floating point), and
    groups are admitted under the ``max_groups`` cap.

    So no per-record pipeline step is needed: the records are deduplicated into dicts, the
    events judged, and only queries with attributed events scored -- the others count as
    queries with no relevant item. A dict keeps the position of a key's first insertion; an
    impression that replaces an earlier copy is deleted and inserted again, so the dict of
    impressions stays in the order its winners came in, and a stable sort by time gives the
    merged order.
    """
    counters = pipeline.counters
    # query_id -> [ts, group, shown list (compact), best grades of the items attributed to it:
    # None, an (item, grade) pair or a dict]
    kept: dict[str, list[Any]] = {}
    duplicates = 0
    # one tuple per group, held by all its queries
    shared_labels: dict[tuple[str, ...], tuple[str, ...]] = {}
    for query_id, ts, items, group in impressions:
        group = shared_labels.setdefault(group, group)
        entry = kept.get(query_id)
        if entry is None:
            kept[query_id] = [ts, group, compact(items), None]
        else:
            duplicates += 1
            if ts < entry[0]:  # earlier in time: it comes first in the merge
                del kept[query_id]
                kept[query_id] = [ts, group, compact(items), None]
    counters.duplicates["impressions"] += duplicates
    seen: dict[tuple[str, ...] | str, EventFields] = {}
    duplicates = 0
    for ev in events:
        query_id, item, event_type, ts, event_id = ev
        key = event_id if event_id is not None else fields_key(query_id, item, event_type, ts)
        first = seen.get(key)
        if first is None:
            seen[key] = ev
        else:
            duplicates += 1
            if ts < first[3]:  # copies of an event_id may differ: the earliest counts
                seen[key] = ev
    counters.duplicates["events"] += duplicates

    if progress is not None:
        progress.stage(f"judging {len(seen):,} events against {len(kept):,} queries")
    settings = pipeline.settings
    rules = {t: (grade, settings.horizon_for(t)) for t, grade in settings.grades.items()}
    unknown = before = after = n_attributed = 0
    for query_id, item, event_type, ts, _ in seen.values():
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
            n_attributed += 1
            best = entry[3]
            if best is None:
                entry[3] = {item: grade}
            elif grade > best.get(item, -math.inf):
                best[item] = grade
    verdicts = {"before_impression": before, "after_horizon": after, "unknown_query": unknown}
    for reason, count in verdicts.items():
        if count:
            counters.unattributed[reason] += count
    counters.attributed += n_attributed

    if progress is not None:
        progress.stage(f"scoring {len(kept):,} queries")
    values_once, group_of = pipeline.scorer.values_once, pipeline.group_of
    rows: dict[tuple[str, ...], list[tuple[int, tuple[float, ...] | None]]] = {}
    for _ts, labels, items, best in sorted(kept.values(), key=_entry_ts):
        group_rows = rows.get(group := group_of(labels))
        if group_rows is None:
            group_rows = rows[group] = []
        if best is None:
            group_rows.append(_NOT_SCORED)
        else:
            group_rows.append(values_once(items, best.items()))
    n_metrics = len(pipeline.metrics)
    for group, group_rows in rows.items():
        pipeline.settled_totals.setdefault(group, Sums(n_metrics)).add_rows(group_rows)
    if keep is not None:
        keep += (kept, seen)


def _block(sums: Sums, pipeline: Pipeline) -> dict[str, Any]:
    means = sums.means(pipeline.metrics, pipeline.settings.no_relevant)
    out: dict[str, Any] = {"queries": sums.queries, "queries_with_relevant": sums.with_relevant}
    for metric, mean in zip(pipeline.metrics, means, strict=True):
        out[str(metric)] = mean
    return out


def build_report(pipeline: Pipeline) -> dict[str, Any]:
    """The JSON report (README, `streameval replay`): overall (pooled), per group, and the input counts."""
    n = len(pipeline.metrics)
    overall = Sums(n)
    groups: list[tuple[tuple[str, ...], Sums]] = sorted(
        pipeline.settled_totals.items(), key=lambda kv: str(kv[0])
    )
    for _, sums in groups:
        overall.merge(sums)
    group_by = pipeline.settings.group_by
    counters = pipeline.counters
    rejected: Counter[str] = Counter()
    for (_, reason), count in counters.rejected.items():
        rejected[reason] += count
    return {
        "overall": _block(overall, pipeline),
        "groups": [
            {"labels": dict(zip(group_by, labels, strict=True)), **_block(sums, pipeline)}
            for labels, sums in groups
        ],
        "inputs": {
            "records": sum(counters.consumed.values()),
            "rejected": dict(sorted(rejected.items())),
            "unattributed": dict(sorted(counters.unattributed.items())),
            "duplicates": {
                "impressions": counters.duplicates["impressions"],
                "events": counters.duplicates["events"],
            },
        },
    }


def format_table(report: dict[str, Any], metric_names: Sequence[str]) -> str:
    """A readable aligned table: one row for all queries, then one per group; then the inputs."""
    rows = [{"group": "(all)", **report["overall"]}]
    for group in report["groups"]:
        label = ",".join(f"{k}={v}" for k, v in group["labels"].items()) or "(all)"
        rows.append({"group": label, **group})
    columns = ["group", "queries", "queries_with_relevant", *metric_names]
    headers = {"queries_with_relevant": "with_relevant"}

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4f}"
        return str(value)

    table = [[headers.get(c, c) for c in columns]] + [[cell(r[c]) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [
        "  ".join(
            text.ljust(w) if i == 0 else text.rjust(w)
            for i, (text, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    inputs = report["inputs"]

    def counts(values: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in values.items()) or "none"

    lines += [
        "",
        f"records read: {inputs['records']}",
        f"rejected: {counts(inputs['rejected'])}",
        f"unattributed: {counts(inputs['unattributed'])}",
        f"duplicates: {counts(inputs['duplicates'])}",
    ]
    return "\n".join(lines)
