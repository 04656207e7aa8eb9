"""Figures 2 and 6, on a running broker: the daemon against a bare consumer, and freshness.

Both generate their traffic with ``streameval simulate`` into fresh topics (3 partitions) and
run ``streameval run`` as users do, reading its ``/metrics``.
"""

from __future__ import annotations

import bisect
import difflib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from benchmarks.steal import StealMeter

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass
class Topics:
    prefix: str
    bootstrap: str

    @property
    def impressions(self) -> str:
        return f"{self.prefix}.impressions"

    @property
    def events(self) -> str:
        return f"{self.prefix}.events"

    def delete(self) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            existing = set(admin.list_topics())
            admin.delete_topics([t for t in existing if t.startswith(self.prefix)])
        finally:
            admin.close()


def new_topics(bootstrap: str) -> Topics:
    return Topics(f"bench-{uuid.uuid4().hex[:8]}", bootstrap)


def simulate(topics: Topics, rate: int, duration: str, fast: bool, log) -> subprocess.Popen:
    """``streameval simulate`` into the topics (created with 3 partitions)."""
    cmd = [PY, "-m", "streameval", "simulate", "--bootstrap-servers", topics.bootstrap]
    cmd += ["--impressions-topic", topics.impressions, "--events-topic", topics.events]
    cmd += ["--partitions", "3", "--rate", str(rate), "--duration", duration, "--seed", "5", "--no-late"]
    if fast:
        cmd.append("--fast")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)


def record_count(topics: Topics) -> int:
    consumer = KafkaConsumer(bootstrap_servers=topics.bootstrap)
    try:
        parts = [
            TopicPartition(t, p)
            for t in (topics.impressions, topics.events)
            for p in consumer.partitions_for_topic(t) or ()
        ]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


#: how often figure 2 reads /metrics: deploy/prometheus/prometheus.yml's scrape_interval
SCRAPE_INTERVAL_S = 15.0


def scrape(port: int, path: str = "/metrics") -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def progress(port: int) -> float:
    """The records consumed as ``/healthz`` says (the view ``/metrics`` also reads, without building
    every family), -1 when it does not answer."""
    text = scrape(port, "/healthz")
    for line in (text or "").splitlines():
        if line.startswith("records consumed: "):
            return float(line.rsplit(" ", 1)[1])
    return -1


