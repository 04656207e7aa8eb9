"""`streameval run` on a backlog against the floor of a bare kafka-python consumer.

Produces a time-ordered log into fresh 3-partition topics on a running broker, then measures
(1) a bare KafkaConsumer in its own group reading every record (the floor) and (2) the daemon,
from start until /metrics counts every record, with checkpoints effectively off (an interval of
1 h), every 5 s (the default) and every 1 s: the cost of checkpointing. All include joining a
group.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import orjson
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_pipeline import make_lines  # noqa: E402


def consumed(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return -1
    for family in text_string_to_metric_families(text):
        if family.name == "streameval_records_consumed":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--port", type=int, default=9471)
    parser.add_argument("--daemon-log", default="/tmp/streameval-bench-daemon.log")
    args = parser.parse_args()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    imps, evs = f"{prefix}.impressions", f"{prefix}.events"
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    admin.create_topics(
        [NewTopic(t, num_partitions=3, replication_factor=1) for t in (imps, evs)], wait_for_metadata=True
    )
    lines = make_lines(args.queries)
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=20, batch_size=256_000)
    for is_imp, raw in lines:
        producer.send(imps if is_imp else evs, value=raw, key=orjson.loads(raw)["query_id"].encode())
    producer.flush()
    producer.close()
    n = len(lines)
    print(f"records: {n} ({args.queries} queries) in 2 topics x 3 partitions")

    start = time.perf_counter()
    consumer = KafkaConsumer(
        imps,
        evs,
        bootstrap_servers=args.bootstrap,
        group_id=f"{prefix}.floor",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=2000,
    )
    seen = 0
    while seen < n:
        for batch in consumer.poll(timeout_ms=500).values():
            seen += len(batch)
    t_floor = time.perf_counter() - start
    consumer.close()
    print(f"floor  bare consumer     {n / t_floor:10,.0f} rec/s  {t_floor:6.2f} s  1.00x", flush=True)

    for interval, label in (
        ("1h", "run, no checkpoint"),
        ("5s", "run, checkpoint 5 s"),
        ("1s", "run, checkpoint 1 s"),
    ):
        t_daemon = run_daemon(args, prefix, imps, evs, n, interval)
        print(f"{label:24} {n / t_daemon:10,.0f} rec/s  {t_daemon:6.2f} s  {t_daemon / t_floor:5.2f}x floor")
    admin.delete_topics([imps, evs, f"{prefix}.dlq"])
    admin.close()


def run_daemon(args: argparse.Namespace, prefix: str, imps: str, evs: str, n: int, interval: str) -> float:
    """Seconds from starting `streameval run` (its own group) until /metrics counts every record."""
    group = f"{prefix}.daemon-{interval}"
    start = time.perf_counter()
    daemon_log = open(args.daemon_log, "ab")  # noqa: SIM115 (closed with the daemon)
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streameval",
            "run",
            "--bootstrap-servers",
            args.bootstrap,
            "--group-id",
            group,
            "--impressions-topic",
            imps,
            "--events-topic",
            evs,
            "--dead-letter-topic",
            f"{prefix}.dlq",
            "--metrics-port",
            str(args.port),
            "--metrics-host",
            "127.0.0.1",
            "--commit-interval",
            interval,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=daemon_log,
    )
    try:
        while consumed(args.port) < n:
            if daemon.poll() is not None:
                raise SystemExit("the daemon exited; see " + args.daemon_log)
            time.sleep(0.05)
        return time.perf_counter() - start
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        daemon_log.close()


if __name__ == "__main__":
    main()
