"""`streameval run` against the real broker, checked against `streameval replay` on the same logs."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from streameval.config import load_settings
from streameval.kafka.assignor import CooperativeCopartitioned
from streameval.replay import build_report, run_replay
from tests.integration.conftest import ROOT, Daemon, Topics, free_port, key_of, value
from tests.logs import random_log
from tests.promtool import check_metrics

pytestmark = pytest.mark.integration

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAEMON_CONFIG = {"horizon": "10s", "allowed_lateness": "1s", "orphan_ttl": "30s", "windows": ["3650d"]}


def ts_of(raw: bytes) -> float | None:
    """The numeric ts of a record, or None for records without one (bad ones)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    ts = obj.get("ts") if isinstance(obj, dict) else None
    if isinstance(ts, int | float) and not isinstance(ts, bool) and isinstance(obj.get("query_id"), str):
        return float(ts)
    return None


def time_ordered(lines: list[bytes]) -> list[bytes]:
    """Valid records in timestamp order, as a logging pipeline writes them; bad ones stay where they are."""
    timed, slots = [], []
    for i, raw in enumerate(lines):
        ts = ts_of(raw)
        if ts is not None:
            timed.append((ts, raw))
            slots.append(i)
    out = list(lines)
    for slot, (_, raw) in zip(slots, sorted(timed, key=lambda t: t[0]), strict=True):
        out[slot] = raw
    return out


def make_log(seed: int):
    log = random_log(
        random.Random(seed),
        n_queries=150,
        t0=T0,
        span=240.0,
        horizon=10.0,
        models=("ranker-a", "ranker-b", "ranker-c"),
    )
    return time_ordered(log.impressions), time_ordered(log.events), log


def replay_report(tmp_path: Path, config: Path, impressions: list[bytes], events: list[bytes]) -> dict:
    imps, evs = tmp_path / "impressions.jsonl", tmp_path / "events.jsonl"
    imps.write_bytes(b"\n".join(impressions) + b"\n")
    evs.write_bytes(b"\n".join(events) + b"\n")
    return build_report(run_replay(load_settings(str(config), {}, {}), str(imps), [str(evs)]))


def settled(expected_records: int, still_open: int = 0):
    def check(m: dict) -> bool:
        return (
            value(m, "streameval_records_consumed_total") == expected_records
            and value(m, "streameval_open_queries") == still_open
            and value(m, "streameval_orphans_held") == 0
            and value(m, "streameval_ready") == 1
        )

    return check


def assert_metrics_equal_replay(metrics: dict, report: dict, window: str = "3650d") -> None:
    groups = {(g["labels"]["model"], g["labels"]["surface"]): g for g in report["groups"]}
    seen = set()
    for labels, got in metrics["streameval_map"]:
        if labels["window"] != window:
            continue
        key = (labels["model"], labels["surface"])
        seen.add(key)
        assert got == pytest.approx(groups[key]["map@10"], abs=1e-9), key
    assert seen == {k for k, g in groups.items() if g["map@10"] is not None}
    for name in ("ndcg", "recall", "mrr"):
        for labels, got in metrics[f"streameval_{name}"]:
            key = (labels["model"], labels["surface"])
            assert got == pytest.approx(groups[key][f"{name}@10"], abs=1e-9), (name, key)
    for labels, got in metrics["streameval_queries"]:
        assert got == groups[(labels["model"], labels["surface"])]["queries"]
    # the consumer group's MAP from the summed parts, as the README's PromQL computes it
    pooled = value(metrics, "streameval_metric_values", metric="map", window=window) / value(
        metrics, "streameval_queries_with_relevant", window=window
    )
    assert pooled == pytest.approx(report["overall"]["map@10"], abs=1e-9)
    settled_pooled = value(metrics, "streameval_settled_metric_values_total", metric="map") / value(
        metrics, "streameval_settled_queries_with_relevant_total"
    )
    assert settled_pooled == pytest.approx(report["overall"]["map@10"], abs=1e-9)


