"""`streameval run` on logs in another shape, and the event-time guard, on the real broker."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from kafka import KafkaProducer

from streameval.config import load_settings
from streameval.replay import build_report, run_replay
from tests.integration.conftest import Daemon, Topics, value
from tests.integration.test_daemon import (
    DAEMON_CONFIG,
    T0,
    assert_metrics_equal_replay,
    flush_records,
    make_log,
    produce_flush,
    replay_report,
    settled_with_flush,
    ts_of,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEFINITIONS = 'windows = ["3650d"]\nhorizon = "30m"\nhorizons = { purchase = "24h" }\n'


def _mapping_text() -> str:
    """The [input.*] tables of the shipped foreign example's configuration."""
    text = (EXAMPLES / "foreign" / "streameval.toml").read_text()
    return text[text.index("[input.impressions]") :]


def _time_ordered(lines: list[bytes], path: str) -> list[bytes]:
    """The records with a time at ``path`` in time order; the others stay where they are."""

    def time_of(raw: bytes) -> float | None:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        ts = obj.get(path) if isinstance(obj, dict) else None
        return float(ts) if isinstance(ts, int | float) else None

    slots = [i for i, raw in enumerate(lines) if time_of(raw) is not None]
    ordered = sorted((lines[i] for i in slots), key=lambda raw: time_of(raw) or 0.0)
    out = list(lines)
    for slot, raw in zip(slots, ordered, strict=True):
        out[slot] = raw
    return out


