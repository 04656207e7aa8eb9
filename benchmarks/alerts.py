"""``python -m benchmarks.alerts``: how often the regression detectors raise a false alarm, and how
soon they catch a real drop (README, Regression detectors: Alert quality).

1. Per-query values: ``streameval simulate``'s traffic (seed 1, its default models) through the
   daemon's own pipeline, in event time; each settled query's first-metric value as it counts
   (README, Definitions), pooled per surface from the control model's queries.
2. Traffic levels: *busy* is the simulator's default rate (100 records/s: 4-12 counted queries a
   second per model and surface), *thin* has the same mix at 1/50 of it (about 170-590 counted
   queries an hour per group). Each minute, each group (3 models x 2 surfaces) gets a Poisson
   number of queries at its level, drawn from its surface's pool: every model serves the
   control's rankings, so the traffic is A/A for both detectors.
3. A/A: many simulated days through :class:`streameval.detect.Detectors` after a day and an
   hour of warm-up; false alarms = alarm onsets per (detector, group) and day.
4. Regressions: from a moment in the second day, a share d of one candidate's counted queries
   get the value 0 (as ``simulate --regress`` does: its MAP falls by d); the delay is from that
   moment to the alarm, which comes when the minute is settled (its end + the 30 min horizon).

Nothing here asserts; it prints the table and writes ``benchmarks/alerts.json``.

    pip install -e ".[bench]"
    python -m benchmarks.alerts              # about 9 minutes on 2 cores
    python -m benchmarks.alerts --scale 0.1  # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import alert_rules
from streameval.config import Settings
from streameval.detect import MINUTE, Detectors, Group
from streameval.join import OpenQuery
from streameval.pipeline import Pipeline
from streameval.simulate import MODELS, SURFACES, Simulator, topic_of

HERE = Path(__file__).resolve().parent
START = 1_700_000_000.0 - 1_700_000_000.0 % 86400
BUSY_RATE = 100.0
THIN_FACTOR = 50.0
SIZES = (0.02, 0.05, 0.10, 0.20, 0.40)
HORIZON = 1800.0
DAY_MIN = 1440
WEEK_MIN = 7 * DAY_MIN
#: a run after a regression ends this long after it, caught or not
FOLLOW_MIN = {"busy": 12 * 60, "thin": 24 * 60}
GROUPS: list[Group] = [(m, s) for m in MODELS for s in SURFACES]
CANDIDATES = [g for g in GROUPS if g[0] != "control"]


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class _Capture(Pipeline):
    """The pipeline, keeping each settled query's counted first-metric value per surface."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.values: dict[str, list[float]] = {s: [] for s in SURFACES}
        self.counted: dict[Group, int] = {g: 0 for g in GROUPS}

    def settled(self, query: OpenQuery) -> None:
        super().settled(query)
        if query.values is None:
            return
        group = tuple(query.group)
        self.counted[group] += 1
        if group[0] == "control":
            self.values[group[1]].append(query.values[0])


def pools(hours: float) -> tuple[dict[str, np.ndarray], dict[Group, float]]:
    """Control's per-query values per surface, and counted queries a minute per group at the
    busy level."""
    settings = Settings()
    pipe = _Capture(settings)
    sim = Simulator(seed=1, start=START, rate=BUSY_RATE, bad_share=0.0, late_by=0.0)
    for record in sim.records(until=START + hours * 3600):
        topic = topic_of(settings, record.kind)
        pipe.handle(topic, pipe.decode(topic, record.value))
    pipe.finish()
    minutes = hours * 60
    return (
        {s: np.array(v) for s, v in pipe.values.items()},
        {g: n / minutes for g, n in pipe.counted.items()},
    )


class Traffic:
    """Minute moments per group at one level, drawn from the pools."""

    def __init__(self, pool: dict[str, np.ndarray], rates: dict[Group, float], seed: int) -> None:
        self.pool, self.rates = pool, rates
        self.rng = np.random.default_rng(seed)

    def minute(self, broken: Group | None = None, drop: float = 0.0) -> dict[Group, list[float]]:
        out = {}
        for group in GROUPS:
            n = int(self.rng.poisson(self.rates[group]))
            if n == 0:
                continue
            x = self.rng.choice(self.pool[group[1]], n)
            if group == broken:
                x = np.where(self.rng.random(n) < drop, 0.0, x)
            out[group] = [float(n), float(x.sum()), float((x * x).sum())]
        return out


def detectors(settings: Settings) -> Detectors:
    """The daemon's detectors for the default settings (control = {model = "control"})."""
    made = Detectors.of(settings)
    assert made is not None  # the default first metric, MAP@10, is not weighted
    return made


def timeline(traffic: Traffic, minutes: int, broken: Group | None = None, drop: float = 0.0) -> np.ndarray:
    """moments[minute, group, (n, sum, squares)] of ``minutes`` minutes of traffic."""
    out = np.zeros((minutes, len(GROUPS), 3))
    for m in range(minutes):
        for group, moments in traffic.minute(broken, drop).items():
            out[m, GROUPS.index(group)] = moments
    return out


