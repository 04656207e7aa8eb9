"""How records in another JSON shape map onto streameval's (README, Your logs).

``[input.impressions]`` and ``[input.events]`` name, for each field of streameval's records, a
dotted path into the logged object (``request.id``: the key ``id`` of the object under
``request``; a segment of digits also indexes a list). Without them the records are read in
streameval's own shape. The paths are compiled once, when the configuration is read; a mapping
that cannot work (a path that is not a string, an unknown unit, a type mapped to no grade)
raises ValueError naming the key, which configuration turns into a ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: ``ts = "@timestamp"``: the Kafka record's own timestamp (the daemon only)
KAFKA_TIMESTAMP = "@timestamp"
#: seconds per unit of a numeric time
TS_UNITS: Mapping[str, int] = MappingProxyType({"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000})

_IMPRESSION_KEYS = ("query_id", "ts", "ts_unit", "items", "item_id", "item_rank", "labels")
_EVENT_KEYS = ("query_id", "item", "type", "types", "ignore_types", "ts", "ts_unit", "event_id")


@dataclass(frozen=True)
class Path:
    """A compiled dotted path: its text (for messages) and its segments (a digit segment is also
    a list index)."""

    text: str
    segments: tuple[str | int, ...]

    @staticmethod
    def parse(text: Any, key: str) -> Path:
        if not isinstance(text, str):
            raise ValueError(f'{key}: {text!r} is not a path (a string such as "request.id")')
        parts = text.split(".")
        if not text or any(not part for part in parts):
            raise ValueError(f'{key}: {text!r} is not a dotted path such as "request.id"')
        return Path(text, tuple(int(p) if p.isdigit() else p for p in parts))


class PathError(Exception):
    """A path met something other than an object (or list) on its way: the record's field has
    the wrong type. The message names the part of the path that holds it."""


def lookup(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj``, or None when a key on the way is absent (or null).
    Raises PathError when a step meets a value that is neither an object nor a list."""
    value = obj
    for i, segment in enumerate(path.segments):
        if type(value) is dict:
            value = value.get(segment if type(segment) is str else str(segment))
        elif type(value) is list and type(segment) is int:
            value = value[segment] if segment < len(value) else None
        else:
            where = ".".join(str(s) for s in path.segments[:i])
            raise PathError(f"{where} is {type(value).__name__}, not an object")
        if value is None:
            return None
    return value


def _unit(value: Any, key: str) -> int:
    if value not in TS_UNITS:
        raise ValueError(f"{key}: {value!r} is not a time unit ({', '.join(TS_UNITS)})")
    return TS_UNITS[value]


def _ts(value: Any, key: str) -> Path | None:
    """``None`` for the Kafka record's timestamp, else the path."""
    if value == KAFKA_TIMESTAMP:
        return None
    return Path.parse(value, key)


def _table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{key}: must be a table, e.g. {key} = {{ ... }}")
    return value


