"""One decoder for every command: a record in streameval's shape (the fast path of
:mod:`streameval.records`) or in a mapped one (:mod:`streameval.mapping`), then the event-time
guard. ``replay``, the daemon, ``demo`` and ``check`` all decode through a :class:`Decoder`, so
they accept and reject the same records.

The guard: a record whose event time lies more than ``max_future`` ahead of the decoder's
clock is rejected as ``ts_out_of_range`` before anything (the watermark above all) sees it. A
time in milliseconds read as seconds lies some 55,000 years ahead; one bad clock must not move
a partition's watermark past every later record.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from streameval import native
from streameval.config import Settings, format_duration
from streameval.mapping import EventMapping, ImpressionMapping, Path, PathError, lookup
from streameval.records import (
    EventFields,
    Ignored,
    ImpressionFields,
    Rejection,
    _Bad,
    _item_id,
    _load,
    _string,
    label_text,
    parse_ts,
)
from streameval.scoring.query import compact


def _at(obj: Any, path: Path) -> Any:
    """The value at ``path``, None when absent; a step through a non-object is ``wrong_type``."""
    try:
        return lookup(obj, path)
    except PathError as exc:
        raise _Bad("wrong_type", str(exc)) from None


def _required_at(obj: Any, path: Path, name: str | None = None) -> Any:
    value = _at(obj, path)
    if value is None:
        raise _Bad("missing_field", f"required field {name or path.text!r} is missing")
    return value


def _ts_at(obj: Any, path: Path | None, unit: int, kafka_ts: float | None) -> float:
    """Unix seconds from the field at ``path`` (numbers in ``unit``s per second, strings RFC
    3339), or from the Kafka record (``path`` None)."""
    if path is None:
        if kafka_ts is None:
            raise _Bad("missing_field", 'the Kafka record has no timestamp (ts = "@timestamp")')
        return kafka_ts
    value = _required_at(obj, path)
    try:
        if type(value) is str and _DIGITS.match(value):  # a number written as a string
            value = int(value) if value.isdigit() else float(value)
        if unit != 1 and type(value) in (int, float):
            seconds = value / unit  # correctly rounded: 1764000000123 ms is 1764000000.123 s
            if not math.isfinite(seconds):
                raise _Bad("wrong_type", f"{path.text} is not a finite number")
            return seconds
        return parse_ts(value, path.text)
    except OverflowError:  # an integer beyond any float (a string of 400 digits)
        raise _Bad("wrong_type", f"{path.text} is not a finite number") from None


_DIGITS = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


def _query_id(obj: Any, path: Path) -> str:
    """A mapped query id: a string, or an integer as its text (logs often number requests)."""
    return _item_id(_required_at(obj, path), path.text)


def _rank(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Bad("wrong_type", f"{name} is {type(value).__name__}, not a number")
    return float(value)


_NUMBERS = frozenset((int, float))  # exact types: a bool is no rank


def _one_key(path: Path) -> str | None:
    """The key of a path of one object key, else None."""
    if len(path.segments) == 1 and type(path.segments[0]) is str:
        return path.segments[0]
    return None


class MappedImpressions:
    """Decodes impressions through an ``[input.impressions]`` mapping."""

    def __init__(self, mapping: ImpressionMapping, group_by: tuple[str, ...]) -> None:
        self.m = mapping
        self.labels = mapping.label_paths(group_by)
        # the keys of the fast path: set only when the paths are one key each (no nesting)
        item_id, item_rank = mapping.item_id, mapping.item_rank
        self._id_key = _one_key(item_id) if item_id is not None else None
        self._rank_key = _one_key(item_rank) if item_rank is not None else None
        if item_rank is not None and self._rank_key is None:
            self._id_key = None  # a nested rank: the checked loop reads both

    def __call__(self, raw: bytes | str, kafka_ts: float | None = None) -> ImpressionFields | Rejection:
        m = self.m
        try:
            obj = _load(raw)
            query_id = _query_id(obj, m.query_id)
            ts = _ts_at(obj, m.ts, m.ts_unit, kafka_ts)
            items = _required_at(obj, m.items)
            where = m.items.text
            if type(items) is not list:
                raise _Bad("wrong_type", f"{where} is {type(items).__name__}, not an array")
            if not items:
                raise _Bad("empty_items", f"{where} is an empty list")
            if m.item_id is None:
                if type(items[0]) is dict:
                    raise _Bad("wrong_type", f"{where}[0] is an object: set item_id to the id's path in it")
                ids = [_item_id(item, f"{where}[{i}]") for i, item in enumerate(items)]
            else:
                ids = self._ids(items, where)
            group = tuple([label_text(_at(obj, path), path.text) for path in self.labels])
        except _Bad as bad:
            return Rejection(bad.reason, bad.detail)
        return query_id, ts, ids, group

    def _ids(self, items: list[Any], where: str) -> list[str]:
        """The ids of a list of objects, in the order of their ranks when ``item_rank`` is set."""
        ids = self._ids_fast(items)
        if ids is not None:
            return ids
        id_path, rank_path = self.m.item_id, self.m.item_rank
        assert id_path is not None
        ids, ranks = [], []
        for i, element in enumerate(items):
            if type(element) is not dict:
                raise _Bad("wrong_type", f"{where}[{i}] is {type(element).__name__}, not an object")
            name = f"{where}[{i}].{id_path.text}"
            ids.append(_item_id(_required_at(element, id_path, name), name))
            if rank_path is not None:
                name = f"{where}[{i}].{rank_path.text}"
                ranks.append(_rank(_required_at(element, rank_path, name), name))
        if rank_path is not None:
            # ascending rank; equal ranks keep the list's order (a stable sort)
            ids = [ids[i] for i in sorted(range(len(ids)), key=ranks.__getitem__)]
        return ids

    def _ids_fast(self, items: list[Any]) -> list[str] | None:
        """What :meth:`_ids` gives for the common list -- objects whose id (and rank) are
        top-level keys, ids strings, ranks numbers -- in a few calls into C; None for anything
        else, which the checked loop then decides (and rejects with its reason)."""
        id_key, rank_key = self._id_key, self._rank_key
        if id_key is None:
            return None
        try:
            ids = [element[id_key] for element in items]
            "".join(ids)  # every id a string (str.join accepts nothing else)
            if rank_key is None:
                return ids
            ranks = [element[rank_key] for element in items]
        except (KeyError, TypeError):  # an element that is not an object, lacks a key, ...
            return None
        if not _NUMBERS.issuperset(map(type, ranks)) or not all(map(math.isfinite, ranks)):
            return None
        return [ids[i] for i in sorted(range(len(ids)), key=ranks.__getitem__)]


class MappedEvents:
    """Decodes engagement events through an ``[input.events]`` mapping."""

    def __init__(self, mapping: EventMapping, grades: Mapping[str, float]) -> None:
        self.m = mapping
        self.grades = grades

    def __call__(
        self, raw: bytes | str, default_type: str | None = None, kafka_ts: float | None = None
    ) -> EventFields | Rejection | Ignored:
        m = self.m
        try:
            obj = _load(raw)
            raw_type = _at(obj, m.type)
            if raw_type is None:
                raw_type = default_type
            if type(raw_type) is int:
                raw_type = str(raw_type)
            if type(raw_type) is str and raw_type in m.ignore_types:
                return Ignored(raw_type)
            query_id = _query_id(obj, m.query_id)
            item = _item_id(_required_at(obj, m.item), m.item.text)
            if raw_type is None:
                raise _Bad("missing_field", f"required field {m.type.text!r} is missing")
            raw_type = _string(raw_type, m.type.text)
            event_type = m.types.get(raw_type, raw_type)
            ts = _ts_at(obj, m.ts, m.ts_unit, kafka_ts)
            event_id = _at(obj, m.event_id)
            if event_id is not None:
                event_id = _item_id(event_id, m.event_id.text)  # a string, or an integer as text
            if event_type not in self.grades:
                known = ", ".join(sorted({*self.grades, *m.types}))
                raise _Bad("unknown_event_type", f"event type {raw_type!r} has no grade (known: {known})")
        except _Bad as bad:
            return Rejection(bad.reason, bad.detail)
        return query_id, item, event_type, ts, event_id


def _iso(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return f"{seconds:.6g} s"


class Decoder:
    """Bytes -> the fields of a record, or a Rejection, or Ignored; the same for every command.

    ``clock`` is the time the event-time guard measures from (the daemon's wall clock, the
    demo's simulated one, replay's start); None turns the guard off.
    """

    def __init__(self, settings: Settings, clock: Callable[[], float] | None = time.time) -> None:
        self.settings = settings
        self.group_by = settings.group_by
        self.grades = settings.grades
        self.topic_types = settings.topic_types
        self.max_future = settings.max_future
        self.clock = clock
        mapping = settings.input
        # the native fast paths where installed (the same fields and rejections)
        self._impression_fields = native.impression_decoder(settings.group_by)
        self._compacted_fields = native.impression_decoder(settings.group_by, compacted=True)
        self._event_fields = native.event_decoder(settings.grades)
        self._impression_values = native.impression_values(settings.group_by)
        self._event_values = native.event_values()
        self._impressions = None
        if mapping.impressions is not None:
            self._impressions = MappedImpressions(mapping.impressions, settings.group_by)
        self._events = None
        if mapping.events is not None:
            self._events = MappedEvents(mapping.events, settings.grades)
        #: whether the Kafka record's timestamp is needed (``ts = "@timestamp"``)
        self.wants_kafka_ts = mapping.uses_kafka_timestamp

    def impression(self, raw: bytes | str, kafka_ts: float | None = None) -> ImpressionFields | Rejection:
        if self._impressions is None:
            fields = self._impression_fields(raw)
        else:
            fields = self._impressions(raw, kafka_ts)
        if type(fields) is Rejection or self.clock is None:
            return fields
        return self._guard(fields, fields[1])  # type: ignore[index]

    def impression_compacted(self, raw: bytes | str) -> ImpressionFields | Rejection:
        """As :meth:`impression`, with the shown list as
        :func:`~streameval.scoring.query.compact` makes it (how replay's join holds it)."""
        if self._impressions is None:
            fields = self._compacted_fields(raw)
        else:
            fields = self._impressions(raw, None)
            if type(fields) is not Rejection:
                query_id, ts, items, group = fields  # type: ignore[misc]
                fields = query_id, ts, compact(items), group  # type: ignore[assignment]
        if type(fields) is Rejection or self.clock is None:
            return fields
        return self._guard(fields, fields[1])  # type: ignore[index]

    def impression_lines(self, labels: dict[Any, Any]) -> Callable[[bytes], native.Lines] | None:
        """``replay``'s reading of a block of whole impression lines in one call to the native
        core (as :meth:`impression_compacted` reads each, the group tuples shared through
        ``labels``), or None: without the core, or with an ``[input]`` mapping. A line it leaves
        comes back as its bytes, for :meth:`impression_compacted` to decide."""
        read = native.impression_lines(self.group_by)
        if read is None or self._impressions is not None:
            return None
        return lambda data: read(data, self._limit(), labels)

    def event_lines(self, topic: str) -> Callable[[bytes], native.Lines] | None:
        """As :meth:`impression_lines`, for the events of ``topic`` (as :meth:`event` reads each)."""
        read = native.event_lines()
        if read is None or self._events is not None:
            return None
        grades, default_type = self.grades, self.topic_types.get(topic)
        return lambda data: read(data, grades, default_type, self._limit())

    def impression_shard_lines(
        self, labels: dict[Any, Any]
    ) -> Callable[[bytes, int, int], native.ShardLines] | None:
        """As :meth:`impression_lines`, the lines of one shard of the queries and those every
        shard gets (``replay`` in several processes): called with the shard and how many."""
        read = native.impression_shard_lines(self.group_by)
        if read is None or self._impressions is not None:
            return None
        return lambda data, shard, shards: read(data, self._limit(), labels, shard, shards)

    def event_shard_lines(self, topic: str) -> Callable[[bytes, int, int], native.ShardLines] | None:
        """As :meth:`event_lines`, the lines of one shard of the queries."""
        read = native.event_shard_lines()
        if read is None or self._events is not None:
            return None
        grades, default_type = self.grades, self.topic_types.get(topic)
        return lambda data, shard, shards: read(data, grades, default_type, self._limit(), shard, shards)

    def impression_values(self, values: list[Any]) -> list[ImpressionFields | Rejection]:
        """Kafka records' values (None: an empty one), each as :meth:`impression_compacted`
        decodes it, in one call to the native core where it is installed (the daemon). Not for
        ``ts = "@timestamp"``, which needs each record's Kafka timestamp."""
        read = self._impression_values if self._impressions is None else None
        one = self.impression_compacted
        if read is None:
            return [one(b"" if v is None else v) for v in values]
        # group tuples shared within the call only (a long-running daemon keeps no table)
        return _decided(read(values, self._limit(), {}), one)

    def event_values(self, values: list[Any], topic: str) -> list[EventFields | Rejection | Ignored]:
        """As :meth:`impression_values`, for the events of ``topic`` (as :meth:`event` decodes each)."""
        read = self._event_values if self._events is None else None
        one = functools.partial(self.event, topic=topic)
        if read is None:
            return [one(b"" if v is None else v) for v in values]
        return _decided(read(values, self.grades, self.topic_types.get(topic), self._limit()), one)

    def _limit(self) -> float:
        """The latest time the event-time guard lets through now."""
        return math.inf if self.clock is None else self.clock() + self.max_future

    def event(
        self, raw: bytes | str, topic: str, kafka_ts: float | None = None
    ) -> EventFields | Rejection | Ignored:
        default_type = self.topic_types.get(topic)
        if self._events is None:
            fields: Any = self._event_fields(raw, default_type)
        else:
            fields = self._events(raw, default_type, kafka_ts)
        if type(fields) is not tuple or self.clock is None:
            return fields
        return self._guard(fields, fields[3])

    def _guard(self, fields: Any, ts: float) -> Any:
        """``fields``, or the ``ts_out_of_range`` Rejection when ``ts`` is too far ahead."""
        limit = self._limit()
        if ts > limit:
            return Rejection(
                "ts_out_of_range",
                f"ts {_iso(ts)} is more than max_future ({format_duration(self.max_future)}) ahead "
                f"of the clock ({_iso(limit - self.max_future)}); is it in another unit (ts_unit)?",
            )
        return fields


def _decided(lines: native.Lines, one: Callable[[bytes], Any]) -> list[Any]:
    """The records the native core read, with each value it left (None: an empty one) decoded
    by ``one``, the one-record path."""
    records, slow = lines
    for i in slow:
        value = records[i]
        records[i] = one(b"" if value is None else value)
    return records