def consumed(port: int) -> float:
    """streameval_records_consumed_total summed over topics, -1 when /metrics does not answer."""
    text = scrape(port)
    if text is None:
        return -1
    total = 0.0
    for line in text.splitlines():
        if line.startswith("streameval_records_consumed_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


#: the /metrics families that depend on the input alone (not on time or on checkpoints): equal
#: for two daemons that processed the same backlog. Not the orphans held or the unattributed
#: events: once a partition is caught up its watermark advances with the wall clock, and orphans
#: expire a few seconds earlier or later (open queries would too, after the 30 min horizon)
INPUT_FAMILIES = (
    "streameval_provisional_",
    "streameval_records_consumed_total",
    "streameval_records_rejected_total",
    "streameval_duplicates_total",
    "streameval_events_attributed_total",
    "streameval_open_queries",
    "streameval_groups_folded_total",
    "streameval_impressions_late_total",
)


def input_metrics(port: int) -> list[str]:
    """The lines of /metrics of the input-determined families (see INPUT_FAMILIES)."""
    text = scrape(port) or ""
    return [line for line in text.splitlines() if line.startswith(INPUT_FAMILIES)]


class Daemon:
    """``streameval run`` on the topics, in a group of its own, started in ``cwd`` (a directory
    with the compiled install, from ``compiled.build``, runs that)."""

    def __init__(
        self,
        topics: Topics,
        port: int,
        commit_interval: str,
        log,
        cwd: Path = ROOT,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.port = port
        cmd = [PY, "-m", "streameval", "run", "--bootstrap-servers", topics.bootstrap]
        cmd += ["--group-id", f"{topics.prefix}.run-{uuid.uuid4().hex[:6]}"]
        cmd += ["--impressions-topic", topics.impressions, "--events-topic", topics.events]
        cmd += ["--dead-letter-topic", f"{topics.prefix}.dlq", "--metrics-host", "127.0.0.1"]
        cmd += ["--metrics-port", str(port), "--commit-interval", commit_interval, *flags]
        self.started = time.perf_counter()
        self.process = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=log)

    def wait_consumed(self, n: int, timeout: float = 600.0) -> float:
        """Seconds from the start until the daemon counts ``n`` records: ``/healthz`` asked every
        20 ms, while ``/metrics`` is scraped every SCRAPE_INTERVAL_S as Prometheus would."""
        deadline = time.monotonic() + timeout
        next_scrape = time.monotonic() + SCRAPE_INTERVAL_S
        while progress(self.port) < n:
            if self.process.poll() is not None:
                raise RuntimeError(f"streameval run exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"streameval run did not count {n} records in {timeout:.0f} s")
            if time.monotonic() >= next_scrape:
                scrape(self.port)
                next_scrape += SCRAPE_INTERVAL_S
            time.sleep(0.02)
        return time.perf_counter() - self.started

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("streameval run did not become ready") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def bare_consumer(topics: Topics, n: int, log, client: str = "kafka-python") -> float:
    start = time.perf_counter()
    cmd = [PY, str(ROOT / "benchmarks" / "bare_consumer.py"), "--bootstrap-servers", topics.bootstrap]
    cmd += ["--group", f"{topics.prefix}.floor-{uuid.uuid4().hex[:6]}", "--client", client]
    cmd += ["--topic", topics.impressions, "--topic", topics.events, "--expect", str(n)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=log, timeout=600)
    return time.perf_counter() - start


def pipeline_alone(topics: Topics, n: int, log) -> float:
    """Row 2p: seconds the daemon's pipeline takes on the backlog fed from memory
    (``pipeline_alone.py``)."""
    cmd = [PY, str(ROOT / "benchmarks" / "pipeline_alone.py"), "--bootstrap-servers", topics.bootstrap]
    cmd += ["--impressions-topic", topics.impressions, "--events-topic", topics.events, "--expect", str(n)]
    done = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, stderr=log, timeout=600)
    return float(done.stdout)


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def quix_job(topics: Topics, n: int, log) -> tuple[float, str]:
    """Figure 7's peer (``quix_job.py``) on the backlog, in a group and a state directory of its
    own: seconds from its start until it exits having processed ``n`` records, and what it
    printed (its MAP@10 per model)."""
    with tempfile.TemporaryDirectory(prefix="streameval-quix-") as state_dir:
        start = time.perf_counter()
        cmd = [PY, str(ROOT / "benchmarks" / "quix_job.py"), "--bootstrap-servers", topics.bootstrap]
        cmd += ["--group", f"{topics.prefix}.quix-{uuid.uuid4().hex[:6]}", "--state-dir", state_dir]
        cmd += ["--impressions-topic", topics.impressions, "--events-topic", topics.events]
        cmd += ["--expect", str(n)]
        done = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=900)
        log.write(done.stderr.encode())
        return time.perf_counter() - start, done.stdout


