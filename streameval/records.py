"""Bytes -> :class:`Impression` or :class:`Engagement`, or a :class:`Rejection` with a reason.

Decoding never raises on bad input. Rejection reasons (the ``reason`` label of
``streameval_records_rejected_total`` and the ``rejected`` object of ``replay``):

- ``not_json``: the bytes are not JSON (or not UTF-8);
- ``not_object``: JSON, but not an object;
- ``missing_field``: a required field is absent (or ``null``);
- ``wrong_type``: a field has the wrong type, or a ``ts`` string is not an RFC 3339 time,
  or a number is not finite;
- ``unknown_event_type``: an event's type has no grade in the ``grades`` config;
- ``empty_items``: an impression's ``items`` list is empty;
- ``ts_out_of_range``: the event time lies more than ``max_future`` ahead of the clock
  (decided by :class:`streameval.decoding.Decoder`, never by these functions).

Group labels that are numbers or booleans become strings (``3`` -> ``"3"``, ``true`` ->
``"true"``); an absent or null one is ``unknown``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

REJECT_REASONS = (
    "not_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "unknown_event_type",
    "empty_items",
    "ts_out_of_range",
)
UNKNOWN_GROUP = "unknown"
_FINITE_LOW, _FINITE_HIGH = -math.inf, math.inf
_STRING_OR_INT = frozenset((str, int))


# Records are not changed once decoded, but not ``frozen``: a frozen dataclass's __init__ sets
# each field through object.__setattr__, which made it 4x slower to build (one per record).
@dataclass(slots=True)
class Impression:
    """One served ranking ("query"). ``items`` are strings, rank 1 first: a tuple, or, as the
    daemon decodes them, the list :func:`~streameval.scoring.query.compact` makes (one string
    ``SEP item SEP ... SEP``, how the join holds it)."""

    query_id: str
    ts: float
    items: Sequence[str]
    group: tuple[str, ...]


@dataclass(slots=True)
class Engagement:
    """A click, purchase or other graded event on one item of one query."""

    query_id: str
    item: str
    type: str
    ts: float
    event_id: str | None

    @property
    def dedup_key(self) -> tuple[str, ...] | str:
        """``event_id`` when given, else (query_id, item, type, ts)."""
        if self.event_id is not None:
            return self.event_id
        return fields_key(self.query_id, self.item, self.type, self.ts)


def fields_key(query_id: str, item: str, event_type: str, ts: float) -> tuple[str, ...]:
    """The dedup key of an event without an ``event_id``."""
    return (query_id, item, event_type, repr(ts))


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record was rejected: a reason code from REJECT_REASONS and a human detail."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Ignored:
    """An event whose type is listed in ``ignore_types``: counted, neither used nor rejected."""

    type: str


class _Bad(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _iso_with_offset(text: str) -> float | None:
    """The value :func:`parse_ts` gives for a time with an offset in the form Python reads
    directly (``2026-01-01T00:00:00.001Z``, ``...+00:00``) -- the forms most logs use -- or None
    for anything else, which then takes the general route (surrounding blanks, no offset, or not
    a time). One call into C: an aware datetime's ``timestamp()`` is its integer microseconds
    since the epoch divided by 10**6, as the general route computes it."""
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            return None  # the general route reads it as UTC
        return moment.timestamp()
    except (ValueError, OverflowError):
        return None


def parse_ts(value: Any, name: str = "ts") -> float:
    """Unix seconds from a number or an RFC 3339 string (no offset is read as UTC)."""
    if type(value) is str:
        seconds = _iso_with_offset(value)
        if seconds is not None:
            return seconds
    if isinstance(value, bool):
        raise _Bad("wrong_type", f"{name} is a boolean, not a number or RFC 3339 string")
    if isinstance(value, int | float):
        seconds = float(value)
        if not math.isfinite(seconds):
            raise _Bad("wrong_type", f"{name} is not a finite number")
        return seconds
    if isinstance(value, str):
        text = value.strip()
        if text[-1:] in ("z", "Z"):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
        except (ValueError, OverflowError):
            raise _Bad("wrong_type", f"{name} {value!r} is not an RFC 3339 time") from None
    raise _Bad("wrong_type", f"{name} is {type(value).__name__}, not a number or RFC 3339 string")


def _load(raw: bytes | str) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Bad("not_json", f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _Bad("not_object", f"JSON {type(obj).__name__}, not an object")
    return obj


def _required(obj: Mapping[str, Any], name: str) -> Any:
    value = obj.get(name)
    if value is None:
        raise _Bad("missing_field", f"required field {name!r} is missing")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _Bad("wrong_type", f"{name} is {type(value).__name__}, not a string")
    return value


def _item_id(value: Any, name: str) -> str:
    """Item ids are strings or integers; integers are normalised (5 and "5" are one item)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _Bad("wrong_type", f"{name} is {type(value).__name__}, not a string or integer")


