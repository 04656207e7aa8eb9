"""Configuration: one frozen :class:`Settings`, built once at the edge and passed down.

Precedence, highest first: command-line flags (``--key-with-dashes``), environment variables
(``STREAMEVAL_<KEY>``; the ``[kafka]`` table from ``STREAMEVAL_KAFKA_<KEY>``), the TOML file
(``--config``), the defaults below. This module is the only reader of files, environment and
flags for configuration. Every problem raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from streameval.errors import ConfigError
from streameval.mapping import InputMapping
from streameval.scoring.spec import MetricSpec

ENV_PREFIX = "STREAMEVAL_"
KAFKA_ENV_PREFIX = "STREAMEVAL_KAFKA_"
#: Kafka client settings whose values are secrets: never logged, never exported.
SECRET_KAFKA_KEYS = frozenset(
    {"sasl_plain_password", "ssl_password", "sasl_oauth_token_provider", "ssl_keyfile_password"}
)
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


@dataclass(frozen=True)
class Settings:
    """Every configuration key (README, section Configuration), validated. Durations are float seconds."""

    bootstrap_servers: str = "localhost:9092"
    group_id: str = "streameval"
    impressions_topic: str = "impressions"
    events_topics: tuple[str, ...] = ("clicks", "purchases")
    #: topic -> event type given to records of that topic that carry no ``type``.
    topic_types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    dead_letter_topic: str = "streameval.dlq"
    metrics_port: int = 9464
    metrics_host: str = "0.0.0.0"
    kafka: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    metrics: tuple[MetricSpec, ...] = (
        MetricSpec("map", 10),
        MetricSpec("ndcg", 10),
        MetricSpec("recall", 10),
        MetricSpec("mrr", 10),
    )
    ap_denominator: str = "min_g_k"
    no_relevant: str = "skip"
    grades: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({"click": 1.0, "purchase": 2.0})
    )
    min_grade: float = 1.0
    ndcg_gain: str = "exp"
    horizon: float = 1800.0
    horizons: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    unshown_items: str = "count"
    group_by: tuple[str, ...] = ("model", "surface")
    max_groups: int = 1000
    #: group_by label -> glob patterns its values must match (others fold into __other__)
    labels_allow: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: group_by label -> how many distinct values it keeps (later ones fold into __other__)
    labels_max_values: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: where the fields of records in another shape are (README, Your logs)
    input: InputMapping = field(default_factory=InputMapping)
    max_future: float = 300.0
    windows: tuple[Window, ...] = (
        Window("5m", 300.0),
        Window("1h", 3600.0),
        Window("24h", 86400.0),
    )
    allowed_lateness: float = 10.0
    orphan_ttl: float = 300.0
    commit_interval: float = 5.0
    shutdown_timeout: float = 20.0
    changelog_replication_factor: int = 1

    @property
    def changelog_topic(self) -> str:
        """The compacted topic that holds the partitions' state, named after the group."""
        return f"{self.group_id}-changelog"

    def horizon_for(self, event_type: str) -> float:
        """The attribution horizon of one event type."""
        return self.horizons.get(event_type, self.horizon)

    @property
    def max_horizon(self) -> float:
        """The longest horizon of any graded type: a query settles this long after its impression."""
        return max([self.horizon, *(self.horizons.get(t, self.horizon) for t in self.grades)])

    def redacted_kafka(self) -> dict[str, Any]:
        """The ``[kafka]`` table with secret values replaced, safe to log."""
        return {k: ("***" if k in SECRET_KAFKA_KEYS else v) for k, v in self.kafka.items()}


# --- validators: raw value (from TOML, env or a flag) -> typed value, or ValueError -------------


