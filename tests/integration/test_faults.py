"""The daemon under trouble: each test injects one fault on the real broker."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from kafka.admin import NewTopic

from tests.integration.conftest import ROOT, Daemon, Topics, value
from tests.integration.test_daemon import (
    DAEMON_CONFIG,
    T0,
    assert_metrics_equal_replay,
    replay_report,
    settled,
    time_ordered,
)
from tests.logs import BAD_EVENTS, BAD_IMPRESSIONS, random_log

BAD_ALL = BAD_IMPRESSIONS + BAD_EVENTS

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def test_poison_records_reach_a_small_dead_letter_topic_cut_to_fit(tmp_path, topics: Topics, daemons) -> None:
    """A dead-letter topic that takes 300 bytes, a 1 KB and a 1,048,450-byte non-JSON record:
    both reach it, cut to fit with a header saying so; nothing stops, the values stay exact."""
    log = random_log(random.Random(21), n_queries=150, t0=T0, span=240.0, horizon=10.0)
    impressions, events = time_ordered(log.impressions), time_ordered(log.events)
    poison = [b"<" + b"x" * 1022 + b">", b"{" * 1_048_450]
    impressions[40:40] = poison
    topics.create(partitions=2)
    topics.admin.create_topics(
        [
            NewTopic(
                topics.dlq, num_partitions=1, replication_factor=1, topic_configs={"max.message.bytes": "300"}
            )
        ],
        wait_for_metadata=True,
    )
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    config = topics.config(tmp_path / "c.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    total = len(impressions) + len(events)
    metrics = daemon.wait_until(settled(total), timeout=120, what="settled with poison records")
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))

    n_bad = sum(log.rejected.values()) + len(poison)
    dead = topics.read_all(topics.dlq, n_bad)
    assert len(dead) == n_bad
    assert value(metrics, "streameval_dead_letter_records_total") == n_bad
    # the poison copies are there, cut to fit, and say so (others may be cut too: 300 bytes is little)
    notes = {dict(m.headers).get("truncated", b""): m for m in dead}
    for size, raw in zip((1024, 1_048_450), poison, strict=True):
        message = next(m for note, m in notes.items() if b"value %d bytes" % size in note)
        assert dict(message.headers)["reason"] == b"not_json"
        assert raw.startswith(message.value or b"")
        assert len(message.value or b"") + len(message.key or b"") < 300
    assert daemon.stop(signal.SIGTERM) == 0
    assert "Traceback" not in daemon.output()


def local_broker(bootstrap: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of deploy/kafka/local.sh for the test broker; skips (fails
    under CI) when the test broker was not started by it."""
    command = [str(ROOT / "deploy" / "kafka" / "local.sh")]
    env = os.environ | {"KAFKA_PORT": bootstrap.rsplit(":", 1)[1]}
    if subprocess.run([*command, "status"], env=env, capture_output=True).returncode != 0:
        message = f"the broker at {bootstrap} was not started by deploy/kafka/local.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return command, env


def two_halves(seed: int) -> tuple[list[bytes], list[bytes], int, int]:
    """Two logs a day apart in event time, each complete (impressions with their events), and
    where the first ends: while the input is quiet between them the watermark moves on with the
    wall clock (README, Time), and nothing of the second may be late because of that."""
    first = random_log(random.Random(seed), n_queries=150, t0=T0, span=300.0, horizon=10.0)
    second = random_log(random.Random(seed + 1), n_queries=150, t0=T0 + 86400, span=300.0, horizon=10.0)

    def renamed(records: list[bytes]) -> list[bytes]:
        return [r.replace(b'"query_id":"q', b'"query_id":"r') for r in records]

    impressions = time_ordered(first.impressions) + time_ordered(renamed(second.impressions))
    events = time_ordered(first.events) + time_ordered(renamed(second.events))
    return impressions, events, len(first.impressions), len(first.events)


class TwoHalves:
    """The first half produced and processed by a running daemon (and checkpointed); then the
    test does something to the daemon's world, and :meth:`second_half` must still end exact."""

    def __init__(self, tmp_path, topics: Topics, daemons: list, seed: int, partitions: int) -> None:
        self.tmp_path, self.topics = tmp_path, topics
        self.impressions, self.events, self.half_i, self.half_e = two_halves(seed)
        topics.create(partitions=partitions)
        topics.produce(topics.impressions, self.impressions[: self.half_i])
        topics.produce(topics.clicks, self.events[: self.half_e])
        self.config = topics.config(tmp_path / "c.toml", **(DAEMON_CONFIG | {"commit_interval": "1s"}))
        self.daemon = Daemon(self.config)
        daemons.append(self.daemon)
        first = self.half_i + self.half_e
        self.daemon.wait_until(
            lambda m: value(m, "streameval_records_consumed_total") == first, what="first half"
        )
        time.sleep(2)  # a checkpoint

    def second_half(self) -> dict:
        self.topics.produce(self.topics.impressions, self.impressions[self.half_i :])
        self.topics.produce(self.topics.clicks, self.events[self.half_e :])
        metrics = self.daemon.wait_until(
            settled(len(self.impressions) + len(self.events)), timeout=180, what="second half settled"
        )
        report = replay_report(self.tmp_path, self.config, self.impressions, self.events)
        assert_metrics_equal_replay(metrics, report)
        return metrics


def test_broker_stopped_and_started_between_two_halves(tmp_path, topics: Topics, daemons) -> None:
    command, env = local_broker(topics.bootstrap)
    run = TwoHalves(tmp_path, topics, daemons, seed=22, partitions=2)
    subprocess.run([*command, "stop"], env=env, check=True, capture_output=True)
    time.sleep(5)
    assert run.daemon.proc.poll() is None, run.daemon.output()
    subprocess.run([*command, "start"], env=env, check=True, capture_output=True)
    run.second_half()
    assert run.daemon.stop(signal.SIGTERM) == 0, run.daemon.output()[-3000:]


def test_dead_letter_topic_deleted_while_running_is_created_again(tmp_path, topics: Topics, daemons) -> None:
    run = TwoHalves(tmp_path, topics, daemons, seed=24, partitions=1)
    topics.admin.delete_topics([topics.dlq])
    time.sleep(2)
    run.second_half()
    # the second half's bad records (every kind once) are on the new dead-letter topic
    assert len(topics.read_all(topics.dlq, len(BAD_ALL))) == len(BAD_ALL)
    assert run.daemon.output().count("created topic") == 2  # at start, and again after the deletion
    assert run.daemon.stop(signal.SIGTERM) == 0