def _key(raw: bytes, *paths: str) -> bytes:
    """The query id at the first of ``paths`` that the record has, as the producer's key."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return b"unparsable"
    for path in paths:
        value_ = obj
        for part in path.split("."):
            value_ = value_.get(part) if isinstance(value_, dict) else None
        if isinstance(value_, str):
            return value_.encode()
    return b"no-query-id"


def test_the_foreign_example_through_run_equals_replay_of_the_example(
    tmp_path, topics: Topics, daemons
) -> None:
    topics.create(partitions=3)
    foreign = EXAMPLES / "foreign"
    impressions = _time_ordered((foreign / "impressions.jsonl").read_bytes().splitlines(), "timestamp_ms")
    events = _time_ordered((foreign / "events.jsonl").read_bytes().splitlines(), "time_ms")
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, linger_ms=5)
    for raw in impressions:
        producer.send(topics.impressions, value=raw, key=_key(raw, "request.id"))
    for raw in events:  # every kind of event on one topic, as logged
        producer.send(topics.clicks, value=raw, key=_key(raw, "rid"))
    # one impression per partition ten days later: every query of the example settles at once
    # (rather than after its 24-hour horizon of wall time); the flush queries stay open
    for partition in range(topics.partitions):
        flush = {"request": {"id": f"flush-{partition}"}, "timestamp_ms": 1_768_089_600_000}
        flush |= {"results": [{"pos": 1, "sku": "x"}], "ranker": {"name": "flush"}}
        producer.send(topics.impressions, value=orjson.dumps(flush), key=b"flush", partition=partition)
    producer.flush()
    producer.close()
    config = topics.config(tmp_path / "foreign.toml")
    config.write_text(config.read_text() + DEFINITIONS + _mapping_text())
    daemon = Daemon(config)
    daemons.append(daemon)
    total = len(impressions) + len(events)
    metrics = daemon.wait_until(settled_with_flush(topics, total), what="everything settled")

    native = tmp_path / "native.toml"
    native.write_text(DEFINITIONS)
    report = build_report(
        run_replay(
            load_settings(str(native), {}, {}),
            str(EXAMPLES / "impressions.jsonl"),
            [str(EXAMPLES / "clicks.jsonl"), str(EXAMPLES / "purchases.jsonl")],
        )
    )
    assert_metrics_equal_replay(metrics, report)
    rejected: dict[str, float] = {}
    for labels, n in metrics["streameval_records_rejected_total"]:
        rejected[labels["reason"]] = rejected.get(labels["reason"], 0) + n
    assert rejected == report["inputs"]["rejected"]
    unattributed = {labels["reason"]: n for labels, n in metrics["streameval_events_unattributed_total"]}
    assert unattributed == report["inputs"]["unattributed"]
    assert value(metrics, "streameval_records_ignored_total", topic=topics.clicks, type="VIEW") == 66
    dead = topics.read_all(topics.dlq, sum(report["inputs"]["rejected"].values()))
    assert sorted(dict(m.headers)["reason"].decode() for m in dead) == sorted(
        reason for reason, n in report["inputs"]["rejected"].items() for _ in range(n)
    )
    assert daemon.stop(signal.SIGTERM) == 0

    # `streameval check` reads the same topics from their start, with the same configuration
    check = subprocess.run(
        [sys.executable, "-m", "streameval", "check", "--config", str(config), "--limit", "5000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 1, check.stderr  # the example's bad records
    assert (
        f"impressions (topic {topics.impressions}): {len(impressions) + topics.partitions} records read"
        in check.stdout
    )
    assert f"events (topic {topics.clicks}): {len(events)} records read" in check.stdout
    assert "ignored   66 (VIEW 66)" in check.stdout
    assert "e.g. partition " in check.stdout and "results is an empty list" in check.stdout
    assert f"events (topic {topics.purchases}): 0 records read" in check.stdout


def test_times_in_milliseconds_between_two_halves_are_rejected_and_the_rest_is_exact(
    tmp_path, topics: Topics, daemons
) -> None:
    impressions, events, log = make_log(7)
    topics.create(partitions=2)
    timed = sorted(t for t in map(ts_of, impressions + events) if t is not None)
    middle = timed[len(timed) // 2]

    def half(lines: list[bytes], first: bool) -> list[bytes]:
        # bad records (no time) go with the first half
        return [raw for raw in lines if ((ts_of(raw) or 0.0) < middle) == first]

    # records stamped in milliseconds by a misconfigured producer, between the two halves of
    # each topic: without the guard each moves its partition's watermark some 55,000 years
    # ahead, and every later record of the partition is late, for ever
    in_ms = [
        orjson.dumps(dict(imp, ts=round(imp["ts"] * 1000), query_id=f"ms-{i}"))
        for i, imp in enumerate(log.valid_impressions[:4])
    ] + [orjson.dumps(dict(ev, ts=round(ev["ts"] * 1000))) for ev in log.valid_events[-4:]]
    topics.produce(topics.impressions, half(impressions, True) + in_ms[:4] + half(impressions, False))
    topics.produce(topics.clicks, half(events, True) + in_ms[4:] + half(events, False))
    produce_flush(topics)
    config = topics.config(tmp_path / "c.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    total = len(impressions) + len(events) + len(in_ms)
    metrics = daemon.wait_until(settled_with_flush(topics, total), what="everything settled")

    assert value(metrics, "streameval_records_rejected_total", reason="ts_out_of_range") == len(in_ms)
    assert value(metrics, "streameval_impressions_late_total") == 0
    report = replay_report(tmp_path, config, impressions, events)  # the log without them
    assert_metrics_equal_replay(metrics, report)
    # replay rejects them too (against the moment it starts): the same numbers with them
    with_them = replay_report(tmp_path, config, impressions + in_ms[:4], events + in_ms[4:])
    assert with_them["groups"] == report["groups"]
    assert with_them["inputs"]["rejected"]["ts_out_of_range"] == len(in_ms)
    dead = topics.read_all(topics.dlq, sum(log.rejected.values()) + len(in_ms))
    out_of_range = [m for m in dead if dict(m.headers)["reason"] == b"ts_out_of_range"]
    assert sorted(m.value for m in out_of_range) == sorted(in_ms)
    assert daemon.stop(signal.SIGTERM) == 0


def test_times_from_the_kafka_record_with_at_timestamp(tmp_path, topics: Topics, daemons) -> None:
    """Records without a time field, stamped by their producer (ts = "@timestamp"), score as the
    same records with the time in a field do in replay."""
    impressions, events, log = make_log(11)
    topics.create(partitions=2)
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, linger_ms=5)
    sent = 0
    for topic, records in ((topics.impressions, log.valid_impressions), (topics.clicks, log.valid_events)):
        for record in sorted(records, key=lambda r: r["ts"]):
            stamp = round(record["ts"] * 1000)
            untimed = {k: v for k, v in record.items() if k != "ts"}
            producer.send(
                topic, value=orjson.dumps(untimed), key=record["query_id"].encode(), timestamp_ms=stamp
            )
            sent += 1
    # one impression per partition ten days on (stamped so, as the rest): everything settles
    for partition, raw in flush_records(topics.partitions, T0 + 10 * 86400):
        stamp = round((T0 + 10 * 86400) * 1000)
        producer.send(topics.impressions, value=raw, key=raw, partition=partition, timestamp_ms=stamp)
    producer.flush()
    producer.close()
    config = topics.config(tmp_path / "c.toml", **DAEMON_CONFIG)
    config.write_text(
        config.read_text() + '[input.impressions]\nts = "@timestamp"\n[input.events]\nts = "@timestamp"\n'
    )
    daemon = Daemon(config)
    daemons.append(daemon)
    metrics = daemon.wait_until(settled_with_flush(topics, sent), what="everything settled")
    # the same records, their times in milliseconds as the broker keeps them
    timed = [
        [orjson.dumps(dict(r, ts=round(r["ts"] * 1000) / 1000)) for r in records]
        for records in (log.valid_impressions, log.valid_events)
    ]
    native = tmp_path / "native.toml"
    native.write_text(config.read_text().split("[input.impressions]")[0])
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, native, timed[0], timed[1]))
    assert value(metrics, "streameval_records_rejected_total") == 0
    assert daemon.stop(signal.SIGTERM) == 0