def run_detectors(
    d: Detectors, moments: np.ndarray, first_minute: int, broken: Group | None = None
) -> dict[str, int | None]:
    """Feed the minutes; the first minute whose data raised an alarm on ``broken``, per kind."""
    first: dict[str, int | None] = {"control": None, "reference": None}
    for i in range(moments.shape[0]):
        sums = {g: list(moments[i, j]) for j, g in enumerate(GROUPS) if moments[i, j, 0] > 0}
        for kind, group in d.minute(first_minute + i, sums):
            if group == broken and first[kind] is None:
                first[kind] = first_minute + i
    return first


def aa(level: str, traffic: Traffic, settings: Settings, days: int) -> dict[str, Any]:
    """Alarm onsets over ``days`` A/A days after a week and an hour of warm-up (week over week
    needs a week), the detectors and the shipped rules on the same minutes."""
    warmup = WEEK_MIN + 60
    say(f"  {level}: drawing {days + 7:,} days of minutes")
    moments = timeline(traffic, warmup + days * DAY_MIN)
    d = detectors(settings)
    run_detectors(d, moments[:warmup], 0)
    before = {k: c.alarms for k, c in d.cusums.items()}
    run_detectors(d, moments[warmup:], warmup)
    out: dict[str, Any] = {}
    for kind, pairs in (("control", CANDIDATES), ("reference", GROUPS)):
        alarms = sum(d.cusums[(kind, g)].alarms - before.get((kind, g), 0) for g in pairs)
        out[kind] = {
            "alarms": alarms,
            "group_days": days * len(pairs),
            "per_group_day": alarms / (days * len(pairs)),
        }
    firing = alert_rules.alerts(alert_rules.exported(moments), GROUPS)
    for name, fired in firing.items():
        pairs = CANDIDATES if name == "StreamevalVariantBelowControl" else GROUPS
        alarms = int(alert_rules.onsets(fired[warmup:]).sum())
        out[name] = {
            "alarms": alarms,
            "group_days": days * len(pairs),
            "per_group_day": alarms / (days * len(pairs)),
        }
    return out


def regressions(level: str, traffic: Traffic, settings: Settings, runs: int) -> dict[str, Any]:
    """Per size and alert or detector: each run's delay from the regression's start to the first
    alarm on the broken group (None: not within the follow-up). A run continues one shared week
    of A/A history from a minute in its next hour, for a candidate in turn."""
    warmup = WEEK_MIN + 60
    base = timeline(traffic, warmup)
    d = detectors(settings)
    run_detectors(d, base, 0)
    state = d.to_dict()
    follow = FOLLOW_MIN[level]
    out: dict[str, Any] = {}
    kinds = ("control", "reference", *alert_rules.ALERTS)
    for size in SIZES:
        delays: dict[str, list[float | None]] = {kind: [] for kind in kinds}
        for run in range(runs):
            broken = CANDIDATES[run % len(CANDIDATES)]
            start = warmup + int(traffic.rng.integers(0, 60))  # the regression's first minute
            gap = timeline(traffic, start - warmup)
            after = timeline(traffic, follow, broken, size)
            d = detectors(settings)
            d.load(state)
            run_detectors(d, gap, warmup)
            first = run_detectors(d, after, start, broken)
            for kind in ("control", "reference"):
                minute = first[kind]  # its data settles at its end plus the horizon
                delays[kind].append(None if minute is None else (minute + 1 - start) * MINUTE + HORIZON)
            firing = alert_rules.alerts(alert_rules.exported(np.concatenate([base, gap, after])), GROUPS)
            for name, fired in firing.items():
                hits = np.flatnonzero(fired[start:, GROUPS.index(broken)])
                delays[name].append(float(hits[0]) * MINUTE if hits.size else None)
        out[f"{size:.2f}"] = {kind: summary(v) for kind, v in delays.items()}
        say(
            f"  {level} {size:.0%} drop: "
            + ", ".join(f"{k} {describe(s)}" for k, s in out[f"{size:.2f}"].items())
        )
    return out


def against_prometheus(level: str, traffic: Traffic, background: Executor) -> Future[dict[str, Any]]:
    """The rules' copy against the real Prometheus (promtool) on a day and ten hours of this
    level: a day of history, then a 30% drop of one candidate. The series are drawn here, in
    the level's order of draws; promtool runs in ``background`` (on the other core, while the
    next level is drawn and run through the detectors)."""
    if shutil.which("promtool") is None:
        say("  promtool not found (apt-get install prometheus): the rules' copy is not checked")
        unchecked: Future[dict[str, Any]] = Future()
        unchecked.set_result({"checked": False})
        return unchecked
    moments = np.concatenate([timeline(traffic, DAY_MIN + 60), timeline(traffic, 600, CANDIDATES[0], 0.3)])
    return background.submit(_promtool_check, level, moments)


