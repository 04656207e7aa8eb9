"""``streameval check``: what the configuration makes of the first records of each input.

Per input (the impressions, each events file or topic): records read, accepted, rejected by
reason with one example each, ignored (``ignore_types``), the labels or event types found with
their counts, the range of event times and the unit their numbers look like, and one accepted
record as streameval sees it (README, Inputs). Pure: the records come from files here or from
Kafka (``streameval.kafka.sample``).
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from streameval.config import Settings
from streameval.decoding import Decoder
from streameval.errors import ConfigError, InputError
from streameval.mapping import TS_UNITS, Path, PathError, lookup
from streameval.records import Ignored, Rejection

DEFAULT_LIMIT = 1000
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


@dataclass
class Sample:
    """One record to check: its bytes, where it is (for the examples), its Kafka timestamp."""

    raw: bytes
    where: str
    kafka_ts: float | None = None
    partition: int | None = None  # of a Kafka record


@dataclass
class InputReport:
    """What the configuration made of one input's first records."""

    kind: str  # "impressions" or "events"
    source: str
    read: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # reason -> where: detail
    ignored: Counter[str] = field(default_factory=Counter)
    #: impressions: per group_by label its values; events: {"type": the types}
    values: dict[str, Counter[str]] = field(default_factory=dict)
    first_ts: float | None = None
    last_ts: float | None = None
    numbers: list[float] = field(default_factory=list)  # the raw numeric times (for the unit)
    strings: int = 0  # raw times that are strings
    mapped: dict[str, Any] | None = None  # the first accepted record, in streameval's shape
    configured_unit: str = "s"
    #: accepted Kafka records not in the partition the default partitioner gives their query
    misrouted: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.kind,
            "source": self.source,
            "read": self.read,
            "accepted": self.accepted,
            "rejected": dict(sorted(self.rejected.items())),
            "examples": dict(sorted(self.examples.items())),
            "ignored": dict(sorted(self.ignored.items())),
            "values": {k: dict(v.most_common()) for k, v in self.values.items()},
            "time": None if self.first_ts is None else [_iso(self.first_ts), _iso(self.last_ts)],
            "unit": self.unit_text(),
            "mapped": self.mapped,
            "misrouted": self.misrouted,
        }

    def unit_text(self) -> str:
        """What the times look like, and whether ``ts_unit`` agrees."""
        if not self.numbers:
            return "RFC 3339 strings" if self.strings else "no times read"
        median = sorted(abs(n) for n in self.numbers)[len(self.numbers) // 2]
        unit = guess_unit(median)
        text = f"numbers of about {median:.3g}, which look like {_UNIT_NAMES[unit]}"
        if unit == self.configured_unit:
            return f"{text} (ts_unit = {unit!r})"
        configured = self.configured_unit
        return f"{text}, but ts_unit is {configured!r}: set ts_unit = {unit!r} in [input.{self.kind}]"


def guess_unit(value: float) -> str:
    """The unit a Unix time of this size has, for times between 1973 and 5138."""
    if value < 1e11:
        return "s"
    if value < 1e14:
        return "ms"
    if value < 1e17:
        return "us"
    return "ns"


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return f"{seconds:.6g}"


def check_input(
    settings: Settings,
    kind: str,
    source: str,
    topic: str,
    samples: Iterable[Sample],
    decoder: Decoder,
    placement: Callable[[str], int] | None = None,
) -> InputReport:
    """Decode ``samples`` as the daemon would and count what became of them; with
    ``placement`` (query id -> the partition the default partitioner gives it), also the
    records of another partition."""
    mapping = settings.input.impressions if kind == "impressions" else settings.input.events
    ts_path = Path("ts", ("ts",)) if mapping is None else mapping.ts
    unit = 1 if mapping is None else mapping.ts_unit
    report = InputReport(kind, source, configured_unit=next(k for k, v in TS_UNITS.items() if v == unit))
    if kind == "impressions":
        report.values = {name: Counter() for name in settings.group_by}
    else:
        report.values = {"type": Counter()}
    if placement is not None:
        report.misrouted = 0
    for sample in samples:
        report.read += 1
        _note_raw_ts(report, sample.raw, ts_path)  # of every record: a wrong unit rejects them all
        if kind == "impressions":
            fields: Any = decoder.impression(sample.raw, sample.kafka_ts)
        else:
            fields = decoder.event(sample.raw, topic, sample.kafka_ts)
        if type(fields) is Rejection:
            report.rejected[fields.reason] += 1
            report.examples.setdefault(fields.reason, f"{sample.where}: {fields.detail}")
            continue
        if type(fields) is Ignored:
            report.ignored[fields.type] += 1
            continue
        report.accepted += 1
        if (
            placement is not None
            and sample.partition is not None
            and placement(fields[0]) != sample.partition
        ):
            report.misrouted += 1  # type: ignore[operator]
        _note_accepted(report, settings.group_by, kind, fields)
    return report


def _note_accepted(report: InputReport, group_by: tuple[str, ...], kind: str, fields: Any) -> None:
    """An accepted record's time, labels or type, and the first one as streameval sees it."""
    ts = fields[1] if kind == "impressions" else fields[3]
    report.first_ts = ts if report.first_ts is None else min(report.first_ts, ts)
    report.last_ts = ts if report.last_ts is None else max(report.last_ts, ts)
    if kind == "impressions":
        query_id, _, items, group = fields
        for name, label in zip(group_by, group, strict=True):
            report.values[name][label] += 1
        if report.mapped is None:
            labels = dict(zip(group_by, group, strict=True))
            report.mapped = {"query_id": query_id, "ts": ts, "items": list(items), **labels}
    else:
        query_id, item, event_type, _, event_id = fields
        report.values["type"][event_type] += 1
        if report.mapped is None:
            report.mapped = {"query_id": query_id, "item": item, "type": event_type, "ts": ts}
            if event_id is not None:
                report.mapped["event_id"] = event_id


def _note_raw_ts(report: InputReport, raw: bytes, path: Path | None) -> None:
    if path is None:  # the Kafka record's timestamp
        return
    try:
        value = lookup(orjson.loads(raw), path)
    except (orjson.JSONDecodeError, PathError):
        return
    if isinstance(value, str):
        report.strings += 1
    elif isinstance(value, int | float) and not isinstance(value, bool):
        report.numbers.append(float(value))


def file_samples(path: str, limit: int) -> Iterator[Sample]:
    """The first ``limit`` records (non-blank lines) of a JSONL file."""
    try:
        with open(path, "rb") as handle:
            n = 0
            for line_number, line in enumerate(handle, start=1):
                if line.isspace():
                    continue
                if n >= limit:
                    return
                n += 1
                yield Sample(line.rstrip(b"\r\n"), f"line {line_number}")
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None


def format_report(reports: list[InputReport]) -> str:
    """The reports as text, one block per input."""
    lines: list[str] = []
    for r in reports:
        lines.append(f"{r.kind} ({r.source}): {r.read} records read")
        lines.append(f"  accepted  {r.accepted}")
        lines.append(f"  rejected  {sum(r.rejected.values())}")
        for reason, count in sorted(r.rejected.items()):
            lines.append(f"    {reason:<18} {count:>6}  e.g. {r.examples[reason]}")
        ignored = ", ".join(f"{t} {n}" for t, n in sorted(r.ignored.items()))
        lines.append(f"  ignored   {sum(r.ignored.values())}" + (f" ({ignored})" if ignored else ""))
        for name, values in r.values.items():
            shown = ", ".join(f"{v} ({n})" for v, n in values.most_common(10))
            more = f", and {len(values) - 10} more" if len(values) > 10 else ""
            lines.append(f"  {name:<9} {shown or '-'}{more}")
        if r.first_ts is not None:
            lines.append(f"  time      {_iso(r.first_ts)} .. {_iso(r.last_ts)}")
        lines.append(f"  ts        {r.unit_text()}")
        mapped = "-" if r.mapped is None else orjson.dumps(r.mapped).decode()
        lines.append(f"  mapped    {mapped}")
        if r.misrouted:
            lines.append(
                f"  misrouted {r.misrouted} of {r.accepted} accepted: not in the partition murmur2 of their "
                "query_id gives (the producer places keys another way, e.g. librdkafka's CRC32, or keys "
                "by something else): fix its partitioner or key, or name the topic in repartition"
            )
        lines.append("")
    rejected = sum(sum(r.rejected.values()) for r in reports)
    lines.append(f"{rejected} records rejected: see the examples above" if rejected else "nothing rejected")
    return "\n".join(lines)


def check_files(
    settings: Settings, impressions: str | None, events: list[str], limit: int
) -> list[InputReport]:
    """The reports on the first ``limit`` records of these files (an events file's topic: its
    name without the extension)."""
    if settings.input.uses_kafka_timestamp:
        raise ConfigError(
            'input: ts = "@timestamp" takes the time of the Kafka record, which a file does not have; '
            "check the topics instead (leave out --impressions and --events)"
        )
    decoder = Decoder(settings)
    reports = []
    if impressions is not None:
        samples = file_samples(impressions, limit)
        reports.append(
            check_input(settings, "impressions", impressions, settings.impressions_topic, samples, decoder)
        )
    for path in events:
        topic = pathlib.Path(path).stem
        reports.append(check_input(settings, "events", path, topic, file_samples(path, limit), decoder))
    return reports


def check_topics(settings: Settings, limit: int) -> list[InputReport]:
    """The reports on the first ``limit`` records of each input topic, from its earliest offsets."""
    from streameval.kafka.placement import Placement
    from streameval.kafka.sample import partition_count, topic_samples

    decoder = Decoder(settings)
    reports = []
    inputs = [("impressions", settings.impressions_topic)]
    inputs += [("events", topic) for topic in settings.events_topics]
    for kind, topic in inputs:
        samples = topic_samples(settings, topic, limit)
        # a repartitioned topic may be keyed by anything: the daemon re-keys it
        placement = (
            None if topic in settings.repartition else Placement(max(1, partition_count(settings, topic)))
        )
        where = placement.partition_of if placement is not None else None
        reports.append(check_input(settings, kind, f"topic {topic}", topic, samples, decoder, where))
    return reports
