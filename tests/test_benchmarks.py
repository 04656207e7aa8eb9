"""The benchmark command runs to completion and writes its figures (at a tiny scale).

A smoke test, not a benchmark: it checks that ``python -m benchmarks`` still works end to end and
that its table has every figure with a target beside each. It asserts nothing about how long
anything took. The figures that need no broker run here; figures 2, 6 and 7, on the test broker,
in tests/integration/test_benchmarks.py (beside the other tests that need it).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: every figure's key in results.json, whichever were asked for
KEYS = [
    "1_replay",
    "1m_mapped_input",
    "2_daemon",
    "3_state_size",
    "4_memory",
    "5_batch_route",
    "6_freshness",
    "7_peer",
]
#: every row of the table, and the targets it shows, whichever figures ran
ROWS = ("| 1.", "| 1m.", "| 2.", "| 3a.", "| 4.", "| 5.", "| 6.", "| 7.")
TARGETS = (">= 0.35", ">= 0.45", "<= 1.2x", "<= 2 KB", ">= 2x")


def run_benchmarks(out: Path, *flags: str) -> dict[str, Any]:
    """``python -m benchmarks --scale 0.01 --rounds 1`` with ``flags``; its figures, after
    checking that the table has every row and target."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--scale", "0.01", "--rounds", "1", "--out", str(out), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures: dict[str, Any] = json.loads((out / "results.json").read_text())["figures"]
    assert sorted(figures) == KEYS
    table = (out / "results.md").read_text()
    assert all(row in table for row in ROWS) and all(target in table for target in TARGETS), table
    return figures


def not_asked_for(figure: dict[str, Any]) -> bool:
    return figure.get("skipped", "").startswith("not asked for")


def test_the_figures_without_a_broker(tmp_path: Path) -> None:
    figures = run_benchmarks(tmp_path, "--figures", "1,3,5")
    assert all(not_asked_for(figures[name]) for name in ("2_daemon", "6_freshness", "7_peer"))
    assert figures["1_replay"]["ratio"] > 0
    assert figures["1_replay"]["same_report"] is True  # in one process and in several
    if "compiled_ratio" in figures["1_replay"]:  # a C compiler was at hand: the same report
        assert figures["1_replay"]["compiled_same_report"] is True
    assert figures["1m_mapped_input"]["same_metrics"] is True
    assert figures["3_state_size"]["ratio_large_vs_1k"] > 0
    assert figures["4_memory"]["bytes_per_open_query"] > 0
    # figure 5 needs the bench extras (pandas, ranx), which the test extras leave out
    if importlib.util.find_spec("ranx"):
        assert figures["5_batch_route"]["largest_difference"] < 1e-9  # ranx agrees with replay
    else:
        assert "skipped" in figures["5_batch_route"]
