"""The benchmark command's figures on the broker (2, 6 and 7) run to completion (at a tiny scale).

A smoke test, not a benchmark (the others are in tests/test_benchmarks.py); it asserts nothing
about how long anything took.
"""

from __future__ import annotations

import importlib.util

from tests.test_benchmarks import not_asked_for, run_benchmarks


def test_the_figures_on_the_broker(bootstrap, tmp_path) -> None:
    figures = run_benchmarks(tmp_path, "--figures", "2,6", "--bootstrap-servers", bootstrap)
    assert all(not_asked_for(figures[name]) for name in ("1_replay", "3_state_size", "5_batch_route"))
    two = figures["2_daemon"]
    assert two["ratio"] > 0
    # every run of the daemon on the backlog (compiled or not, with checkpoints or not) counted
    # the same records and showed the same provisional metrics
    assert two["same_metrics"] is True
    assert two["pipeline_alone_s"] > 0  # row 2p: the pipeline fed from memory
    runs = two["runs_s"]  # every variant once per round (its best is reported)
    assert len(runs["run"]) == len(runs["pipeline_alone"]) == len(runs["without_checkpoints"]) == 1
    assert len(two["steal_percent_by_round"]) == 1  # what the hypervisor took in its round (Linux)
    assert figures["6_freshness"]["records"] > 0
    if importlib.util.find_spec("quixstreams"):  # its job printed its MAP, the same in every round
        assert figures["7_peer"]["same_output"] is True
    else:
        assert "skipped" in figures["7_peer"]