def figure_2(
    bootstrap: str, duration_s: int, port: int, log, say, compiled: Path | None = None, rounds: int = 2
) -> dict:
    """The daemon end to end on a backlog, against the bare consumer (best of ``rounds`` each); also
    the compiled install's daemon (``compiled``: a directory from ``compiled.build``), whose
    input-determined metrics must equal the interpreted one's."""
    topics = new_topics(bootstrap)
    try:
        say(f"figure 2: producing a backlog with streameval simulate --fast ({duration_s} s of traffic)")
        if simulate(topics, 1000, f"{duration_s}s", fast=True, log=log).wait() != 0:
            raise RuntimeError("streameval simulate failed")
        n = record_count(topics)
        say(f"figure 2: {n:,} records in 2 topics x 3 partitions")
        floor: list[float] = []
        run: list[float] = []
        fast: list[float] = []
        seen: list[list[str]] = []

        def daemon_run(
            times: list[float], commit_interval: str = "5s", cwd: Path = ROOT, flags: tuple[str, ...] = ()
        ) -> None:
            daemon = Daemon(topics, port, commit_interval, log, cwd=cwd, flags=flags)
            try:
                times.append(daemon.wait_consumed(n))
                seen.append(input_metrics(port))
            finally:
                daemon.stop()

        # row 2c and figure 7 when their libraries are installed (the bench extras)
        librdkafka: list[float] = []
        on_librdkafka: list[float] = []
        fast_librdkafka: list[float] = []  # the compiled install on confluent-kafka
        quix: list[float] = []
        quix_out: list[str] = []
        alone: list[float] = []  # row 2p
        # without checkpoints: the longest interval a default broker's transactions allow (README,
        # Guarantees), so no periodic checkpoint within the backlog's run
        plain: list[float] = []
        stolen: list[float | None] = []  # the share of CPU time the hypervisor took, per round
        for attempt in range(rounds):
            meter = StealMeter()
            floor.append(bare_consumer(topics, n, log))
            daemon_run(run)
            line = f"figure 2: round {attempt + 1}: bare consumer {floor[-1]:.2f} s, "
            line += f"streameval run {run[-1]:.2f} s"
            if compiled is not None:
                daemon_run(fast, cwd=compiled)
                line += f", compiled {fast[-1]:.2f} s"
            if have("confluent_kafka"):
                librdkafka.append(bare_consumer(topics, n, log, "confluent-kafka"))
                line += f", bare confluent-kafka consumer {librdkafka[-1]:.2f} s"
                daemon_run(on_librdkafka, flags=("--kafka-client", "confluent-kafka"))
                line += f", streameval run on confluent-kafka {on_librdkafka[-1]:.2f} s"
                if compiled is not None:
                    daemon_run(fast_librdkafka, cwd=compiled, flags=("--kafka-client", "confluent-kafka"))
                    line += f", compiled {fast_librdkafka[-1]:.2f} s"
            if have("quixstreams"):
                elapsed, printed = quix_job(topics, n, log)
                quix.append(elapsed)
                quix_out.append(printed)
                line += f", figure 7: the Quix Streams job {quix[-1]:.2f} s"
            alone.append(pipeline_alone(topics, n, log))
            daemon_run(plain, "7m")
            line += f", the pipeline alone {alone[-1]:.2f} s, run without checkpoints {plain[-1]:.2f} s"
            stolen.append(meter.percent())
            if stolen[-1] is not None:
                line += f"; the hypervisor took {stolen[-1]:.1f}% of the CPU time"
            say(line)
        # figure 2r: the events topic re-keyed by the daemon's repartition stage (README,
        # Repartitioning): one more write and read of every event
        rekeyed: list[float] = []
        daemon_run(rekeyed, flags=("--repartition", topics.events))
        say(f"figure 2: events repartitioned {rekeyed[-1]:.2f} s")
        differ = [(i, lines) for i, lines in enumerate(seen[1:], start=2) if lines != seen[0]]
        for i, lines in differ:  # into the log: which metrics, to see why
            diff = difflib.unified_diff(seen[0], lines, "run 1", f"run {i}", lineterm="")
            log.write(("\n".join(diff) + "\n").encode())
        result = {
            "records": n,
            "bare_consumer_s": min(floor),
            "run_s": min(run),
            "run_without_checkpoints_s": min(plain),
            "ratio": min(floor) / min(run),
            "ratio_without_checkpoints": min(floor) / min(plain),
            "pipeline_alone_s": min(alone),
            "pipeline_alone_ratio": min(floor) / min(alone),
            "run_repartitioned_s": min(rekeyed),
            "ratio_repartitioned": min(floor) / min(rekeyed),
            "runs_s": {
                "bare_consumer": floor,
                "run": run,
                "compiled": fast,
                "without_checkpoints": plain,
                "pipeline_alone": alone,
                "repartitioned": rekeyed,
                "run_confluent": on_librdkafka,
                "compiled_confluent": fast_librdkafka,
            },
            # every run, compiled or not, with or without checkpoints, counted the same
            "same_metrics": not differ and bool(seen[0]),
            "steal_percent_by_round": stolen,
        }
        if fast:
            result["compiled_run_s"] = min(fast)
            result["compiled_ratio"] = min(floor) / min(fast)
        result.update(librdkafka_results(min(floor), librdkafka, on_librdkafka, fast_librdkafka))
        result["peer"] = peer_result(n, min(run), on_librdkafka, quix, quix_out)
        return result
    finally:
        topics.delete()