def test_daemon_equals_replay_and_dead_letters_bad_records(tmp_path, topics: Topics, daemons) -> None:
    impressions, events, log = make_log(1)
    topics.create(partitions=3)
    topics.produce(topics.impressions, impressions)
    clicks = [e for e in events if b'"purchase"' not in e]
    purchases = [e for e in events if b'"purchase"' in e]
    topics.produce(topics.clicks, clicks)
    topics.produce(topics.purchases, purchases)
    config = topics.config(tmp_path / "streameval.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    metrics = daemon.wait_until(settled(len(impressions) + len(events)), what="everything settled")

    report = replay_report(tmp_path, config, impressions, events)
    assert_metrics_equal_replay(metrics, report)
    rejected = {}
    for labels, n in metrics["streameval_records_rejected_total"]:
        rejected[labels["reason"]] = rejected.get(labels["reason"], 0) + n
    assert rejected == report["inputs"]["rejected"] == dict(log.rejected)
    assert daemon.get("/readyz")[0] == 200 and daemon.get("/healthz")[0] == 200
    # a scrape of the running daemon after traffic passes Prometheus' own linter
    scrape = daemon.get("/metrics")[1]
    for family in ("streameval_map", "streameval_provisional_queries", "streameval_consumer_lag"):
        assert f"# TYPE {family} " in scrape, family
    assert check_metrics(scrape) == ""
    status, page = daemon.get("/")
    assert status == 200 and "/api/summary" in page
    status, summary = daemon.get("/api/summary")
    assert status == 200 and "model=ranker-a" in summary and '"clock":"wall"' in summary

    # every rejected record is on the dead-letter topic, unchanged, with its reason and origin
    n_bad = sum(log.rejected.values())
    dead = topics.read_all(topics.dlq, n_bad)
    assert len(dead) == n_bad
    reasons: dict[str, int] = {}
    for message in dead:
        headers = dict(message.headers)
        reasons[headers["reason"].decode()] = reasons.get(headers["reason"].decode(), 0) + 1
        source = headers["topic"].decode()
        assert source in (topics.impressions, topics.clicks, topics.purchases)
        assert int(headers["offset"]) >= 0 and int(headers["partition"]) in range(3)
        assert message.value in impressions + events
    assert reasons == dict(log.rejected)

    assert daemon.stop(signal.SIGTERM) == 0
    assert "Traceback" not in daemon.output()


def flush_records(partitions: int, ts: float) -> list[tuple[int, bytes]]:
    """One far-future impression per partition: the watermark jumps past everything before it
    (the flush queries themselves stay open)."""
    return [
        (p, orjson.dumps({"query_id": f"flush-{p}", "ts": ts, "items": ["x"], "model": "flush"}))
        for p in range(partitions)
    ]


def produce_flush(topics: Topics) -> None:
    """:func:`flush_records` into every partition of the impressions topic: a live log then
    settles at once rather than after the allowed lateness and horizon of wall time."""
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap)
    for partition, raw in flush_records(topics.partitions, T0 + 10 * 86400):
        producer.send(topics.impressions, value=raw, key=raw, partition=partition)
    producer.flush()
    producer.close()


def settled_with_flush(topics: Topics, total: int):
    """The ``total`` records of the log and the flush records (:func:`produce_flush`) consumed,
    everything but the flush queries settled."""
    return settled(total + topics.partitions, still_open=topics.partitions)


