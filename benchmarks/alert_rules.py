"""The shipped z-rules (deploy/prometheus/rules), evaluated on the series streameval would export
for a timeline of minute moments, for ``python -m benchmarks.alerts``.

A copy of the rules in numpy, held to the real Prometheus by :func:`promtool_check`: it writes
the exported series of a slice as a ``promtool test rules`` file whose expectations are the
copy's alerts at every evaluation, and runs promtool on it with the shipped rule files.

Series at scrape minute T (one scrape and one rule evaluation a minute): a minute of impression
time settles ``LAG`` minutes after it starts (its end, then the 30 min horizon), so the window
``1h`` holds the settled minutes T - LAG - 59 .. T - LAG and the cumulative counters every
settled minute. Thresholds as shipped: relative drop 10%, z 3, 200 queries (300 to clear), 5%
minimum effect against control.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

LAG = 31
DAY, WEEK = 1440, 7 * 1440
RELATIVE_DROP, Z, MIN_QUERIES, MIN_QUERIES_CLEAR, MIN_EFFECT = 0.10, 3.0, 200.0, 300.0, 0.05
RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "rules"
ALERTS = ("StreamevalMapDropDayOverDay", "StreamevalMapDropWeekOverWeek", "StreamevalVariantBelowControl")


def exported(moments: np.ndarray) -> dict[str, np.ndarray]:
    """moments[minute, group, (n, sum, squares)] -> per scrape minute and group: the 1h window's
    parts (``n``, ``s``, ``q``) and the cumulative counters (``cn``, ``cs``, ``cq``)."""
    minutes = moments.shape[0]
    cum = np.concatenate([np.zeros((1, *moments.shape[1:])), np.cumsum(moments, axis=0)])
    # settled through minute T - LAG at scrape T: the cumulative sum of minutes < T - LAG + 1
    upto = np.clip(np.arange(minutes) - LAG + 1, 0, minutes)
    settled = cum[upto]
    window = settled - cum[np.clip(upto - 60, 0, minutes)]
    return {
        "n": window[..., 0],
        "s": window[..., 1],
        "q": window[..., 2],
        "cn": settled[..., 0],
        "cs": settled[..., 1],
        "cq": settled[..., 2],
    }


def _mean_se(n: np.ndarray, s: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, s / n, np.nan)
        var = np.where(n > 1, np.maximum((q - s * s / n) / (n - 1), 0.0), np.nan)
        se = np.sqrt(var / np.where(n > 1, n, np.nan))
    return mean, se


def _shift(a: np.ndarray, by: int) -> np.ndarray:
    out = np.full_like(a, np.nan)
    out[by:] = a[:-by]
    return out


def _held(cond: np.ndarray, evals: int) -> np.ndarray:
    """Firing: the condition true at this and the ``evals`` evaluations before (``for:``)."""
    run = np.zeros(cond.shape, dtype=np.int64)
    for t in range(cond.shape[0]):
        run[t] = np.where(cond[t], (run[t - 1] if t else 0) + 1, 0)
    return run > evals


def too_few(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """StreamevalTooFewQueries (pending or firing, firing), with its hysteresis: the expression
    reads the alert's own firing state of the previous evaluation."""
    active = np.zeros(n.shape, dtype=bool)
    firing = np.zeros(n.shape, dtype=bool)
    run = np.zeros(n.shape[1:], dtype=np.int64)
    for t in range(n.shape[0]):
        before = firing[t - 1] if t else np.zeros(n.shape[1:], dtype=bool)
        cond = (n[t] < MIN_QUERIES) | ((n[t] < MIN_QUERIES_CLEAR) & before)
        run = np.where(cond, run + 1, 0)
        active[t], firing[t] = cond, run > 60
    return active, firing


