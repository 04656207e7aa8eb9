"""Exact after failure: SIGKILL, SIGTERM, a second member, an unreadable changelog -- each
compared with `streameval replay` on the same logs."""

from __future__ import annotations

import random
import signal
import threading
import time

import orjson
import pytest
from kafka import KafkaProducer

from tests.integration.conftest import KAFKA_CLIENTS, Daemon, Topics, key_of, value, with_both_clients
from tests.integration.test_daemon import (
    DAEMON_CONFIG,
    T0,
    assert_metrics_equal_replay,
    produce_flush,
    replay_report,
    settled_with_flush,
    time_ordered,
    ts_of,
)
from tests.logs import random_log

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=KAFKA_CLIENTS)
def kafka_client(request: pytest.FixtureRequest, topics: Topics) -> str:
    """Every recovery test with each client library (README, Configuration: kafka_client)."""
    return with_both_clients(request, topics)


def live_log(seed: int, n_queries: int = 600):
    log = random_log(
        random.Random(seed),
        n_queries=n_queries,
        t0=T0,
        span=600.0,
        horizon=10.0,
        models=("ranker-a", "ranker-b", "ranker-c"),
    )
    return time_ordered(log.impressions), time_ordered(log.events)


#: the most event time the records sent together (between two flushes) may span. The broker
#: appends a produce request's batches one partition after the other, and a fetch between two
#: appends sees one topic's records but not the other's; the daemon then rightly takes the
#: topic it saw nothing new from as caught up. Under the allowed lateness of LIVE_CONFIG (30 s)
#: no record sent with others can be late for that. (With 25 records per flush, the sparse end
#: of a log, duplicate impressions a minute after their first copy, put 37 s of event time in
#: one flush: 4 clicks late in 1 of ~40 runs of the dead-letter test, seed 24.)
FLUSH_SPAN_S = 10.0


class Feed(threading.Thread):
    """Produces the records in time order, a batch at a time (25 records, or fewer where they
    would span more than FLUSH_SPAN_S of event time), while the test does other things; with
    ``flush``, then a far-future impression in every partition (:func:`produce_flush`), so that
    the log settles at once (``settled_with_flush``)."""

    def __init__(
        self,
        topics: Topics,
        impressions: list[bytes],
        events: list[bytes],
        seconds: float,
        flush: bool = False,
    ):
        super().__init__(daemon=True)
        self.topics, self.flush = topics, flush
        merged = [(topics.impressions, r) for r in impressions] + [(topics.clicks, r) for r in events]
        self.records = sorted(merged, key=lambda tr: ts_of(tr[1]) or 0.0)
        self.bootstrap = topics.bootstrap
        self.pause = seconds / max(1, len(self.records) // 25)

    def run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0)
        first: float | None = None  # the event time of the first record sent since the last flush
        for i, (topic, raw) in enumerate(self.records):
            ts = ts_of(raw)
            if ts is not None:
                if first is None:
                    first = ts
                elif ts - first > FLUSH_SPAN_S:
                    producer.flush()
                    first = ts
            producer.send(topic, value=raw, key=key_of(raw))
            if i % 25 == 24:
                producer.flush()
                first = None
                time.sleep(self.pause)
        producer.flush()
        producer.close()
        if self.flush:
            produce_flush(self.topics)


#: The feeds run event time ~25x faster than the wall clock; the usual skew between topics (a
#: fetch or two) must stay inside the allowed lateness, as it does live (see the backlog test).
LIVE_CONFIG = DAEMON_CONFIG | {"allowed_lateness": "30s", "commit_interval": "1s"}


def config_with_kafka(topics: Topics, path, instance: str | None = None, **extra):
    config = topics.config(path, **(LIVE_CONFIG | extra))
    if instance is not None:
        config.write_text(config.read_text() + f'\n[kafka]\ngroup_instance_id = "{instance}"\n')
    return config


def wait_processing(daemon: Daemon, at_least: float) -> None:
    daemon.wait_until(
        lambda m: value(m, "streameval_records_consumed_total") >= at_least, what=f">= {at_least} consumed"
    )


def test_sigkill_twice_during_live_traffic_ends_exact(tmp_path, topics: Topics, daemons) -> None:
    impressions, events = live_log(11)
    total = len(impressions) + len(events)
    topics.create(partitions=3)
    config = config_with_kafka(topics, tmp_path / "c.toml", instance="kill-test")
    feed = Feed(topics, impressions, events, seconds=25, flush=True)
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.wait_until(lambda m: value(m, "streameval_ready") == 1, what="ready")
    feed.start()
    for share in (0.25, 0.55):
        wait_processing(daemon, share * total)
        time.sleep(1.5)  # past a checkpoint, and into the next interval
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        daemon = Daemon(config)
        daemons.append(daemon)
    feed.join()
    metrics = daemon.wait_until(
        settled_with_flush(topics, total), timeout=120, what="everything settled after two kills"
    )
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))
    assert value(metrics, "streameval_restores_total") >= 3
    assert daemon.stop(signal.SIGTERM) == 0