def test_backlog_gives_the_same_values_as_a_slow_feed(tmp_path, topics: Topics, daemons) -> None:
    """A live feed and a backlog of the same records give the same values.

    The live feed runs about 10x faster than real time with the allowed lateness at 30 s, so
    the usual skew between topics (a fetch or two) stays well inside it, as it does live.
    """
    impressions, events, log = make_log(2)
    topics.create(partitions=2)
    config = topics.config(tmp_path / "live.toml", **(DAEMON_CONFIG | {"allowed_lateness": "30s"}))
    live = Daemon(config)
    daemons.append(live)
    live.wait_until(lambda m: value(m, "streameval_ready") == 1, what="partitions assigned")
    merged = sorted(
        [(topics.impressions, r) for r in impressions] + [(topics.clicks, r) for r in events],
        key=lambda tr: ts_of(tr[1]) or 0.0,
    )
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, linger_ms=0)
    started = time.time()
    for i, (topic, raw) in enumerate(merged):
        producer.send(topic, value=raw, key=key_of(raw))
        if i % 20 == 19:
            producer.flush()
            time.sleep(0.05)
    producer.flush()
    feed_seconds = time.time() - started
    total = len(impressions) + len(events)
    live.wait_until(
        lambda m: value(m, "streameval_records_consumed_total") == total, what="live feed consumed"
    )
    flush = flush_records(2, T0 + 10 * 86400)
    for partition, raw in flush:
        producer.send(topics.impressions, value=raw, key=raw, partition=partition)
    producer.flush()
    producer.close()
    live_metrics = live.wait_until(settled(total + len(flush), len(flush)), what="live feed settled")
    assert live.stop() == 0

    # a new consumer group reading the same topics from the earliest offsets: a backlog
    backlog_config = Path(str(config).replace("live", "backlog"))
    backlog_config.write_text(
        config.read_text()
        .replace(topics.group, topics.group + ".backlog")
        .replace(f"metrics_port = {live.port}", f"metrics_port = {free_port()}")
    )
    backlog = Daemon(backlog_config)
    daemons.append(backlog)
    backlog_metrics = backlog.wait_until(settled(total + len(flush), len(flush)), what="backlog settled")
    assert backlog.stop() == 0

    times = [r["ts"] for r in log.valid_impressions]
    speed = (max(times) - min(times)) / feed_seconds
    assert speed < 300, "the live feed must not outrun the allowed lateness"
    for name in (
        "streameval_map",
        "streameval_ndcg",
        "streameval_metric_values",
        "streameval_queries",
        "streameval_settled_metric_values_total",
        "streameval_settled_queries_total",
    ):
        assert sorted(map(repr, live_metrics[name])) == sorted(map(repr, backlog_metrics[name])), name
    report = replay_report(tmp_path, config, impressions, events)
    assert_metrics_equal_replay(backlog_metrics, report)


def test_a_backlog_larger_than_the_buffers_pauses_resumes_and_loses_nothing(
    tmp_path, topics, daemons
) -> None:
    """More impressions in one partition than PAUSE_ABOVE: the loop must pause and resume it."""
    from streameval.kafka.loop import PAUSE_ABOVE

    log = random_log(random.Random(4), n_queries=PAUSE_ABOVE + 1500, t0=T0, span=3600.0, horizon=10.0)
    impressions, events = time_ordered(log.impressions), time_ordered(log.events)
    topics.create(partitions=1)
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    produce_flush(topics)
    config = topics.config(tmp_path / "big.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    metrics = daemon.wait_until(
        settled_with_flush(topics, len(impressions) + len(events)), timeout=180, what="big backlog settled"
    )
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))
    assert daemon.stop() == 0


def test_rebalances_that_keep_the_partitions_lose_and_repeat_nothing(tmp_path, topics, daemons) -> None:
    """A member joining and leaving the group (on another topic) mid-backlog: the cooperative
    rebalances leave the daemon's partitions where they are, so nothing is restored again, lost
    or repeated."""
    log = random_log(random.Random(5), n_queries=12000, t0=T0, span=3600.0, horizon=10.0)
    impressions, events = time_ordered(log.impressions), time_ordered(log.events)
    topics.create(partitions=3)
    other = f"{topics.prefix}.other"
    topics.admin.create_topics(
        [NewTopic(other, num_partitions=1, replication_factor=1)], wait_for_metadata=True
    )
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    produce_flush(topics)
    config = topics.config(tmp_path / "c.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    daemon.wait_until(lambda m: value(m, "streameval_ready") == 1, what="partitions assigned")
    for _ in range(2):
        member = KafkaConsumer(
            other,
            bootstrap_servers=topics.bootstrap,
            group_id=topics.group,
            max_poll_interval_ms=30_000,
            partition_assignment_strategy=[CooperativeCopartitioned()],
        )
        deadline = time.time() + 20
        while not member.assignment() and time.time() < deadline:
            member.poll(timeout_ms=200)
        member.close()
    total = len(impressions) + len(events)
    metrics = daemon.wait_until(
        settled_with_flush(topics, total), timeout=180, what="settled after rebalances"
    )
    assert daemon.output().count("restoring state from") == 1  # at start only
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, config, impressions, events))
    assert daemon.stop() == 0


