"""``python -m benchmarks.alerts`` runs from a checkout and writes its table (at a tiny scale).

A smoke test: it checks that the alert-quality benchmark still works end to end, with every
detector and rule in its results and the rules' copy agreeing with the real Prometheus
(promtool); it asserts nothing about the rates it measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.promtool import tool

ROOT = Path(__file__).resolve().parents[1]
KINDS = {
    "control",
    "reference",
    "StreamevalMapDropDayOverDay",
    "StreamevalMapDropWeekOverWeek",
    "StreamevalVariantBelowControl",
}


def test_alert_benchmark_writes_its_table(tmp_path) -> None:
    tool("promtool", "prometheus")  # skips (locally) or fails (CI) without it
    out = tmp_path / "alerts.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.alerts", "--scale", "0.01", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["levels"]) == {"busy", "thin"}
    for level in result["levels"].values():
        assert set(level["aa"]) == KINDS
        assert all(set(drop) == KINDS for drop in level["drops"].values())
        assert level["prometheus"]["agrees"] and level["prometheus"]["evaluations"] > 1000
    assert "| busy | CUSUM versus control |" in done.stdout
