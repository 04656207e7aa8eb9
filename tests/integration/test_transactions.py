"""Checkpoint transactions that fit any commit interval, on the real broker."""

from __future__ import annotations

import signal

import pytest

from tests.integration.conftest import Daemon, Topics, value
from tests.integration.test_daemon import (
    DAEMON_CONFIG,
    assert_metrics_equal_replay,
    make_log,
    produce_flush,
    replay_report,
    run_cli,
    settled_with_flush,
)

pytestmark = pytest.mark.integration


def test_a_commit_interval_over_30_s_with_dead_letters_commits_every_checkpoint(
    tmp_path, topics: Topics, daemons
) -> None:
    """The first dead-letter record opens the checkpoint's transaction 45 s before the
    checkpoint commits it: with the producer's old fixed 30 s timeout the broker aborted it, the
    producer was fenced and the checkpoint failed (and so every one after it)."""
    impressions, events, log = make_log(3)
    assert sum(log.rejected.values()) > 0
    topics.create(partitions=2)
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    produce_flush(topics)
    config = topics.config(tmp_path / "c.toml", **(DAEMON_CONFIG | {"commit_interval": "45s"}))
    daemon = Daemon(config)
    daemons.append(daemon)
    total = len(impressions) + len(events)
    daemon.wait_until(settled_with_flush(topics, total), what="everything settled")
    metrics = daemon.wait_until(
        lambda m: value(m, "streameval_checkpoints_total") >= 1, timeout=120, what="the first checkpoint"
    )
    assert value(metrics, "streameval_checkpoint_failures_total") == 0
    # by now the wall clock has moved the watermark past the flush queries too: leave them out
    metrics = {
        name: [(labels, v) for labels, v in samples if labels.get("model") != "flush"]
        for name, samples in metrics.items()
    }
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))
    dead = topics.read_all(topics.dlq, sum(log.rejected.values()))
    assert len(dead) == sum(log.rejected.values())
    assert daemon.stop(signal.SIGTERM) == 0
    assert "ProducerFenced" not in daemon.output() and "checkpoint failed" not in daemon.output()


def test_a_commit_interval_no_broker_timeout_covers_stops_start_up_naming_it(
    tmp_path, topics: Topics
) -> None:
    topics.create(partitions=1)
    out = run_cli("--config", str(topics.config(tmp_path / "c.toml", commit_interval="1h")))
    assert out.returncode == 2, out.stderr
    assert "commit_interval" in out.stderr and "transaction.max.timeout.ms" in out.stderr
    assert "Traceback" not in out.stderr
