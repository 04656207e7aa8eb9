"""`streameval simulate`: deterministic traffic, and a regression that shows in replay's numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest

from streameval.config import load_settings
from streameval.errors import ConfigError
from streameval.history import History, mean_and_se
from streameval.pipeline import Pipeline
from streameval.simulate import Regression, Simulator
from streameval.view import Operations, View, merge_snapshots
from tests.test_cli import streameval

START = "2026-01-01T00:00:00Z"


def test_same_seed_same_records_in_time_order() -> None:
    a = list(Simulator(seed=5, start=1000.0, rate=50).records(until=1600.0))
    b = list(Simulator(seed=5, start=1000.0, rate=50).records(until=1600.0))
    c = list(Simulator(seed=6, start=1000.0, rate=50).records(until=1600.0))
    assert a == b and a != c
    assert all(x.ts <= y.ts for x, y in zip(a, a[1:], strict=False))
    assert 0.8 * 50 * 600 < len(a) < 1.2 * 50 * 600  # --rate is records per second


def test_regress_is_parsed_and_checked() -> None:
    assert Regression.parse("candidate-a:0.3@10m") == Regression("candidate-a", 0.3, 600.0)
    for bad in ("candidate-a", "candidate-a:1.5@10m", "candidate-a:0.3@soon", ":0.3@1m"):
        with pytest.raises(ConfigError, match="--regress"):
            Regression.parse(bad)
    with pytest.raises(ConfigError, match="no model 'nope'"):
        Simulator(regressions=[Regression("nope", 0.5, 0.0)])


def _split(directory: Path, at: float, into: Path) -> tuple[Path, Path]:
    """The records of queries served before / after ``at``, as two replayable directories."""
    served: dict[str, float] = {}
    halves = {name: into / name for name in ("before", "after")}
    for path in halves.values():
        path.mkdir(parents=True)
    for name in ("impressions", "clicks", "purchases"):
        outs = {half: (path / f"{name}.jsonl").open("wb") for half, path in halves.items()}
        for line in (directory / f"{name}.jsonl").read_bytes().splitlines():
            try:
                obj = orjson.loads(line)
                qid, ts = obj["query_id"], obj["ts"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
            if name == "impressions":
                served.setdefault(qid, ts)
            first = served.get(qid, ts)
            outs["before" if first < at else "after"].write(line + b"\n")
        for handle in outs.values():
            handle.close()
    return halves["before"], halves["after"]


def _replay(directory: Path) -> dict:
    out = streameval(
        "replay",
        "--impressions",
        str(directory / "impressions.jsonl"),
        "--events",
        str(directory / "clicks.jsonl"),
        "--events",
        str(directory / "purchases.jsonl"),
        "--format",
        "json",
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_simulate_out_then_replay_shows_the_regression(tmp_path) -> None:
    """candidate-a loses 40% at 30 minutes: its MAP after is 0.6 of before, within 0.05; the
    other models stay within 0.03 (sampling noise)."""
    out = streameval(
        "simulate",
        "--out",
        str(tmp_path / "sim"),
        "--seed",
        "3",
        "--start",
        START,
        "--duration",
        "1h",
        "--rate",
        "40",
        "--regress",
        "candidate-a:0.4@30m",
    )
    assert out.returncode == 0, out.stderr
    assert "simulate:" in out.stderr
    full = _replay(tmp_path / "sim")
    assert full["inputs"]["rejected"] and full["inputs"]["unattributed"] and full["inputs"]["duplicates"]
    at = 1767225600.0 + 1800.0
    before, after = (_replay(d) for d in _split(tmp_path / "sim", at, tmp_path / "split"))

    def by_model(report: dict) -> dict[str, float]:
        sums: dict[str, list[float]] = {}
        for group in report["groups"]:
            n = group["queries_with_relevant"]
            acc = sums.setdefault(group["labels"]["model"], [0.0, 0.0])
            acc[0] += group["map@10"] * n
            acc[1] += n
        return {model: total / n for model, (total, n) in sums.items()}

    b, a = by_model(before), by_model(after)
    assert a["candidate-a"] / b["candidate-a"] == pytest.approx(0.6, abs=0.05)
    for model in ("control", "candidate-b"):
        assert a[model] == pytest.approx(b[model], abs=0.03)
    assert b["candidate-a"] > b["control"] > b["candidate-b"]  # qualities differ as documented


def test_mean_and_se_against_the_textbook() -> None:
    values = [0.1, 0.5, 0.9, 0.3]
    mean, se = mean_and_se(sum(values), sum(v * v for v in values), len(values))
    m = sum(values) / 4
    s2 = sum((v - m) ** 2 for v in values) / 3
    assert mean == pytest.approx(m) and se == pytest.approx(math.sqrt(s2 / 4))
    assert mean_and_se(0.0, 0.0, 0) == (None, None)
    assert mean_and_se(0.5, 0.25, 1) == (0.5, None)


def test_history_is_bounded_and_summarises_groups() -> None:
    settings = load_settings(None, {}, {"windows": ["10m"], "horizon": "1m"})
    sim = Simulator(seed=2, start=0.0, rate=50)
    now = [0.0]
    pipeline = Pipeline(settings, wall_clock=lambda: now[0])
    history = History(every=60.0, max_points=5)
    for record in sim.records(until=1800.0):
        now[0] = record.ts
        topic = "impressions" if record.kind == "impression" else record.kind + "s"
        pipeline.handle(topic, pipeline.decode(topic, record.value))
        snapshot = merge_snapshots([pipeline.snapshot()]) if int(record.ts) % 60 == 0 else None
        if snapshot is not None:
            history.record(View(settings, snapshot, {}, {}, (), 0.0, record.ts, Operations(), True))
    assert len(history.points) == 5
    view = View(settings, merge_snapshots([pipeline.snapshot()]), {}, {}, (), 0.0, now[0], Operations(), True)
    summary = history.summary(view, "wall")
    assert summary["metric"] == "map@10" and summary["window"] == "10m"
    assert "model=control, surface=home" in summary["groups"]
    mean, se, queries, provisional = summary["points"][-1]["groups"]["model=control, surface=home"]
    assert 0 < mean < 1 and 0 < se < 0.1 and queries > 0 and 0 <= provisional <= 1
    json.dumps(summary)  # plain data
