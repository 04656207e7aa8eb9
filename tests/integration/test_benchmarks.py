"""The benchmark command runs to completion and writes every figure (at a tiny scale).

A smoke test, not a benchmark: it checks that ``python -m benchmarks`` still works end to end on
the real broker and that its table has all seven figures with a target beside each. It asserts
nothing about how long anything took.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from tests.integration.conftest import ROOT


def test_benchmark_command_writes_all_seven_figures(bootstrap, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--scale", "0.01", "--rounds", "1", "--out", str(tmp_path)]
        + ["--bootstrap-servers", bootstrap],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    figures = results["figures"]
    assert sorted(figures) == [
        "1_replay",
        "1m_mapped_input",
        "2_daemon",
        "3_state_size",
        "4_memory",
        "5_batch_route",
        "6_freshness",
        "7_peer",
    ]
    # figure 5 needs the bench extras (pandas, ranx), which the test extras leave out
    optional = set() if importlib.util.find_spec("ranx") else {"5_batch_route"}
    if not importlib.util.find_spec("quixstreams"):
        optional.add("7_peer")
    for name, figure in figures.items():
        assert "skipped" not in figure or name in optional, f"{name}: {figure}"
    assert figures["1_replay"]["ratio"] > 0
    assert figures["1_replay"]["same_report"] is True  # in one process and in several
    if "compiled_ratio" in figures["1_replay"]:  # a C compiler was at hand: the same report
        assert figures["1_replay"]["compiled_same_report"] is True
    assert figures["1m_mapped_input"]["same_metrics"] is True
    assert figures["2_daemon"]["ratio"] > 0
    # every run of the daemon on the backlog (compiled or not, with checkpoints or not) counted
    # the same records and showed the same provisional metrics
    assert figures["2_daemon"]["same_metrics"] is True
    assert figures["2_daemon"]["pipeline_alone_s"] > 0  # row 2p: the pipeline fed from memory
    runs = figures["2_daemon"]["runs_s"]  # every variant once per round (its best is reported)
    assert len(runs["run"]) == len(runs["pipeline_alone"]) == len(runs["without_checkpoints"]) == 1
    assert figures["4_memory"]["bytes_per_open_query"] > 0
    if not optional:
        assert figures["5_batch_route"]["largest_difference"] < 1e-9  # ranx agrees with replay
    assert figures["6_freshness"]["records"] > 0
    if "7_peer" not in optional:  # the Quix Streams job printed its MAP (the same in every round)
        assert figures["7_peer"]["same_output"] is True
    table = (tmp_path / "results.md").read_text()
    for row in ("| 1.", "| 1m.", "| 2.", "| 2p.", "| 3a.", "| 4.", "| 5.", "| 6.", "| 7."):
        assert row in table
    assert ">= 0.35" in table and ">= 0.45" in table and "<= 2 KB" in table and ">= 2x" in table
