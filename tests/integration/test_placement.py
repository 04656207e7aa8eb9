"""Records placed by another partitioner than murmur2 are counted as misrouted and named."""

from __future__ import annotations

import subprocess
import sys
import zlib

import orjson
import pytest
from kafka import KafkaProducer

from streameval.kafka.placement import Placement
from tests.integration.conftest import ROOT, Daemon, Topics, key_of, value
from tests.integration.test_daemon import DAEMON_CONFIG, make_log

pytestmark = pytest.mark.integration


def test_events_placed_by_crc32_are_counted_misrouted_and_named(tmp_path, topics: Topics, daemons) -> None:
    impressions, events, _ = make_log(5)
    topics.create(partitions=3)
    topics.produce(topics.impressions, impressions)  # kafka-python's default: murmur2
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, linger_ms=5)
    expected = 0
    murmur = Placement(3)
    for raw in events:  # as librdkafka's default (consistent_random) places keyed records: CRC32
        key = key_of(raw)
        partition = zlib.crc32(key) % 3
        producer.send(topics.clicks, value=raw, key=key, partition=partition)
        obj = orjson.loads(raw) if raw.startswith(b"{") else None
        if isinstance(obj, dict) and isinstance(obj.get("query_id"), str) and "ts" in obj and "item" in obj:
            expected += murmur.partition_of(obj["query_id"]) != partition
    producer.flush()
    producer.close()
    config = topics.config(tmp_path / "c.toml", **DAEMON_CONFIG)
    daemon = Daemon(config)
    daemons.append(daemon)
    metrics = daemon.wait_until(
        lambda m: value(m, "streameval_records_consumed_total") == len(impressions) + len(events),
        what="everything consumed",
    )
    misrouted = value(metrics, "streameval_records_misrouted_total", topic=topics.clicks)
    assert misrouted > len(events) / 3  # about two thirds land elsewhere with 3 partitions
    assert abs(misrouted - expected) <= 8  # the few bad records of the log are not counted
    assert value(metrics, "streameval_records_misrouted_total", topic=topics.impressions) == 0
    status, body = daemon.get("/healthz")
    assert status == 200 and "misrouted records" in body and topics.clicks in body
    output = daemon.output()
    assert "misrouted records" in output and topics.clicks in output and "CRC32" in output
    assert "placed differently" in output  # the impressions are not: the join breaks
    daemon.stop()

    # `streameval check` on the topics names them too
    check = subprocess.run(
        [sys.executable, "-m", "streameval", "check", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    blocks = check.stdout.split("\n\n")
    [clicks] = [b for b in blocks if b.startswith(f"events (topic {topics.clicks})")]
    [imps] = [b for b in blocks if b.startswith(f"impressions (topic {topics.impressions})")]
    assert "misrouted" in clicks and "CRC32" in clicks
    assert "misrouted" not in imps