def test_sigterm_exits_zero_with_offsets_committed(tmp_path, topics: Topics, daemons) -> None:
    impressions, events, _ = make_log(3)
    topics.create(partitions=2)
    topics.produce(topics.impressions, impressions)
    topics.produce(topics.clicks, events)
    daemon = Daemon(topics.config(tmp_path / "c.toml", **DAEMON_CONFIG))
    daemons.append(daemon)
    daemon.wait_until(
        lambda m: value(m, "streameval_records_consumed_total") == len(impressions) + len(events),
        what="everything consumed",
    )
    assert daemon.stop(signal.SIGTERM) == 0
    consumer = KafkaConsumer(
        bootstrap_servers=topics.bootstrap, group_id=topics.group, enable_auto_commit=False
    )
    try:
        for topic in (topics.impressions, topics.clicks):
            partitions = [TopicPartition(topic, p) for p in range(2)]
            ends = consumer.end_offsets(partitions)
            for tp in partitions:
                assert consumer.committed(tp) == ends[tp], tp
    finally:
        consumer.close()


def run_cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streameval", "run", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"colour": "red"}, "colour"),
        ({"ap_denominator": "median"}, "ap_denominator"),
        ({"metrics_port": 70000}, "metrics_port"),
    ],
)
def test_config_errors_stop_start_up(tmp_path, topics: Topics, extra, needle) -> None:
    out = run_cli("--config", str(topics.config(tmp_path / "c.toml", **extra)))
    assert out.returncode != 0
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_port_in_use_names_the_port(tmp_path, topics: Topics) -> None:
    import socket

    topics.create(partitions=1)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run_cli("--config", str(topics.config(tmp_path / "c.toml")), "--metrics-port", str(port))
    assert out.returncode != 0
    assert "metrics_port" in out.stderr and str(port) in out.stderr and "Traceback" not in out.stderr


def test_topics_not_co_partitioned_are_refused(tmp_path, topics: Topics) -> None:
    topics.create(partitions=3, clicks=2)
    out = run_cli("--config", str(topics.config(tmp_path / "c.toml")))
    assert out.returncode != 0
    assert "co-partitioned" in out.stderr and topics.clicks in out.stderr and "Traceback" not in out.stderr


def test_missing_topic_is_refused(tmp_path, topics: Topics) -> None:
    out = run_cli("--config", str(topics.config(tmp_path / "c.toml")))
    assert out.returncode != 0
    assert "do not exist" in out.stderr and "Traceback" not in out.stderr


def test_a_group_member_that_assigns_another_way_is_refused(tmp_path, topics: Topics) -> None:
    """A consumer with kafka-python's range assignor (an older streameval, or another application
    with this group_id) holds the group: exit 2 naming the group, no traceback."""
    topics.create(partitions=1)
    member = KafkaConsumer(
        topics.impressions,
        bootstrap_servers=topics.bootstrap,
        group_id=topics.group,
        enable_auto_commit=False,
    )
    try:
        deadline = time.time() + 20
        while not member.assignment() and time.time() < deadline:
            member.poll(timeout_ms=200)
        out = run_cli("--config", str(topics.config(tmp_path / "c.toml")))
    finally:
        member.close()
    assert out.returncode == 2
    if topics.kafka_client == "kafka-python":
        assert f"consumer group {topics.group} has members that assign partitions another way" in out.stderr
    else:  # librdkafka under KIP-848 joins the classic group (mixed groups) and gets part of it
        assert f"a member of another application holds group {topics.group}" in out.stderr
    assert "Traceback" not in out.stderr