def alerts(series: dict[str, np.ndarray], groups: Sequence[tuple[str, ...]]) -> dict[str, np.ndarray]:
    """Per alert, firing[T, group] (False where the alert has no series for the group)."""
    active, _ = too_few(series["n"])
    silenced = _shift(active.astype(float), 1) == 1.0  # ALERTS of the previous evaluation
    with np.errstate(divide="ignore", invalid="ignore"):
        inc_n = series["cn"] - _shift(series["cn"], 60)
        inc_s = series["cs"] - _shift(series["cs"], 60)
        inc_q = series["cq"] - _shift(series["cq"], 60)
        ok = inc_n > 1
        mean = np.where(ok, inc_s / inc_n, np.nan)
        se = np.where(ok, np.sqrt(np.maximum((inc_q - inc_s**2 / inc_n) / (inc_n - 1), 0.0) / inc_n), np.nan)
        out = {}
        for name, back, hold in (
            ("StreamevalMapDropDayOverDay", DAY, 30),
            ("StreamevalMapDropWeekOverWeek", WEEK, 60),
        ):
            before, se_before = _shift(mean, back), _shift(se, back)
            cond = (1 - mean / before > RELATIVE_DROP) & ((before - mean) / np.sqrt(se**2 + se_before**2) > Z)
            out[name] = _held(cond & ~silenced, hold)
        wmean, wse = _mean_se(series["n"], series["s"], series["q"])
        control = [groups.index(("control", g[1])) for g in groups]
        diff = wmean - wmean[:, control]
        se_diff = np.sqrt(wse**2 + wse[:, control] ** 2)
        cond = (-diff / se_diff > Z) & (-diff / wmean[:, control] > MIN_EFFECT)
        cond[:, [i for i, g in enumerate(groups) if g[0] == "control"]] = False
        out["StreamevalVariantBelowControl"] = _held(cond & ~silenced, 30)
    return out


def onsets(firing: np.ndarray) -> np.ndarray:
    """Per group, how many times the alert started firing."""
    start = firing & ~np.vstack([np.zeros((1, firing.shape[1]), dtype=bool), firing[:-1]])
    return start.sum(axis=0)


def promtool_check(
    moments: np.ndarray, groups: Sequence[tuple[str, ...]], path: Path
) -> tuple[bool, int, str]:
    """Write the exported series of ``moments`` and the copy's alerts at every evaluation from
    a day and an hour on (day over day has its history then) as a promtool test, run it;
    (passed, evaluations compared, output)."""
    series = exported(moments)
    firing = alerts(series, groups)
    lines = [
        "rule_files:",
        f"  - {RULES / 'streameval.yml'}",
        f"  - {RULES / 'alerts.yml'}",
        "evaluation_interval: 1m",
        # the copy reads each evaluation's recorded series in the same evaluation; without an
        # order promtool runs the groups in any order (a Prometheus server on their own timers,
        # so its alerts may see the recorded values of the evaluation before: a minute later)
        "group_eval_order: [streameval-thresholds, streameval-recording, streameval-quality]",
        "tests:",
        "  - interval: 1m",
        "    input_series:",
    ]
    fmt = {
        "n": ('streameval_queries_with_relevant{{job="s",window="1h",model="{m}",surface="{s}"}}', "n"),
        "s": (
            'streameval_metric_values{{job="s",metric="map",k="10",window="1h",model="{m}",surface="{s}"}}',
            "s",
        ),
        "q": (
            'streameval_metric_squares{{job="s",metric="map",k="10",window="1h",model="{m}",surface="{s}"}}',
            "q",
        ),
        "cn": ('streameval_settled_queries_with_relevant_total{{job="s",model="{m}",surface="{s}"}}', "cn"),
        "cs": (
            'streameval_settled_metric_values_total{{job="s",metric="map",k="10",model="{m}",surface="{s}"}}',
            "cs",
        ),
        "cq": (
            'streameval_settled_metric_squares_total{{job="s",metric="map",k="10",model="{m}",surface="{s}"}}',
            "cq",
        ),
    }
    for template, key in fmt.values():
        for i, (model, surface) in enumerate(groups):
            values = " ".join(repr(float(v)) for v in series[key][:, i])
            lines += [
                f"      - series: '{template.format(m=model, s=surface)}'",
                f"        values: '{values}'",
            ]
    lines.append("    promql_expr_test:")
    compared = 0
    for t in range(DAY + 60, moments.shape[0]):
        for name in ALERTS:
            if name == "StreamevalMapDropWeekOverWeek":
                continue  # needs a week of input: its copy shares the day-over-day code
            expr = f'ALERTS{{alertname="{name}", alertstate="firing"}}'
            lines += [f"      - expr: '{expr}'", f"        eval_time: {t}m"]
            fired = [groups[int(i)] for i in np.flatnonzero(firing[name][t])]
            lines.append("        exp_samples:" + ("" if fired else " []"))
            for model, surface in fired:
                window = ',window="1h"' if name == "StreamevalVariantBelowControl" else ""
                labels = (
                    f'{{__name__="ALERTS",alertname="{name}",alertstate="firing",job="s",metric="map",k="10"'
                    f'{window},model="{model}",surface="{surface}",severity="ticket"}}'
                )
                lines += [f"          - labels: '{labels}'", "            value: 1"]
            compared += 1
    path.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    return done.returncode == 0, compared, done.stdout[-3000:] + done.stderr[-2000:]
