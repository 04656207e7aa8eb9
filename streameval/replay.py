"""``streameval replay``: JSONL logs -> the pipeline -> a report.

The inputs are merged in timestamp order (impressions before events at the same time, file
order otherwise), run through the same :class:`~streameval.pipeline.Pipeline` as the daemon,
and at the end everything settles. Blank lines are not records.
"""

from __future__ import annotations

import functools
import gc
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from streameval.config import Settings
from streameval.errors import InputError
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression, Rejection
from streameval.scoring import Sums

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


def _lines(path: str) -> Iterator[bytes]:
    """The non-blank lines of a file, with their line ends (JSON allows the whitespace)."""
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if not line.isspace():
                    yield line
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a JSONL file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None


def run_replay(
    settings: Settings,
    impressions: str,
    events: Sequence[str],
    progress: Progress | None = None,
) -> Pipeline:
    """Read, merge, process and settle; returns the finished pipeline."""
    for path in (impressions, *events):
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file" if not Path(path).exists() else f"{path}: not a file")
    progress = progress or Progress()
    pipeline = Pipeline(settings, wall_clock=None, remember_until_end=True, views=False, ordered=True)
    records: list[Impression | Engagement] = []
    times: list[float] = []
    read = 0
    sources = [(impressions, settings.impressions_topic, True)]
    sources += [(path, Path(path).stem, False) for path in events]
    # Replay holds every record, then every query's state: the cyclic garbage collector would
    # rescan that growing heap again and again (a third of the run) and find nothing, since
    # none of it forms cycles. It is off for the run and back on afterwards.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for path, topic, is_impression in sources:
            decode: Callable[[bytes], Impression | Engagement | Rejection]
            if is_impression:
                decode = pipeline.decode_impression
            else:
                decode = functools.partial(pipeline.decode_event, topic=topic)
            for raw in _lines(path):
                record = decode(raw)
                if type(record) is Rejection:
                    pipeline.handle(topic, record)
                else:
                    pipeline.counters.consumed[topic] += 1
                    records.append(record)  # type: ignore[arg-type]
                    times.append(record.ts)  # type: ignore[union-attr]
                read += 1
                if not read & progress.mask:
                    progress.update("read", read)
        # stable sort: impressions first at equal times, file order otherwise
        order = sorted(range(len(records)), key=times.__getitem__)
        del times
        process = pipeline.process
        for done, i in enumerate(order, start=1):
            process(records[i])
            if not done & progress.mask:
                progress.update("processed", done, len(order))
        pipeline.finish()
    finally:
        if gc_was_enabled:
            gc.enable()
    return pipeline


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
