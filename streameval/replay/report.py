"""The replay's report (README, `streameval replay`): as JSON, or as a readable table."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from typing import Any

from streameval.detect import MINUTE, Detectors
from streameval.pipeline import Pipeline
from streameval.scoring import Sums


def _block(sums: Sums, pipeline: Pipeline) -> dict[str, Any]:
    means = sums.means(pipeline.metrics, pipeline.settings.no_relevant)
    out: dict[str, Any] = {"queries": sums.queries, "queries_with_relevant": sums.with_relevant}
    for metric, mean in zip(pipeline.metrics, means, strict=True):
        out[str(metric)] = mean
    return out


def _by_second(counts: Counter[tuple[str, str]]) -> dict[str, int]:
    """Counts keyed (topic, what) added up by what, sorted."""
    out: Counter[str] = Counter()
    for (_, what), count in counts.items():
        out[what] += count
    return dict(sorted(out.items()))


def build_report(pipeline: Pipeline) -> dict[str, Any]:
    """The JSON report: overall (pooled), per group, and the input counts."""
    overall = Sums(len(pipeline.metrics))
    groups: list[tuple[tuple[str, ...], Sums]] = sorted(
        pipeline.settled_totals.items(), key=lambda kv: str(kv[0])
    )
    for _, sums in groups:
        overall.merge(sums)
    group_by = pipeline.settings.group_by
    counters = pipeline.counters
    inputs: dict[str, Any] = {
        "records": sum(counters.consumed.values()),
        "rejected": _by_second(counters.rejected),
        "unattributed": dict(sorted(counters.unattributed.items())),
        "duplicates": {
            "impressions": counters.duplicates["impressions"],
            "events": counters.duplicates["events"],
        },
    }
    events = pipeline.settings.input.events
    if events is not None and events.ignore_types:
        inputs["ignored"] = _by_second(counters.ignored)
    report = {
        "overall": _block(overall, pipeline),
        "groups": [
            {"labels": dict(zip(group_by, labels, strict=True)), **_block(sums, pipeline)}
            for labels, sums in groups
        ],
        "inputs": inputs,
    }
    if pipeline.detectors is not None:
        report["detectors"] = detector_rows(pipeline.detectors, group_by)
    return report


def detector_rows(detectors: Detectors, group_by: Sequence[str]) -> list[dict[str, Any]]:
    """Each detector's state at the end (README, Regression detectors)."""
    return [
        {
            "versus": row.versus,
            "labels": dict(zip(group_by, row.group, strict=True)),
            "state": row.state,
            "statistic": row.statistic,
            "threshold": row.threshold,
            "alarms": row.alarms,
            "last_alarm": None if row.onset is None else _minute(row.onset),
            "difference": row.difference,
            "stderr": row.stderr,
        }
        for row in detectors.rows()
    ]


def _minute(minute: int) -> str:
    return datetime.datetime.fromtimestamp(minute * MINUTE, datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _counts(values: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items()) or "none"


def format_table(report: dict[str, Any], metric_names: Sequence[str]) -> str:
    """A readable aligned table: one row for all queries, then one per group; then the inputs."""
    rows = [{"group": "(all)", **report["overall"]}]
    for group in report["groups"]:
        label = ",".join(f"{k}={v}" for k, v in group["labels"].items()) or "(all)"
        rows.append({"group": label, **group})
    columns = ["group", "queries", "queries_with_relevant", *metric_names]
    headers = {"queries_with_relevant": "with_relevant"}
    table = [[headers.get(c, c) for c in columns]] + [[_cell(r[c]) for c in columns] for r in rows]
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
    lines += [
        "",
        f"records read: {inputs['records']}",
        f"rejected: {_counts(inputs['rejected'])}",
        f"unattributed: {_counts(inputs['unattributed'])}",
        f"duplicates: {_counts(inputs['duplicates'])}",
    ]
    if "ignored" in inputs:
        lines.append(f"ignored: {_counts(inputs['ignored'])}")
    detectors = report.get("detectors") or []
    alarmed = [d for d in detectors if d["alarms"]]
    lines.append(
        f"regression detectors: {len(detectors)}, alarms raised: {sum(d['alarms'] for d in detectors)}"
    )
    for d in alarmed:
        label = ",".join(f"{k}={v}" for k, v in d["labels"].items())
        lines.append(
            f"  {label} versus {d['versus']}: {d['alarms']} alarm(s), the last for minute {d['last_alarm']}, "
            f"now {d['state']}"
        )
    return "\n".join(lines)