def librdkafka_results(
    floor: float, bare: list[float], run: list[float], compiled: list[float]
) -> dict[str, float]:
    """Rows 2c, 2k and 2k' of figure 2 (the bare kafka-python consumer's best is ``floor``)."""
    result: dict[str, float] = {}
    if bare:
        result["bare_confluent_s"] = min(bare)
        result["confluent_floor_ratio"] = floor / min(bare)
        result["run_confluent_s"] = min(run)
        result["ratio_confluent"] = floor / min(run)
    if compiled:
        result["compiled_run_confluent_s"] = min(compiled)
        result["compiled_ratio_confluent"] = floor / min(compiled)
    return result


def peer_result(
    n: int, run: float, on_librdkafka: list[float], quix: list[float], quix_out: list[str]
) -> dict:
    """Figure 7: the Quix Streams job's best against ``run`` (and the run on librdkafka)."""
    if not quix:
        return {"skipped": 'quixstreams is not installed: pip install -e ".[bench]"'}
    peer = {
        "records": n,
        "quix_s": min(quix),
        "run_s": run,
        "speedup": min(quix) / run,
        "runs_s": quix,
        # the job's MAP@10 per model, equal in every run (its exactly-once state)
        "same_output": len(set(quix_out)) == 1 and bool(quix_out[0].strip()),
        "output": quix_out[0],
    }
    if on_librdkafka:  # streameval on the client Quix Streams runs on (librdkafka)
        peer["run_confluent_s"] = min(on_librdkafka)
        peer["speedup_confluent"] = min(quix) / min(on_librdkafka)
    return peer


def figure_6(bootstrap: str, files: Path, rate: int, duration_s: int, port: int, log, say) -> dict:
    """Freshness at a steady rate: from a record's produce time to /metrics counting it."""
    topics = new_topics(bootstrap)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [NewTopic(t, num_partitions=3, replication_factor=1) for t in (topics.impressions, topics.events)]
        )
    finally:
        admin.close()
    daemon = Daemon(topics, port, "5s", log)
    try:
        daemon.wait_ready()
        scrapes: list[tuple[float, float]] = []
        stop = threading.Event()

        def scraper() -> None:
            while not stop.is_set():
                count = consumed(port)
                if count >= 0:
                    scrapes.append((time.time(), count))
                time.sleep(0.02)

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        say(f"figure 6: producing {rate:,} records/s for {duration_s} s while the daemon runs")
        cmd = [PY, str(ROOT / "benchmarks" / "paced_producer.py"), "--bootstrap-servers", bootstrap]
        cmd += ["--impressions-topic", topics.impressions, "--events-topic", topics.events]
        cmd += ["--rate", str(rate), "--count", str(rate * duration_s), str(files)]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=log)
        n = record_count(topics)
        daemon.wait_consumed(n, timeout=120)
        time.sleep(0.2)
        stop.set()
        thread.join()
    finally:
        daemon.stop()
    # each record's produce time (its CreateTime, set by the producer on send), earliest first
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    parts = [
        TopicPartition(t, p)
        for t in (topics.impressions, topics.events)
        for p in consumer.partitions_for_topic(t) or ()
    ]
    consumer.assign(parts)
    produced: list[float] = []
    while len(produced) < n:
        for messages in consumer.poll(timeout_ms=500).values():
            produced += [m.timestamp / 1000 for m in messages]
    consumer.close()
    topics.delete()
    produced.sort()
    times = [t for t, _ in scrapes]
    counts = [c for _, c in scrapes]
    delays = []
    for j, t_produced in enumerate(produced, start=1):
        # the first scrape that counts j records: the j-th record produced is counted by then
        # (records are counted roughly in produce order; across partitions this is an estimate)
        i = bisect.bisect_left(counts, j)
        if i < len(times):
            delays.append(max(0.0, times[i] - t_produced))
    delays.sort()
    return {
        "records": len(produced),
        "achieved_rate": len(produced) / max(produced[-1] - produced[0], 1e-9),
        "target_rate": rate,
        "p50_s": statistics.median(delays),
        "p99_s": delays[int(0.99 * (len(delays) - 1))],
        "max_s": delays[-1],
    }
