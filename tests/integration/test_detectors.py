"""The regression detectors in the daemon (README, Regression detectors): the consumer group's
detectors, fed through the minutes topic, equal replay's on the same logs -- through a SIGKILL,
a member joining and the holder of partition 0 leaving."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from streameval.simulate import Regression, Simulator
from tests.integration.conftest import Daemon, Topics, value
from tests.integration.test_daemon import (
    DAEMON_CONFIG,
    T0,
    produce_flush,
    replay_report,
    settled_with_flush,
)

pytestmark = pytest.mark.integration

#: control = "control" (the default); the reference half an hour back, so 80 simulated minutes
#: exercise both detectors; a horizon long enough for most clicks
CONFIG = DAEMON_CONFIG | {"horizon": "5m", "commit_interval": "1s", "detect_reference": "30m"}


def simulated(minutes: float) -> tuple[list[bytes], list[bytes]]:
    """Simulator traffic in time order, without late records (which only the daemon drops);
    candidate-a loses 40% after 50 minutes."""
    sim = Simulator(
        seed=9, start=T0, rate=25.0, regressions=[Regression("candidate-a", 0.4, 3000.0)], late_by=0.0
    )
    impressions, events = [], []
    for record in sim.records(until=T0 + minutes * 60):
        (impressions if record.kind == "impression" else events).append(record.value)
    return impressions, events


def detectors_of(metrics: dict) -> dict[tuple[str, str, str], dict[str, float]]:
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for name, field in (
        ("streameval_detector_statistic", "statistic"),
        ("streameval_detector_threshold", "threshold"),
        ("streameval_detector_alarms_total", "alarms"),
        ("streameval_detector_difference", "difference"),
    ):
        for labels, got in metrics.get(name, ()):
            out.setdefault((labels["versus"], labels["model"], labels["surface"]), {})[field] = got
    return out


def expected(report: dict) -> dict[tuple[str, str, str], dict[str, float]]:
    return {
        (d["versus"], d["labels"]["model"], d["labels"]["surface"]): {
            "statistic": d["statistic"],
            "threshold": d["threshold"],
            "alarms": d["alarms"],
            "difference": d["difference"],
        }
        for d in report["detectors"]
    }


def same(got: dict, want: dict) -> bool:
    if set(got) != set(want):
        return False
    return all(
        got[key].get(field) == pytest.approx(number, rel=1e-9, abs=1e-9)
        for key, values in want.items()
        for field, number in values.items()
        if number is not None
    )


def test_run_equals_replay_through_a_kill_a_join_and_partition_0_moving(
    tmp_path: Path, topics: Topics, daemons
) -> None:
    impressions, events = simulated(80)
    total = len(impressions) + len(events)
    topics.create(partitions=3)
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    config = topics.config(tmp_path / "a.toml", **CONFIG)
    want = expected(replay_report(tmp_path, config, impressions, events))
    assert any(
        v["alarms"] for (kind, model, _), v in want.items() if kind == "reference" and model == "candidate-a"
    )
    assert any(
        v["alarms"] for (kind, model, _), v in want.items() if kind == "control" and model == "candidate-b"
    )

    first = Daemon(config)
    daemons.append(first)
    at_kill = first.wait_until(
        lambda m: value(m, "streameval_records_consumed_total") >= 0.3 * total, what="30% consumed"
    )
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    assert value(at_kill, "streameval_records_consumed_total") < total

    second = Daemon(config)
    daemons.append(second)
    second.wait_until(lambda m: value(m, "streameval_records_consumed_total") >= 0.6 * total, what="60%")
    third = Daemon(topics.config(tmp_path / "c.toml", **CONFIG))
    daemons.append(third)
    third.wait_until(lambda m: value(m, "streameval_ready") == 1, what="the third member ready")
    assert second.stop(signal.SIGTERM) == 0  # partition 0, wherever it was, ends on the third
    produce_flush(topics)
    third.wait_until(settled_with_flush(topics, total), timeout=120, what="everything settled")
    metrics = third.wait_until(
        lambda m: same(detectors_of(m), want), timeout=120, what="the detectors equal replay's"
    )
    assert value(metrics, "streameval_restores_total") >= 1
    assert third.stop(signal.SIGTERM) == 0
