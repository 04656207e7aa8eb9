"""`streameval simulate` into the real broker, `streameval run` on it: the same numbers as
`streameval replay` on the same records (written by `simulate --out` with the same seed)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.integration.conftest import ROOT, Daemon, Topics
from tests.integration.test_daemon import assert_metrics_equal_replay, replay_report, settled

pytestmark = pytest.mark.integration

SIMULATION = [
    "--seed",
    "4",
    "--start",
    "2026-01-01T00:00:00Z",
    "--duration",
    "20m",
    "--rate",
    "20",
    "--no-late",
]


def simulate(*flags: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "streameval", "simulate", *SIMULATION, *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out


def test_simulate_into_kafka_then_run_equals_replay(tmp_path, topics: Topics, daemons) -> None:
    produced = simulate(
        "--fast",
        "--partitions",
        "2",
        "--bootstrap-servers",
        topics.bootstrap,
        "--impressions-topic",
        topics.impressions,
        "--events-topic",
        topics.clicks,
        "--events-topic",
        topics.purchases,
    )
    assert (
        f"created {topics.impressions}, {topics.clicks}, {topics.purchases} with 2 partitions"
        in produced.stderr
    )
    simulate("--out", str(tmp_path / "sim"))
    impressions = (tmp_path / "sim" / "impressions.jsonl").read_bytes().splitlines()
    events = [
        line
        for name in ("clicks", "purchases")
        for line in (tmp_path / "sim" / f"{name}.jsonl").read_bytes().splitlines()
    ]
    # a short horizon: once the input is quiet the watermark moves on with the wall clock, and
    # every query settles within a minute
    config = topics.config(tmp_path / "c.toml", windows=["3650d"], horizon="20s", orphan_ttl="20s")
    daemon = Daemon(config)
    daemons.append(daemon)
    metrics = daemon.wait_until(settled(len(impressions) + len(events)), timeout=180, what="all settled")
    report = replay_report(tmp_path, config, impressions, events)
    assert report["inputs"]["rejected"] and report["inputs"]["duplicates"]
    assert_metrics_equal_replay(metrics, report)
    assert daemon.stop(signal.SIGTERM) == 0
