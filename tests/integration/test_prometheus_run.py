"""End to end with a real Prometheus: `streameval simulate` into the local broker with a
regression, `streameval run` on it, Prometheus (Debian's) scraping the daemon with the shipped
rules (`for:` shortened in a copy): the MAP recording rule equals `streameval replay` on the same
records, the variant-below-control alert fires for the regressed model, and every expression of
the Grafana dashboard is accepted and returns data."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.integration.conftest import ROOT, Daemon, Topics, free_port
from tests.integration.test_daemon import flush_records, replay_report, settled
from tests.integration.test_simulate_kafka import simulate
from tests.promtool import Prometheus

pytestmark = pytest.mark.integration


def _rules_for_test(tmp_path: Path) -> list[str]:
    """The shipped rules, with every `for:` set to 0s so that alerts fire within the test."""
    out = []
    for path in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml")):
        copy = tmp_path / path.name
        copy.write_text(re.sub(r"for: \S+", "for: 0s", path.read_text()))
        out.append(str(copy))
    return out


def test_prometheus_on_run_equals_replay_and_the_regression_alert_fires(
    tmp_path, topics: Topics, daemons
) -> None:
    # 20 minutes of traffic that ended 10 minutes ago, then one impression per partition 6
    # minutes after its end: the watermark jumps past the 5-minute horizon, every query of the
    # traffic settles at once, and all of them are in the 1h window
    began = time.time() - 30 * 60
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began))
    run = ["--start", start, "--regress", "candidate-a:0.6@0m", "--impressions-topic", topics.impressions]
    run += ["--events-topic", topics.clicks, "--events-topic", topics.purchases]
    simulate(*run, "--fast", "--partitions", "2", "--bootstrap-servers", topics.bootstrap)
    simulate(*run, "--out", str(tmp_path / "sim"))
    impressions = (tmp_path / "sim" / "impressions.jsonl").read_bytes().splitlines()
    events = [
        line
        for name in ("clicks", "purchases")
        for line in (tmp_path / "sim" / f"{name}.jsonl").read_bytes().splitlines()
    ]
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap)
    flush = flush_records(2, began + 26 * 60)
    for partition, raw in flush:
        producer.send(topics.impressions, value=raw, key=raw, partition=partition)
    producer.flush()
    producer.close()
    config = topics.config(tmp_path / "c.toml", windows=["1h"], horizon="5m", orphan_ttl="5m")
    daemon = Daemon(config)
    daemons.append(daemon)
    total = len(impressions) + len(events) + len(flush)
    daemon.wait_until(settled(total, still_open=len(flush)), timeout=180, what="all settled")
    report = replay_report(tmp_path, config, impressions, events)

    prometheus = Prometheus(tmp_path, daemon.port, _rules_for_test(tmp_path), free_port())
    try:
        deadline = time.monotonic() + 90
        firing: list = []
        while time.monotonic() < deadline and not firing:
            time.sleep(1)
            try:
                firing = prometheus.query(
                    'ALERTS{alertname="StreamevalVariantBelowControl",alertstate="firing",model="candidate-a"}',
                )
            except OSError:
                continue
        assert {s["metric"]["surface"] for s in firing} == {"home", "search"}, prometheus.query("ALERTS")
        means = {
            (s["metric"]["model"], s["metric"]["surface"]): float(s["value"][1])
            for s in prometheus.query('window_group:streameval_metric:mean{metric="map",window="1h"}')
        }
        expected = {(g["labels"]["model"], g["labels"]["surface"]): g["map@10"] for g in report["groups"]}
        assert means.keys() == {k for k, v in expected.items() if v is not None}
        for key, got in means.items():
            assert got == pytest.approx(expected[key], abs=1e-9), key
        # a trickle of records now, so that the rate() panels have something to show: a record
        # that is not JSON (rejected) and a click long after its query settled (late) a second
        qid = json.loads(impressions[0])["query_id"]
        producer = KafkaProducer(bootstrap_servers=topics.bootstrap)
        for _ in range(8):
            producer.send(topics.impressions, value=b"{not json", key=qid.encode())
            late = {"query_id": qid, "item": "i0001", "type": "click", "ts": began}
            producer.send(topics.clicks, value=json.dumps(late).encode(), key=qid.encode())
            producer.flush()
            time.sleep(1)
        # and a click for an open (flush) query, so that a provisional value exists
        click = {"query_id": "flush-0", "item": "x", "type": "click", "ts": began + 26 * 60 + 1}
        producer.send(topics.clicks, value=json.dumps(click).encode(), key=b"flush-0", partition=0)
        producer.flush()
        producer.close()
        time.sleep(3)
        dashboard = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "streameval.json").read_text())
        for target in (t for p in dashboard["panels"] for t in p.get("targets", [])):
            expr = target["expr"]
            for variable, value in (("$window", "1h"), ("$k", "10"), ("$model", ".*"), ("$surface", ".*")):
                expr = expr.replace(variable, value)
            assert prometheus.query(expr), f"no data for {expr}"
    finally:
        prometheus.stop()
    assert daemon.stop(signal.SIGTERM) == 0