def _string(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a string")
    text = str(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _split_list(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return list(value)
    raise ValueError(f"{value!r} is not a list")


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(repr(o) for o in options)}")
        return str(value)

    return check


def _int_in(low: int, high: int) -> Callable[[Any], int]:
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


def _number(value: Any) -> float:
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


def _metrics(value: Any) -> tuple[MetricSpec, ...]:
    specs = [MetricSpec.parse(_string(v)) for v in _split_list(value)]
    if not specs:
        raise ValueError('needs at least one metric, e.g. ["map@10"]')
    if len(set(specs)) != len(specs):
        raise ValueError("lists a metric twice")
    return tuple(specs)


def _grades(value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("must be a table of event type to grade, e.g. {click = 1, purchase = 2}")
    return MappingProxyType({_string(k): _number(v) for k, v in value.items()})


def _durations_table(value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError('must be a table of event type to duration, e.g. {purchase = "24h"}')
    return MappingProxyType({_string(k): parse_duration(v) for k, v in value.items()})


def _group_by(value: Any) -> tuple[str, ...]:
    names = tuple(_string(v) for v in _split_list(value))
    for name in names:
        if not _LABEL_RE.match(name) or name.startswith("__"):
            raise ValueError(f"{name!r} is not a valid Prometheus label name")
        if name in RESERVED_LABELS:
            raise ValueError(f"{name!r} is a label streameval uses itself")
    if len(set(names)) != len(names):
        raise ValueError("lists a field twice")
    return names


def _windows(value: Any) -> tuple[Window, ...]:
    windows = []
    for item in _split_list(value):
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


def _events_topics(value: Any) -> tuple[tuple[str, ...], Mapping[str, str]]:
    if isinstance(value, Mapping):
        types = {_string(k): _string(v) for k, v in value.items()}
        topics = tuple(types)
    else:
        topics = tuple(_string(v) for v in _split_list(value))
        types = {}
    if not topics:
        raise ValueError("needs at least one topic")
    if len(set(topics)) != len(topics):
        raise ValueError("lists a topic twice")
    return topics, MappingProxyType(types)


def _table(value: Any) -> Mapping[str, Any]:
    """A table checked later, against other keys (see :func:`_dependent`)."""
    if not isinstance(value, Mapping):
        raise ValueError("must be a table, e.g. { model = ... }")
    return value


def _labels_allow(value: Mapping[str, Any], group_by: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
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


def _labels_max_values(value: Mapping[str, Any], group_by: tuple[str, ...]) -> Mapping[str, int]:
    out = {}
    for label, cap in value.items():
        if label not in group_by:
            raise ValueError(f"{label!r} is not a group_by label ({', '.join(group_by)})")
        try:
            out[label] = _int_in(1, 1_000_000)(cap)
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
    return MappingProxyType(out)


def _kafka_table(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError('must be a table, e.g. [kafka] security_protocol = "SASL_SSL"')
    for key in value:
        if not isinstance(key, str) or not _LABEL_RE.match(key):
            raise ValueError(f"{key!r} is not a kafka-python setting name")
    return MappingProxyType(dict(value))


_VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "bootstrap_servers": _string,
    "group_id": _string,
    "impressions_topic": _string,
    "events_topics": _events_topics,
    "dead_letter_topic": _string,
    "metrics_port": _int_in(0, 65535),
    "metrics_host": _string,
    "kafka": _kafka_table,
    "metrics": _metrics,
    "ap_denominator": _choice("min_g_k", "g", "hits"),
    "no_relevant": _choice("skip", "zero"),
    "grades": _grades,
    "min_grade": _number,
    "ndcg_gain": _choice("exp", "linear"),
    "horizon": parse_duration,
    "horizons": _durations_table,
    "unshown_items": _choice("count", "ignore"),
    "group_by": _group_by,
    "max_groups": _int_in(1, 1_000_000),
    "labels_allow": _table,
    "labels_max_values": _table,
    "input": _table,
    "max_future": parse_duration,
    "windows": _windows,
    "allowed_lateness": parse_duration,
    "orphan_ttl": parse_duration,
    "commit_interval": parse_duration,
    "shutdown_timeout": parse_duration,
    "changelog_replication_factor": _int_in(1, 32767),
}
#: Every configuration key, in the order of the README table.
KEYS = tuple(_VALIDATORS)
#: Keys whose values stay raw strings when they come from the environment or a flag.
_STRING_KEYS = frozenset(
    {"bootstrap_servers", "group_id", "impressions_topic", "dead_letter_topic", "metrics_host"}
)


def _parse_text(key: str, text: str) -> Any:
    """An env or flag value: a TOML value (``9464``, ``["5m", "1h"]``, ``{click = 1}``) or a string."""
    if key in _STRING_KEYS:
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


#: Words of [kafka] setting names whose values are always strings (never parsed as numbers).
_KAFKA_STRING_WORDS = frozenset(
    {
        "password",
        "username",
        "secret",
        "token",
        "file",
        "cafile",
        "certfile",
        "keyfile",
        "crlfile",
        "location",
        "mechanism",
        "protocol",
        "name",
        "id",
        "servers",
        "type",
        "algorithm",
    }
)


def _parse_kafka_text(key: str, text: str) -> Any:
    """A ``STREAMEVAL_KAFKA_<KEY>`` value: a string for names, secrets and paths (a password of
    digits stays a string), else a TOML value (``10000``, ``true``). Whole words of the name
    count: ``client_id`` is a string, ``enable_idempotence`` a boolean."""
    if _KAFKA_STRING_WORDS.intersection(key.split("_")):
        return text
    return _parse_text("kafka", text)


def read_toml(path: str) -> dict[str, Any]:
    """Read a TOML config file; every failure is a ConfigError naming the file."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML ({exc})") from None


def load_settings(
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Settings:
    """Build Settings from a TOML file, environment variables and flags (highest precedence).

    ``flags`` maps config keys (underscored) to raw values: strings as typed, or lists for
    repeatable flags. Unset flags must be left out. ``defaults`` (lowest precedence) replace
    the built-in defaults of some keys for one command (``demo`` settles in minutes).
    """
    raw: dict[str, Any] = dict(defaults or {})
    sources: dict[str, str] = {key: f"default of {key!r}" for key in raw}
    kafka: dict[str, Any] = {}
    if config_path:
        for key, value in read_toml(config_path).items():
            if key == "kafka" and isinstance(value, Mapping):
                kafka.update(value)
            raw[key] = value
            sources[key] = f"{config_path}: key {key!r}"
    for name, text in sorted((env or {}).items()):
        if name.startswith(KAFKA_ENV_PREFIX):
            kafka_key = name[len(KAFKA_ENV_PREFIX) :].lower()
            kafka[kafka_key] = _parse_kafka_text(kafka_key, text)
            raw["kafka"] = kafka
            sources.setdefault("kafka", f"environment variable {name}")
        elif name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower()
            raw[key] = _parse_text(key, text)
            sources[key] = f"environment variable {name}"
    for key, value in (flags or {}).items():
        if isinstance(value, str):
            value = _parse_text(key, value)
        raw[key] = value
        sources[key] = f"flag --{key.replace('_', '-')}"
    if kafka:
        raw["kafka"] = kafka
    return _build(raw, sources)


def _build(raw: Mapping[str, Any], sources: Mapping[str, str]) -> Settings:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        validator = _VALIDATORS.get(key)
        where = sources.get(key, f"key {key!r}")
        if validator is None:
            raise ConfigError(f"{where}: unknown configuration key {key!r}; known keys: {', '.join(KEYS)}")
        try:
            checked = validator(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: bad value for {key!r}: {exc}") from None
        if key == "events_topics":
            values["events_topics"], values["topic_types"] = checked
        else:
            values[key] = checked
    _dependent(values, sources)
    settings = Settings(**values)
    _check_combination(settings)
    return settings


#: keys whose values are checked against other keys' (group_by, grades), once those are known
_DEPENDENT: dict[str, Callable[[Any, tuple[str, ...], Mapping[str, float]], Any]] = {
    "labels_allow": lambda v, group_by, grades: _labels_allow(v, group_by),
    "labels_max_values": lambda v, group_by, grades: _labels_max_values(v, group_by),
    "input": InputMapping.parse,
}


def _dependent(values: dict[str, Any], sources: Mapping[str, str]) -> None:
    group_by = values.get("group_by", Settings.group_by)
    grades = values.get("grades") or Settings().grades
    for key, parse in _DEPENDENT.items():
        if key in values:
            try:
                values[key] = parse(values[key], group_by, grades)
            except ValueError as exc:
                where = sources.get(key, f"key {key!r}")
                named = str(exc).startswith(f"{key}.")  # the message names the key inside the table
                message = f"{where}: {exc}" if named else f"{where}: bad value for {key!r}: {exc}"
                raise ConfigError(message) from None


def _check_combination(s: Settings) -> None:
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
    topics = [s.impressions_topic, *s.events_topics]
    if len(set(topics)) != len(topics):
        raise ConfigError("impressions_topic: must differ from every topic in 'events_topics'")
    if s.dead_letter_topic in topics:
        raise ConfigError("dead_letter_topic: must differ from the input topics")
    if s.changelog_topic in (*topics, s.dead_letter_topic):
        raise ConfigError(
            f"group_id: its changelog topic {s.changelog_topic!r} is also an input or dead-letter topic"
        )
    if s.commit_interval < 0.1:
        raise ConfigError("commit_interval: must be at least 100ms")
    if s.shutdown_timeout < 1:
        raise ConfigError("shutdown_timeout: must be at least 1s")
