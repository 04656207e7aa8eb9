"""Fixtures for tests against the real broker that deploy/kafka/local.sh starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = os.environ.get("KAFKA_TEST_BOOTSTRAP", "127.0.0.1:9092")

pytestmark = pytest.mark.integration


def _reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def bootstrap() -> str:
    if not _reachable(BOOTSTRAP):
        message = f"no Kafka broker at {BOOTSTRAP}: start one with deploy/kafka/local.sh start"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return BOOTSTRAP


@pytest.fixture(scope="session")
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


class Topics:
    """Unique topic names for one test, created on demand."""

    def __init__(self, admin: KafkaAdminClient, bootstrap: str) -> None:
        self.admin = admin
        self.bootstrap = bootstrap
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.impressions = f"{self.prefix}.impressions"
        self.clicks = f"{self.prefix}.clicks"
        self.purchases = f"{self.prefix}.purchases"
        self.dlq = f"{self.prefix}.dlq"
        self.group = f"{self.prefix}.group"
        self.partitions = 0  # of the impressions topic, once created
        #: the daemons' kafka_client (the ``kafka_client`` fixture of a module running both);
        #: KAFKA_TEST_CLIENT=confluent-kafka runs every other test's daemons on confluent-kafka
        self.kafka_client = os.environ.get("KAFKA_TEST_CLIENT", "kafka-python")

    def create(self, partitions: int = 3, **counts: int) -> None:
        self.partitions = counts.get("impressions", partitions)
        names = {"impressions": self.impressions, "clicks": self.clicks, "purchases": self.purchases}
        topics = [
            NewTopic(name, num_partitions=counts.get(key, partitions), replication_factor=1)
            for key, name in names.items()
        ]
        # the session's admin client may still be reconnecting after a test restarted the broker
        deadline = time.monotonic() + 60
        while True:
            try:
                self.admin.create_topics(topics, wait_for_metadata=True)
                return
            except (NodeNotReadyError, KafkaConnectionError, KafkaTimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def config(self, path: Path, **extra: object) -> Path:
        values: dict[str, object] = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group,
            "impressions_topic": self.impressions,
            "events_topics": [self.clicks, self.purchases],
            "dead_letter_topic": self.dlq,
            "metrics_port": free_port(),
            "metrics_host": "127.0.0.1",
            "kafka_client": self.kafka_client,
            **extra,
        }
        path.write_text("".join(f"{k} = {orjson.dumps(v).decode()}\n" for k, v in values.items()))
        return path

    def produce(self, topic: str, records: list[bytes], delay: float = 0.0, per_batch: int = 50) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        try:
            for i, raw in enumerate(records):
                producer.send(topic, value=raw, key=key_of(raw))
                if delay and i % per_batch == per_batch - 1:
                    producer.flush()
                    time.sleep(delay)
            producer.flush()
        finally:
            producer.close()

    def read_all(self, topic: str, expected: int, timeout: float = 30.0) -> list:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            group_id=None,
            # the daemon writes the dead-letter topic in transactions: an aborted checkpoint's
            # records are in the log too, and read_committed leaves them out, as a user's should
            isolation_level="read_committed",
        )
        out: list = []
        deadline = time.time() + timeout
        try:
            while len(out) < expected and time.time() < deadline:
                for messages in consumer.poll(timeout_ms=500).values():
                    out.extend(messages)
        finally:
            consumer.close()
        return out


@pytest.fixture
def topics(admin: KafkaAdminClient, bootstrap: str) -> Topics:
    return Topics(admin, bootstrap)


def key_of(raw: bytes) -> bytes:
    """Records are keyed by query_id; a bad record by whatever it has, or a fixed key."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return b"unparsable"
    if isinstance(obj, dict) and isinstance(obj.get("query_id"), str):
        return obj["query_id"].encode()
    return b"no-query-id"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """`streameval run` in a subprocess, as an operator starts it."""

    def __init__(self, config: Path, *flags: str) -> None:
        text = config.read_text()
        self.port = int(
            next(line.split("=")[1] for line in text.splitlines() if line.startswith("metrics_port"))
        )
        self.log = config.with_suffix(f".{uuid.uuid4().hex[:6]}.log")
        self.handle = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streameval", "run", "--config", str(config), *flags],
            cwd=ROOT,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        _, text = self.get("/metrics")
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
        return out

    def wait_until(self, predicate, timeout: float = 90.0, what: str = "condition") -> dict:
        deadline = time.time() + timeout
        last: dict = {}
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.output()}")
            try:
                last = self.metrics()
            except OSError:
                time.sleep(0.3)
                continue
            if predicate(last):
                return last
            time.sleep(0.5)
        state = {
            name: value(last, name)
            for name in (
                "streameval_records_consumed_total",
                "streameval_open_queries",
                "streameval_orphans_held",
                "streameval_consumer_lag",
                "streameval_ready",
            )
        }
        raise AssertionError(
            f"timed out waiting for {what}; last {state}; daemon log:\n{self.output()[-3000:]}"
        )

    def stop(self, sig: int = 15, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.handle.close()
        return code

    def output(self) -> str:
        if not self.handle.closed:
            self.handle.flush()
        return self.log.read_text(errors="replace")


def value(metrics: dict, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for sample_labels, v in metrics.get(name, []) if labels.items() <= sample_labels.items())


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


#: the client libraries the daemon can run on (README, Configuration: kafka_client)
KAFKA_CLIENTS = ["kafka-python", "confluent-kafka"]


def with_both_clients(request: pytest.FixtureRequest, topics: Topics) -> str:
    """For an autouse fixture parametrized over KAFKA_CLIENTS: the daemons of the test run on
    that client library."""
    topics.kafka_client = request.param
    return request.param