def _promtool_check(level: str, moments: np.ndarray) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        passed, compared, output = alert_rules.promtool_check(moments, GROUPS, Path(tmp) / "check_test.yml")
    verdict = "agrees" if passed else "DISAGREES"
    say(f"  {level}: the rules' copy {verdict} with promtool on {compared:,} evaluations")
    if not passed:
        print(output)
    return {"checked": True, "agrees": passed, "evaluations": compared}


def summary(delays: list[float | None]) -> dict[str, Any]:
    caught = sorted(v for v in delays if v is not None)
    n = len(delays)
    if not caught:
        return {"runs": n, "caught": 0.0, "median_min": None, "p90_min": None}
    ordered = sorted(math.inf if v is None else v for v in delays)
    p90 = ordered[min(n - 1, math.ceil(0.9 * n) - 1)]
    return {
        "runs": n,
        "caught": len(caught) / n,
        "median_min": round(statistics.median(ordered) / 60, 1)
        if math.isfinite(statistics.median(ordered))
        else None,
        "p90_min": round(p90 / 60, 1) if math.isfinite(p90) else None,
    }


def describe(s: dict[str, Any]) -> str:
    return f"caught {s['caught']:.0%}, median {s['median_min']} min, p90 {s['p90_min']} min"


#: how the README names each row
NAMES = {
    "control": "CUSUM versus control",
    "reference": "CUSUM versus reference (1d)",
    "StreamevalMapDropDayOverDay": "rule: day over day",
    "StreamevalMapDropWeekOverWeek": "rule: week over week",
    "StreamevalVariantBelowControl": "rule: variant below control",
}


def markdown(result: dict[str, Any]) -> str:
    """The README's table: per level, detector and rule, false alarms and, per drop, the share
    caught and the median / 90th percentile delay in minutes."""
    sizes = [f"{s:.2f}" for s in SIZES]
    head = "| level | alert | false alarms per group-day | " + " | ".join(
        f"{float(s):.0%} drop" for s in sizes
    )
    lines = [head + " |", "|" + "---|" * (3 + len(sizes))]
    for level, data in result["levels"].items():
        for kind, name in NAMES.items():
            aa = data["aa"][kind]
            cells = []
            for s in sizes:
                d = data["drops"][s][kind]
                cells.append(f"{d['caught']:.0%}: {d['median_min'] or '-'} / {d['p90_min'] or '-'}")
            per_day = f"{aa['per_group_day']:.4f} ({aa['alarms']} in {aa['group_days']:,})"
            lines.append(f"| {level} | {name} | {per_day} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.alerts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="share of the full run's days and runs")
    parser.add_argument("--out", default=str(HERE / "alerts.json"), help="where the JSON goes")
    args = parser.parse_args(argv)
    settings = Settings()
    hours = max(0.5, 6.0 * args.scale)
    say(f"per-query values: {hours:g} simulated hours through the pipeline")
    pool, busy = pools(hours)
    for surface, values in pool.items():
        say(f"  {surface}: {len(values):,} control queries, mean {values.mean():.4f}, sd {values.std():.4f}")
    say("  counted queries a minute: " + ", ".join(f"{'/'.join(g)} {r:.1f}" for g, r in busy.items()))
    rates = {"busy": busy, "thin": {g: r / THIN_FACTOR for g, r in busy.items()}}
    result: dict[str, Any] = {
        "settings": {
            "detect_min_effect": settings.detect_min_effect,
            "detect_arl_days": settings.detect_arl / 86400,
            "detect_reference_days": settings.detect_reference / 86400,
        },
        "queries_per_hour": {
            level: {"/".join(g): round(r * 60) for g, r in rs.items()} for level, rs in rates.items()
        },
        "levels": {},
    }
    checks: dict[str, Future[dict[str, Any]]] = {}
    with ThreadPoolExecutor(max_workers=len(rates)) as background:
        for seed, (level, level_rates) in enumerate(rates.items()):
            traffic = Traffic(pool, level_rates, seed)
            days = max(1, round((300 if level == "busy" else 1000) * args.scale))
            runs = max(2, round(100 * args.scale))
            say(f"{level}: {days:,} A/A days")
            found = aa(level, traffic, settings, days)
            say(
                f"{level}: false alarms per group-day "
                + ", ".join(f"{k} {v['per_group_day']:.4f}" for k, v in found.items())
            )
            say(f"{level}: {runs} runs per drop")
            result["levels"][level] = {"aa": found, "drops": regressions(level, traffic, settings, runs)}
            checks[level] = against_prometheus(level, traffic, background)
        for level, check in checks.items():
            result["levels"][level]["prometheus"] = check.result()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    say(f"wrote {args.out}")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
