"""``streameval simulate``: the simulator's records into JSONL files or Kafka topics."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from kafka.errors import KafkaError

from streameval.config import ConfigError, Settings, parse_duration
from streameval.errors import InputError
from streameval.kafka.clients import make_admin, make_plain_producer
from streameval.kafka.topics import ensure_topic
from streameval.simulate import Record, Regression, Simulator, topic_of

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 2.0


def duration_flag(flag: str, text: str) -> float:
    """A duration flag's value, or ConfigError naming the flag."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def parse_start(text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(f"--start: {text!r} is neither RFC 3339 nor epoch seconds") from None


@dataclass(frozen=True)
class SimulationOptions:
    """The simulation's own options (flags of ``simulate`` and ``demo``, not configuration keys)."""

    seed: int = 1
    rate: float = 100.0
    regress: tuple[str, ...] | None = None  # None: the command's default
    duration: str | None = None
    start: str | None = None
    no_late: bool = False
    out: str | None = None
    fast: bool = False
    partitions: int = 3
    speed: float = 60.0


def simulator_from(
    args: SimulationOptions,
    start: float,
    default_regress: str | None = None,
    click_delay: float = 20.0,
    purchase_delay: float = 120.0,
) -> Simulator:
    late_by = 0.0 if args.no_late else 600.0
    if args.rate <= 0:
        raise ConfigError(f"--rate: must be > 0, got {args.rate:g}")
    texts = args.regress if args.regress is not None else ([default_regress] if default_regress else [])
    regressions = [Regression.parse(text) for text in texts if text != "none"]
    return Simulator(
        seed=args.seed,
        start=start,
        rate=args.rate,
        regressions=regressions,
        click_delay=click_delay,
        purchase_delay=purchase_delay,
        late_by=late_by,
    )


def simulate(settings: Settings, args: SimulationOptions) -> int:
    duration = duration_flag("--duration", args.duration or "10m")
    now = float(int(time.time()))
    paced = args.out is None and not args.fast
    start = parse_start(args.start, now if paced or args.out is not None else now - duration)
    sim = simulator_from(args, start)
    records = sim.records(until=start + duration)
    if args.out is not None:
        written = _to_files(Path(args.out), records, settings)
    else:
        written = _to_kafka(settings, records, paced, args.partitions)
    sys.stderr.write(
        f"simulate: {written} records, {sim.queries} queries, event time "
        f"{_iso(start)} to {_iso(start + duration)}\n"
    )
    return 0


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class _Progress:
    def __init__(self) -> None:
        self.next = time.monotonic() + PROGRESS_EVERY_S
        self.count = 0

    def tick(self, record: Record) -> None:
        self.count += 1
        if self.count % 1000 == 0 and time.monotonic() >= self.next:
            self.next = time.monotonic() + PROGRESS_EVERY_S
            sys.stderr.write(f"simulate: {self.count} records, event time {_iso(record.ts)}\n")


def _to_files(directory: Path, records: object, settings: Settings) -> int:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out: cannot create {directory}: {exc.strerror}") from None
    names = {"impression": "impressions.jsonl", "click": "clicks.jsonl", "purchase": "purchases.jsonl"}
    files: dict[str, IO[bytes]] = {kind: (directory / name).open("wb") for kind, name in names.items()}
    progress = _Progress()
    try:
        for record in records:  # type: ignore[attr-defined]
            files[record.kind].write(record.value + b"\n")
            progress.tick(record)
    finally:
        for handle in files.values():
            handle.close()
    sys.stderr.write(f"simulate: wrote {', '.join(str(directory / n) for n in names.values())}\n")
    return progress.count


def _ensure_topics(settings: Settings, partitions: int) -> None:
    """Create the input topics that are missing, all with the same partition count."""
    admin = make_admin(settings)
    try:
        existing = set(admin.list_topics())
        missing = [t for t in (settings.impressions_topic, *settings.events_topics) if t not in existing]
        for topic in missing:
            ensure_topic(admin, topic, partitions)
        if missing:
            sys.stderr.write(f"simulate: created {', '.join(missing)} with {partitions} partitions\n")
    except KafkaError as exc:
        raise InputError(f"cannot list the topics on {settings.bootstrap_servers}: {exc}") from None
    finally:
        admin.close()


def _to_kafka(settings: Settings, records: object, paced: bool, partitions: int) -> int:
    _ensure_topics(settings, partitions)
    producer = make_plain_producer(settings, client_id="streameval-simulate", linger_ms=20)
    progress = _Progress()
    try:
        for record in records:  # type: ignore[attr-defined]
            if paced:
                wait = record.ts - time.time()
                if wait > 0:
                    producer.flush()
                    time.sleep(wait)
            producer.send(topic_of(settings, record.kind), key=record.key, value=record.value)
            progress.tick(record)
        producer.flush()
    except KeyboardInterrupt:
        producer.flush(timeout=5)
        sys.stderr.write(f"simulate: interrupted after {progress.count} records\n")
    except KafkaError as exc:
        raise InputError(
            f"producing to {settings.bootstrap_servers} failed after {progress.count} records: {exc}"
        ) from None
    finally:
        producer.close(timeout=5)
    return progress.count