def label_text(value: Any, name: str) -> str:
    """A group label's value: a string as it is, a number or boolean as its JSON text, an
    absent or null one ``unknown``; anything else is the wrong type."""
    if type(value) is str:
        return value
    if value is None:
        return UNKNOWN_GROUP
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise _Bad("wrong_type", f"{name} is {type(value).__name__}, not a string, number or boolean")


def _object_or_none(raw: bytes | str) -> dict[str, Any] | None:
    """The JSON object in ``raw``, or None for anything else (the fast paths' first step)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj if type(obj) is dict else None


def _int_items(items: list[Any]) -> list[str] | None:
    """A list of integer item ids as strings (``str(5)`` is ``"5"``), or None when it holds
    anything else (the checked path then decides). orjson writes the list and the text is split
    in C, which costs less than ``str()`` per item, for logs whose ids are all integers."""
    try:
        text = orjson.dumps(items)
    except TypeError:  # an integer beyond 64 bits
        return None
    inner = text[1:-1]
    # only digits, signs and commas inside the brackets: every element is an integer (a
    # bool, float, string, list or null would leave a letter, dot, quote or bracket)
    if inner.translate(None, b"0123456789-,"):
        return None
    return inner.decode().split(",")


#: a good impression as query_id, ts, items and group labels
ImpressionFields = tuple[str, float, Sequence[str], tuple[str, ...]]


def decode_impression_fields(raw: bytes | str, group_by: Collection[str]) -> ImpressionFields | Rejection:
    """Decode one impression record as query_id, ts, items and group labels (group fields that
    are absent or null become ``unknown``), or a Rejection with its reason."""
    # Fast path for the common, well-formed record: exact type checks, no exceptions. Anything
    # it does not accept goes through the checked path, which finds the reason (or accepts what
    # the fast path leaves to it, such as a time without an offset).
    obj = _object_or_none(raw)
    if obj is not None:
        query_id = obj.get("query_id")
        ts = obj.get("ts")
        if type(ts) is str:
            ts = _iso_with_offset(ts)  # None for any other form: the checked path reads those
        items = obj.get("items")
        if (
            type(query_id) is str
            and (type(ts) is float or type(ts) is int)
            and _FINITE_LOW < ts < _FINITE_HIGH
            and type(items) is list
            and items
        ):
            group = tuple([obj.get(name) for name in group_by])
            if None in group:  # an absent or null label is "unknown", as on the checked path
                group = tuple([UNKNOWN_GROUP if label is None else label for label in group])
            ints = _int_items(items) if type(items[0]) is int else None
            if ints is not None:
                items = ints
            else:
                try:
                    # str.join accepts only strings: a one-call type check of every item
                    "".join(items)
                except TypeError:
                    # integer item ids among strings, normalised as the checked path does (a
                    # bool is not an int here; str() of a string is the string itself)
                    items = list(map(str, items)) if _STRING_OR_INT.issuperset(map(type, items)) else None
            if items is not None:
                try:
                    "".join(group)  # type: ignore[arg-type]  # the same check of every label
                    return query_id, float(ts), items, group  # type: ignore[return-value]
                except TypeError:
                    pass
    record = _decode_impression_checked(raw, group_by, obj)
    if type(record) is Rejection:
        return record
    return record.query_id, record.ts, record.items, record.group  # type: ignore[union-attr]


def _decode_impression_checked(
    raw: bytes | str, group_by: Collection[str], obj: dict[str, Any] | None = None
) -> Impression | Rejection:
    """The impression in ``raw`` (``obj``: its JSON object, when the fast path has it), checked
    field by field, or the reason it is rejected."""
    try:
        obj = _load(raw) if obj is None else obj
        query_id = _string(_required(obj, "query_id"), "query_id")
        ts = parse_ts(_required(obj, "ts"))
        items = _required(obj, "items")
        if not isinstance(items, list):
            raise _Bad("wrong_type", f"items is {type(items).__name__}, not an array")
        if not items:
            raise _Bad("empty_items", "items is an empty list")
        if all(type(item) is str for item in items):
            ids = tuple(items)
        else:
            ids = tuple(_item_id(item, f"items[{i}]") for i, item in enumerate(items))
        group = tuple([label_text(obj.get(name), name) for name in group_by])
    except _Bad as bad:
        return Rejection(bad.reason, bad.detail)
    return Impression(query_id, ts, ids, group)


#: a good event as query_id, item, type, ts and event_id (None when it has none)
EventFields = tuple[str, str, str, float, str | None]


def decode_event_fields(
    raw: bytes | str, grades: Mapping[str, float], default_type: str | None = None
) -> EventFields | Rejection:
    """Decode one engagement event as query_id, item, type, ts and event_id, or a Rejection;
    ``default_type`` is the type its topic maps to, if any."""
    # fast path, as in decode_impression_fields
    obj = _object_or_none(raw)
    if obj is not None:
        query_id = obj.get("query_id")
        item = obj.get("item")
        event_type = obj.get("type")
        if event_type is None:
            event_type = default_type
        ts = obj.get("ts")
        if type(ts) is str:
            ts = _iso_with_offset(ts)
        if type(item) is int:
            item = str(item)  # integer item ids are normalised to strings
        event_id = obj.get("event_id")
        if (
            type(query_id) is str
            and type(item) is str
            and type(event_type) is str
            and (type(ts) is float or type(ts) is int)
            and _FINITE_LOW < ts < _FINITE_HIGH
            and (event_id is None or type(event_id) is str)
            and event_type in grades
        ):
            return query_id, item, event_type, float(ts), event_id
    record = _decode_event_checked(raw, grades, default_type, obj)
    if type(record) is Rejection:
        return record
    return record.query_id, record.item, record.type, record.ts, record.event_id  # type: ignore[union-attr]


def _decode_event_checked(
    raw: bytes | str,
    grades: Mapping[str, float],
    default_type: str | None = None,
    obj: dict[str, Any] | None = None,
) -> Engagement | Rejection:
    """As :func:`_decode_impression_checked`, for an event."""
    try:
        obj = _load(raw) if obj is None else obj
        query_id = _string(_required(obj, "query_id"), "query_id")
        item = _item_id(_required(obj, "item"), "item")
        raw_type = obj.get("type")
        if raw_type is None and default_type is not None:
            raw_type = default_type
        event_type = _string(_required({"type": raw_type}, "type"), "type")
        ts = parse_ts(_required(obj, "ts"))
        event_id = obj.get("event_id")
        if event_id is not None:
            event_id = _string(event_id, "event_id")
        if event_type not in grades:
            raise _Bad(
                "unknown_event_type",
                f"event type {event_type!r} has no grade (known: {', '.join(sorted(grades))})",
            )
    except _Bad as bad:
        return Rejection(bad.reason, bad.detail)
    return Engagement(query_id, item, event_type, ts, event_id)