def test_sigterm_restart_mid_traffic_ends_exact(tmp_path, topics: Topics, daemons) -> None:
    impressions, events = live_log(12, n_queries=400)
    total = len(impressions) + len(events)
    topics.create(partitions=2)
    config = config_with_kafka(topics, tmp_path / "c.toml")
    feed = Feed(topics, impressions, events, seconds=15, flush=True)
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.wait_until(lambda m: value(m, "streameval_ready") == 1, what="ready")
    feed.start()
    wait_processing(daemon, 0.4 * total)
    assert daemon.stop(signal.SIGTERM) == 0
    assert "final checkpoint" in daemon.output() and "Traceback" not in daemon.output()
    daemon = Daemon(config)
    daemons.append(daemon)
    feed.join()
    metrics = daemon.wait_until(
        settled_with_flush(topics, total), timeout=120, what="everything settled after a restart"
    )
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))
    assert daemon.stop(signal.SIGTERM) == 0


def test_two_members_one_killed_the_survivor_holds_everything(tmp_path, topics: Topics, daemons) -> None:
    impressions, events = live_log(13, n_queries=500)
    total = len(impressions) + len(events)
    topics.create(partitions=4)
    a_config = config_with_kafka(topics, tmp_path / "a.toml")
    b_config = config_with_kafka(topics, tmp_path / "b.toml")
    a, b = Daemon(a_config), Daemon(b_config)
    daemons += [a, b]
    for d in (a, b):
        d.wait_until(lambda m: value(m, "streameval_ready") == 1, what="ready")
    feed = Feed(topics, impressions, events, seconds=20)
    feed.start()
    b.wait_until(lambda m: value(m, "streameval_records_consumed_total") >= 0.15 * total, what="b consumed")
    time.sleep(1.5)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait()
    feed.join()
    # b's partitions come to a once the broker expires b's session (45 s under KIP-848): flush
    # only then, or the flush queries a already holds may settle on its idle watermark before
    # the others arrive, and the check below never sees all of them open at once
    a.wait_until(lambda m: len(owned(m)) == 4, timeout=120, what="a holds all four")
    produce_flush(topics)
    metrics = a.wait_until(
        settled_with_flush(topics, total), timeout=150, what="the survivor settled everything"
    )
    # the survivor alone: its summed parts and its _total counters cover all four partitions
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, a_config, impressions, events))
    assert a.stop(signal.SIGTERM) == 0


def owned(metrics: dict) -> set[str]:
    """The partition numbers an instance holds, from its consumer lag gauge."""
    return {labels["partition"] for labels, _ in metrics.get("streameval_consumer_lag", [])}


def test_a_member_joining_and_leaving_moves_only_the_partitions_that_change_owner(
    tmp_path, topics: Topics, daemons
) -> None:
    impressions, events = live_log(14, n_queries=500)
    total = len(impressions) + len(events)
    topics.create(partitions=4)
    a_config = config_with_kafka(topics, tmp_path / "a.toml")
    b_config = config_with_kafka(topics, tmp_path / "b.toml")
    a = Daemon(a_config)
    daemons.append(a)
    a.wait_until(lambda m: value(m, "streameval_ready") == 1 and len(owned(m)) == 4, what="a holds all")
    feed = Feed(topics, impressions, events, seconds=20, flush=True)
    feed.start()
    wait_processing(a, 0.2 * total)
    b = Daemon(b_config)
    daemons.append(b)
    b.wait_until(lambda m: value(m, "streameval_ready") == 1 and len(owned(m)) == 2, what="b holds two")
    shared = a.wait_until(lambda m: len(owned(m)) == 2, what="a gave two partitions to b")
    assert owned(shared).isdisjoint(owned(b.metrics()))
    # cooperative: the two partitions a kept were not read back from the changelog again
    assert value(shared, "streameval_restores_total") == 4
    wait_processing(b, 0.1 * total)
    time.sleep(1.5)
    assert b.stop(signal.SIGTERM) == 0
    feed.join()
    metrics = a.wait_until(
        settled_with_flush(topics, total), timeout=150, what="a settled everything after b left"
    )
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, a_config, impressions, events))
    assert value(metrics, "streameval_restores_total") == 6  # b's two came back; nothing else moved
    assert a.stop(signal.SIGTERM) == 0
    assert "Traceback" not in a.output() + b.output()


def test_first_start_creates_the_changelog_and_an_unreadable_record_stops_with_its_place(
    tmp_path, topics: Topics, daemons
) -> None:
    impressions, events = live_log(14, n_queries=50)
    topics.create(partitions=1)
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    produce_flush(topics)
    config = config_with_kafka(topics, tmp_path / "c.toml")
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.wait_until(settled_with_flush(topics, len(impressions) + len(events)), what="settled")
    assert daemon.stop(signal.SIGTERM) == 0
    changelog = f"{topics.group}-changelog"
    assert f"created changelog topic {changelog}" in daemon.output()
    configs = topics.admin.describe_configs([_resource(changelog)])
    assert "compact" in str(configs)

    producer = KafkaProducer(bootstrap_servers=topics.bootstrap)
    producer.send(changelog, key=b"q:broken", value=b"{not json", partition=0)
    producer.send(changelog, key=b"q:future", value=orjson.dumps({"v": 99}), partition=0)
    producer.flush()
    producer.close()
    restarted = Daemon(config)
    daemons.append(restarted)
    code = restarted.proc.wait(timeout=90)
    out = restarted.output()
    assert code == 2, out
    assert f"{changelog}[0]@" in out and "is not JSON" in out and "Traceback" not in out


def _resource(topic: str):
    from kafka.admin import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.TOPIC, topic)
