"""Validators of configuration values: a raw value (from TOML, the environment or a flag) ->
its typed value, or ValueError saying what is wrong (the caller names the key)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from streameval.errors import ConfigError
from streameval.scoring.measures import MEASURES
from streameval.scoring.spec import MetricSpec

#: Label names streameval uses itself; a group field may not take one of them.
RESERVED_LABELS = frozenset({"k", "window", "metric", "topic", "reason", "partition", "le"})

_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def parse_duration(value: Any) -> float:
    """``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"``, ``"7d"``, ``"1w"`` (or a number of seconds)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not a duration such as 500ms, 10s, 5m, 1h or 7d")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a non-negative duration")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration, for labels: 300 -> ``"5m"``."""
    for unit in ("w", "d", "h", "m", "s"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{seconds * 1000:g}ms"


@dataclass(frozen=True)
class Window:
    """A sliding window: its label (``"1h"``) and its length in seconds."""

    name: str
    seconds: float


def string(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a string")
    text = str(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def split_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return list(value)
    raise ValueError(f"{value!r} is not a list")


def choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(repr(o) for o in options)}")
        return str(value)

    return check


def int_in(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, float) and value.is_integer():  # 3.0, as generated TOML writes 3
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not a whole number")
        if not low <= value <= high:
            raise ValueError(f"{value} is not between {low} and {high}")
        return value

    return check


def number(value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a number")
    if value < 0:
        raise ValueError(f"{value} is negative")
    return float(value)


def share(value: Any) -> float:
    """A share in (0, 1)."""
    checked = number(value)
    if not 0 < checked < 1:
        raise ValueError(f"{checked} is not between 0 and 1 (a share, e.g. 0.05)")
    return checked


def metrics(value: Any) -> tuple[MetricSpec, ...]:
    specs = [MetricSpec.parse(string(v)) for v in split_list(value)]
    if not specs:
        raise ValueError('needs at least one metric, e.g. ["map@10"]')
    if len(set(specs)) != len(specs):
        raise ValueError("lists a metric twice")
    return tuple(specs)


def grades(value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("must be a table of event type to grade, e.g. {click = 1, purchase = 2}")
    return MappingProxyType({string(k): number(v) for k, v in value.items()})


def durations_table(value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError('must be a table of event type to duration, e.g. {purchase = "24h"}')
    return MappingProxyType({string(k): parse_duration(v) for k, v in value.items()})


def group_by(value: Any) -> tuple[str, ...]:
    names = tuple(string(v) for v in split_list(value))
    for name in names:
        if not _LABEL_RE.match(name) or name.startswith("__"):
            raise ValueError(f"{name!r} is not a valid Prometheus label name")
        if name in RESERVED_LABELS:
            raise ValueError(f"{name!r} is a label streameval uses itself")
    if len(set(names)) != len(names):
        raise ValueError("lists a field twice")
    return names


def windows(value: Any) -> tuple[Window, ...]:
    windows = []
    for item in split_list(value):
        seconds = parse_duration(item)
        if seconds <= 0:
            raise ValueError(f"window {item!r} must be longer than zero")
        name = item.strip() if isinstance(item, str) else format_duration(seconds)
        windows.append(Window(name, seconds))
    if not windows:
        raise ValueError('needs at least one window, e.g. ["1h"]')
    if len({w.seconds for w in windows}) != len(windows):
        raise ValueError("lists a window twice")
    return tuple(windows)


def events_topics(value: Any) -> tuple[tuple[str, ...], Mapping[str, str]]:
    if isinstance(value, Mapping):
        types = {string(k): string(v) for k, v in value.items()}
        topics = tuple(types)
    else:
        topics = tuple(string(v) for v in split_list(value))
        types = {}
    if not topics:
        raise ValueError("needs at least one topic")
    if len(set(topics)) != len(topics):
        raise ValueError("lists a topic twice")
    return topics, MappingProxyType(types)


def topic_list(value: Any) -> tuple[str, ...]:
    topics = tuple(string(v) for v in split_list(value))
    if len(set(topics)) != len(topics):
        raise ValueError("lists a topic twice")
    return topics


def table(value: Any) -> Mapping[str, Any]:
    """A table checked later, against other keys (see :func:`_dependent`)."""
    if not isinstance(value, Mapping):
        raise ValueError("must be a table, e.g. { model = ... }")
    return value


def labels_allow(value: Mapping[str, Any], group_by: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    out = {}
    for label, patterns in value.items():
        if label not in group_by:
            raise ValueError(f"{label!r} is not a group_by label ({', '.join(group_by)})")
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f'{label}: must be a list of glob patterns, e.g. ["control", "candidate-*"]')
        out[label] = tuple(patterns)
    return MappingProxyType(out)


def control(value: Mapping[str, Any], group_by: tuple[str, ...]) -> Mapping[str, str]:
    out = {}
    for label, wanted in value.items():
        if label not in group_by:
            raise ValueError(f"{label!r} is not a group_by label ({', '.join(group_by)})")
        if not isinstance(wanted, str):
            raise ValueError(f'{label}: must be a string, e.g. {{model = "control"}}')
        out[label] = wanted
    if not out:
        raise ValueError('name the control group by one label at least, e.g. {model = "control"}')
    return MappingProxyType(out)


def labels_max_values(value: Mapping[str, Any], group_by: tuple[str, ...]) -> Mapping[str, int]:
    out = {}
    for label, cap in value.items():
        if label not in group_by:
            raise ValueError(f"{label!r} is not a group_by label ({', '.join(group_by)})")
        try:
            out[label] = int_in(1, 1_000_000)(cap)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
    return MappingProxyType(out)


def kafka_table(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError('must be a table, e.g. [kafka] security_protocol = "SASL_SSL"')
    for key in value:
        if not isinstance(key, str) or not _LABEL_RE.match(key):
            raise ValueError(f"{key!r} is not a kafka-python setting name")
    return MappingProxyType(dict(value))


def check_combination(s: Any) -> None:
    """What one key allows given another's value (``s``: the Settings); ConfigError naming the key."""
    for event_type in s.horizons:
        if event_type not in s.grades:
            raise ConfigError(f"horizons: event type {event_type!r} has no grade in 'grades'")
    for topic, event_type in s.topic_types.items():
        if event_type not in s.grades:
            raise ConfigError(
                f"events_topics: topic {topic!r} maps to type {event_type!r}, which has no grade in 'grades'"
            )
    if not any(grade >= s.min_grade for grade in s.grades.values()):
        raise ConfigError(
            f"min_grade: {s.min_grade:g} is above every grade in 'grades', so nothing could be relevant"
        )
    if s.min_grade <= 0:
        raise ConfigError("min_grade: must be above 0 (an item with no engagement has grade 0)")
    _check_exp_gains(s)
    _check_topics(s)
    if s.commit_interval < 0.1:
        raise ConfigError("commit_interval: must be at least 100ms")
    if s.shutdown_timeout < 1:
        raise ConfigError("shutdown_timeout: must be at least 1s")


#: the highest grade whose exp gain, 2^g - 1, is a float with room for a DCG's sum of them
MAX_EXP_GRADE = 1000.0


def _check_exp_gains(s: Any) -> None:
    """With an NDCG metric and ``ndcg_gain = "exp"``, every grade's 2^g - 1 is a float."""
    if s.ndcg_gain != "exp" or not any(MEASURES[m.name].state == "dcg" for m in s.metrics):
        return
    for event_type, grade in s.grades.items():
        if grade > MAX_EXP_GRADE:
            raise ConfigError(
                f"grades: {event_type!r} = {grade:g} is above {MAX_EXP_GRADE:g}, where NDCG's gain "
                '2^g - 1 (ndcg_gain = "exp") is past the floats; use smaller grades, or '
                'ndcg_gain = "linear"'
            )


def _check_topics(s: Any) -> None:
    """Every topic the daemon reads or writes is a different one."""
    topics = [s.impressions_topic, *s.events_topics]
    if len(set(topics)) != len(topics):
        raise ConfigError("impressions_topic: must differ from every topic in 'events_topics'")
    if s.dead_letter_topic in topics:
        raise ConfigError("dead_letter_topic: must differ from the input topics")
    if s.changelog_topic in (*topics, s.dead_letter_topic):
        raise ConfigError(
            f"group_id: its changelog topic {s.changelog_topic!r} is also an input or dead-letter topic"
        )
    for topic in s.repartition:
        if topic not in s.events_topics:
            raise ConfigError(
                f"repartition: {topic!r} is not one of the events_topics ({', '.join(s.events_topics)})"
            )
        if s.repartition_topic(topic) in (*topics, s.dead_letter_topic):
            raise ConfigError(
                f"group_id: its repartition topic {s.repartition_topic(topic)!r} is also an input or "
                "dead-letter topic"
            )