def _check_keys(table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    for key in table:
        if key not in known:
            raise ValueError(f"{where}.{key}: unknown key; known: {', '.join(known)}")


def _paths_and_times(
    value: Any, where: str, known: Sequence[str], path_keys: Sequence[str]
) -> tuple[Mapping[str, Any], dict[str, Any]]:
    """The table at ``where``, checked for unknown keys, and its paths, ``ts`` and ``ts_unit``
    parsed (what impressions and events have in common)."""
    table = _table(value, where)
    _check_keys(table, known, where)
    values: dict[str, Any] = {}
    for key in path_keys:
        if key in table:
            values[key] = Path.parse(table[key], f"{where}.{key}")
    if "ts" in table:
        values["ts"] = _ts(table["ts"], f"{where}.ts")
    if "ts_unit" in table:
        values["ts_unit"] = _unit(table["ts_unit"], f"{where}.ts_unit")
    return table, values


@dataclass(frozen=True)
class ImpressionMapping:
    """``[input.impressions]``: where each field of an impression is in the logged object."""

    query_id: Path = Path("query_id", ("query_id",))
    ts: Path | None = Path("ts", ("ts",))  # None: the Kafka record's timestamp
    ts_unit: int = 1
    items: Path = Path("items", ("items",))
    item_id: Path | None = None  # the id's path inside each object of ``items``
    item_rank: Path | None = None  # order ``items`` by this field of each object, ascending
    #: group_by label -> path (a label not named here is read from the field of its own name)
    labels: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def parse(table: Any, group_by: Sequence[str]) -> ImpressionMapping:
        where = "input.impressions"
        paths = ("query_id", "items", "item_id", "item_rank")
        table, values = _paths_and_times(table, where, _IMPRESSION_KEYS, paths)
        if values.get("item_rank") is not None and values.get("item_id") is None:
            raise ValueError(f"{where}.item_rank: needs item_id (the list must hold objects)")
        labels = {}
        for label, text in _table(table.get("labels", {}), f"{where}.labels").items():
            if label not in group_by:
                raise ValueError(
                    f"{where}.labels.{label}: {label!r} is not a group_by label ({', '.join(group_by)})"
                )
            labels[label] = Path.parse(text, f"{where}.labels.{label}")
        values["labels"] = MappingProxyType(labels)
        return ImpressionMapping(**values)

    def label_paths(self, group_by: Sequence[str]) -> tuple[Path, ...]:
        """The path of each group_by label, in its order."""
        return tuple(self.labels.get(name, Path(name, (name,))) for name in group_by)


@dataclass(frozen=True)
class EventMapping:
    """``[input.events]``: where each field of an engagement event is in the logged object."""

    query_id: Path = Path("query_id", ("query_id",))
    item: Path = Path("item", ("item",))
    type: Path = Path("type", ("type",))
    #: raw type value -> grade name (a value not named here is taken as it is)
    types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    ignore_types: frozenset[str] = frozenset()
    ts: Path | None = Path("ts", ("ts",))
    ts_unit: int = 1
    event_id: Path = Path("event_id", ("event_id",))

    @staticmethod
    def parse(table: Any, grades: Mapping[str, float]) -> EventMapping:
        where = "input.events"
        paths = ("query_id", "item", "type", "event_id")
        table, values = _paths_and_times(table, where, _EVENT_KEYS, paths)
        types = {}
        for raw, grade_name in _table(table.get("types", {}), f"{where}.types").items():
            if grade_name not in grades:
                raise ValueError(
                    f"{where}.types.{raw}: {grade_name!r} has no grade in 'grades' ({', '.join(grades)})"
                )
            types[raw] = grade_name
        values["types"] = MappingProxyType(types)
        ignore = table.get("ignore_types", [])
        if not isinstance(ignore, list) or not all(isinstance(t, str) for t in ignore):
            raise ValueError(f'{where}.ignore_types: must be a list of type values, e.g. ["VIEW"]')
        both = sorted(set(ignore) & (set(types) | set(grades)))
        if both:
            raise ValueError(f"{where}.ignore_types: {both[0]!r} is also a graded type")
        values["ignore_types"] = frozenset(ignore)
        return EventMapping(**values)


@dataclass(frozen=True)
class InputMapping:
    """The ``[input]`` table: a mapping for impressions, for events, or for neither (None: the
    records are in streameval's own shape, read by the fast path)."""

    impressions: ImpressionMapping | None = None
    events: EventMapping | None = None

    @staticmethod
    def parse(value: Any, group_by: Sequence[str], grades: Mapping[str, float]) -> InputMapping:
        table = _table(value, "input")
        _check_keys(table, ("impressions", "events"), "input")
        impressions = table.get("impressions")
        events = table.get("events")
        return InputMapping(
            impressions=None if impressions is None else ImpressionMapping.parse(impressions, group_by),
            events=None if events is None else EventMapping.parse(events, grades),
        )

    @property
    def uses_kafka_timestamp(self) -> bool:
        """Whether some input takes its time from the Kafka record (which files do not have)."""
        return (self.impressions is not None and self.impressions.ts is None) or (
            self.events is not None and self.events.ts is None
        )
