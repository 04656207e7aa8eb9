"""A bounded history of the headline numbers, for the live page (``/``, ``/api/summary``).

Each point holds, per group, ``[mean, standard error, queries]`` of the settled queries in the
window and the provisional mean of the open queries; and, per group that has a control
counterpart (config ``control``: the same labels but the control's), ``[difference of the
means, its standard error]``, the standard error sqrt(se² + se_control²).

Pure: :meth:`History.record` takes a :class:`~streameval.view.View` (at most one point per
``every`` seconds of the view's clock) and :meth:`History.summary` returns plain JSON-able data.
The chart shows the first configured metric in the shortest window, per group, with a band of
±2 standard errors: SE = sqrt(s² / n), s² the sample variance of the per-query values from the
window's sum and sum of squares, n the queries that count (README, Metric families).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from streameval.detect import control_lookup
from streameval.scoring.measures import MEASURES
from streameval.view import View


def mean_and_se(total: float, squares: float, n: int) -> tuple[float | None, float | None]:
    """Mean and its standard error from n values' sum and sum of squares (SE None for n < 2)."""
    if n <= 0:
        return None, None
    mean = total / n
    if n < 2:
        return mean, None
    variance = max(0.0, (squares - n * mean * mean) / (n - 1))
    return mean, math.sqrt(variance / n)


def control_of(view: View, group: tuple[str, ...]) -> tuple[str, ...] | None:
    """The control group (config ``control``) that ``group`` is compared with, or None."""
    return control_lookup(view.settings.group_by, view.settings.control)(group)


def versus_control(
    view: View, points: dict[tuple[str, ...], tuple[float | None, float | None]]
) -> dict[str, list[float | None]]:
    """Per group with a control counterpart in ``points`` (group -> mean, standard error): the
    difference of the means and its standard error, sqrt(se^2 + se_control^2) (None when either
    is unknown)."""
    out: dict[str, list[float | None]] = {}
    for group, (mean, se) in points.items():
        other = control_of(view, group)
        if other is None or other not in points or mean is None:
            continue
        control_mean, control_se = points[other]
        if control_mean is None:
            continue
        both = None if se is None or control_se is None else math.sqrt(se * se + control_se * control_se)
        out[_label(view, group)] = [mean - control_mean, both]
    return out


def _label(view: View, group: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(view.settings.group_by, group, strict=True)) or "(all)"


class History:
    """At most ``max_points`` points, one per ``every`` seconds of the view's clock."""

    def __init__(self, every: float = 10.0, max_points: int = 720) -> None:
        self.every = every
        self.points: deque[dict[str, Any]] = deque(maxlen=max_points)
        self._last = -math.inf

    def record(self, view: View | None) -> None:
        if view is None or view.wall_time - self._last < self.every:
            return
        self._last = view.wall_time
        s, snap = view.settings, view.snapshot
        window = s.windows[0].name
        groups = {}
        means: dict[tuple[str, ...], tuple[float | None, float | None]] = {}
        for group, sums in snap.windows.get(window, {}).items():
            count = sums.count(s.metrics[0], s.no_relevant)
            if MEASURES[s.metrics[0].name].weighted:  # no per-query standard error
                mean, se = (sums.sums[0] / count if count else None), None
            else:
                mean, se = mean_and_se(sums.sums[0], sums.squares[0], count)
            provisional = snap.provisional.get(group)
            now = provisional.means(s.metrics[:1], s.no_relevant)[0] if provisional else None
            groups[_label(view, group)] = [mean, se, sums.queries, now]
            means[group] = (mean, se)
        c = snap.counters
        lag = view.wall_time - snap.watermark if math.isfinite(snap.watermark) else None
        self.points.append(
            {
                "t": view.wall_time,
                "groups": groups,
                "vs_control": versus_control(view, means),
                "records": sum(c.consumed.values()),
                "rejected": sum(c.rejected.values()),
                "unattributed": sum(c.unattributed.values()),
                "watermark_lag": lag,
            }
        )

    def summary(self, view: View, clock: str) -> dict[str, Any]:
        """What the page draws: the series, and a table of the latest values per group."""
        s, snap = view.settings, view.snapshot
        window = s.windows[0].name
        names = sorted({name for p in self.points for name in p["groups"]})
        table = []
        for group in sorted(
            set(snap.settled) | set(snap.provisional) | set(snap.windows.get(window, {})), key=str
        ):
            row: dict[str, Any] = {"group": _label(view, group)}
            for key, sums in (
                ("window", snap.windows.get(window, {}).get(group)),
                ("settled", snap.settled.get(group)),
                ("provisional", snap.provisional.get(group)),
            ):
                means = sums.means(s.metrics, s.no_relevant) if sums else [None] * len(s.metrics)
                row[key] = {
                    "queries": sums.queries if sums else 0,
                    **dict(zip(map(str, s.metrics), means, strict=True)),
                }
            table.append(row)
        c = snap.counters
        return {
            "now": view.wall_time,
            "clock": clock,
            "ready": view.ready,
            "metric": str(s.metrics[0]),
            "metrics": [str(m) for m in s.metrics],
            "window": window,
            "groups": names,
            "compared": sorted({name for p in self.points for name in p["vs_control"]}),
            "control": ", ".join(f"{k}={v}" for k, v in s.control.items()),
            "points": [{**p, "groups": {n: p["groups"].get(n) for n in names}} for p in self.points],
            "table": table,
            "detectors": [
                {
                    "group": _label(view, row.group),
                    "versus": row.versus,
                    "state": row.state,
                    "statistic": row.statistic,
                    "threshold": row.threshold,
                    "alarms": row.alarms,
                    "difference": row.difference,
                    "stderr": row.stderr,
                }
                for row in snap.detectors
            ],
            "totals": {
                "records": sum(c.consumed.values()),
                "rejected": sum(c.rejected.values()),
                "unattributed": sum(c.unattributed.values()),
                "duplicates": sum(c.duplicates.values()),
                "open_queries": snap.open_queries,
                "watermark_lag": view.wall_time - snap.watermark if math.isfinite(snap.watermark) else None,
            },
        }
