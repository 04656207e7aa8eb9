"""Configuration: one frozen :class:`Settings`, built once at the edge and passed down.

Precedence, highest first: command-line flags (``--key-with-dashes``), environment variables
(``STREAMEVAL_<KEY>``; the ``[kafka]`` table from ``STREAMEVAL_KAFKA_<KEY>``), the TOML file
(``--config``, read by :func:`~streameval.keys.read_toml`), the defaults below. This module is
the only reader of files, environment and flags for configuration. Every problem raises
:class:`ConfigError` naming the key.

Each key is described once, as a field of :class:`Settings` with its :class:`Key` (help group,
one line of help, validator): the flags and their ``--help``, the environment and the README's
Configuration table (:func:`markdown_table`, held to the README by a test) all come from it
(:mod:`streameval.keys`); the validators are in :mod:`streameval.validate`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from streameval import keys, validate
from streameval.errors import ConfigError
from streameval.keys import DEFINITIONS, HTTP, INPUTS, KAFKA, WINDOWS, Key, read_toml
from streameval.keys import duration_key as _duration
from streameval.keys import key as _key
from streameval.mapping import InputMapping
from streameval.scoring.spec import METRIC_NAMES, MetricSpec
from streameval.validate import RESERVED_LABELS, Window, format_duration, parse_duration

__all__ = [
    "KEYS",
    "RESERVED_LABELS",
    "Key",
    "Settings",
    "Window",
    "format_duration",
    "load_settings",
    "parse_duration",
]

#: Kafka client settings whose values are secrets: never logged, never exported.
SECRET_KAFKA_KEYS = frozenset(
    {"sasl_plain_password", "ssl_password", "sasl_oauth_token_provider", "ssl_keyfile_password"}
)


@dataclass(frozen=True)
class Settings:
    """Every configuration key (README, section Configuration), validated. Durations are float seconds."""

    bootstrap_servers: str = _key(
        "localhost:9092", Key(KAFKA, "Kafka brokers, host:port[,host:port...]", validate.string, string=True)
    )
    group_id: str = _key(
        "streameval",
        Key(
            KAFKA,
            "consumer group; the state lives in the topic <group_id>-changelog",
            validate.string,
            string=True,
        ),
    )
    impressions_topic: str = _key(
        "impressions", Key(KAFKA, "topic of impressions (ranked lists served)", validate.string, string=True)
    )
    events_topics: tuple[str, ...] = _key(
        ("clicks", "purchases"),
        Key(
            KAFKA,
            'engagement topics; a table {clicks = "click"} also gives each topic the type of its records '
            "that carry none (flag: --events-topic, repeatable; it replaces the list)",
            validate.events_topics,
            each="--events-topic",
        ),
    )
    #: topic -> event type given to records of that topic that carry no ``type`` (from events_topics)
    topic_types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    dead_letter_topic: str = _key(
        "streameval.dlq",
        Key(
            KAFKA,
            "topic that receives rejected records, with the reason in headers",
            validate.string,
            string=True,
        ),
    )
    metrics_port: int = _key(
        9464, Key(HTTP, "port of /metrics, /healthz, /readyz, / and /api/summary", validate.int_in(0, 65535))
    )
    metrics_host: str = _key(
        "0.0.0.0", Key(HTTP, "address the HTTP server binds", validate.string, string=True)
    )
    kafka: Mapping[str, Any] = _key(
        {},
        Key(
            KAFKA,
            "passed to the Kafka clients (security_protocol, sasl_mechanism, sasl_plain_username, "
            "sasl_plain_password, ssl_cafile, ...); STREAMEVAL_KAFKA_<KEY> for secrets; never logged",
            validate.kafka_table,
            shown="empty",
            title="[kafka]",
            flag=False,
        ),
    )
    metrics: tuple[MetricSpec, ...] = _key(
        (MetricSpec("map", 10), MetricSpec("ndcg", 10), MetricSpec("recall", 10), MetricSpec("mrr", 10)),
        Key(DEFINITIONS, f"metrics as name@k; names: {', '.join(METRIC_NAMES)}", validate.metrics),
    )
    ap_denominator: str = _key(
        "min_g_k",
        Key(DEFINITIONS, "AP denominator: min_g_k, g or hits", validate.choice("min_g_k", "g", "hits")),
    )
    no_relevant: str = _key(
        "skip",
        Key(
            DEFINITIONS,
            "a query with no relevant item: skip it, or count it as zero",
            validate.choice("skip", "zero"),
        ),
    )
    grades: Mapping[str, float] = _key(
        {"click": 1.0, "purchase": 2.0},
        Key(DEFINITIONS, "event type to grade (>= 0), a TOML table", validate.grades),
    )
    min_grade: float = _key(
        1.0,
        Key(
            DEFINITIONS,
            "grade at which an item counts as relevant (> 0, and some type must reach it)",
            validate.number,
        ),
    )
    ndcg_gain: str = _key(
        "exp",
        Key(
            DEFINITIONS,
            "NDCG gain of a grade g: exp (2^g - 1) or linear (g)",
            validate.choice("exp", "linear"),
        ),
    )
    horizon: float = _key(
        1800.0,
        _duration(
            DEFINITIONS, "attribution horizon: events later than this after the impression do not count"
        ),
    )
    horizons: Mapping[str, float] = _key(
        {},
        Key(
            DEFINITIONS, 'per-type horizons, a TOML table, e.g. {purchase = "24h"}', validate.durations_table
        ),
    )
    unshown_items: str = _key(
        "count",
        Key(
            DEFINITIONS,
            "relevant items the list did not show: count (recall-like) or ignore",
            validate.choice("count", "ignore"),
        ),
    )
    group_by: tuple[str, ...] = _key(
        ("model", "surface"), Key(DEFINITIONS, "impression fields that become labels", validate.group_by)
    )
    max_groups: int = _key(
        1000,
        Key(
            DEFINITIONS,
            "label cardinality cap; later groups fold into __other__",
            validate.int_in(1, 1_000_000),
        ),
    )
    labels_allow: Mapping[str, tuple[str, ...]] = _key(
        {},
        Key(
            DEFINITIONS,
            'glob patterns per label, a TOML table, e.g. {model = ["control", "candidate-*"]}; other values '
            "fold into __other__ (README, Your logs)",
            validate.table,
        ),
    )
    labels_max_values: Mapping[str, int] = _key(
        {},
        Key(
            DEFINITIONS,
            "distinct values kept per label, a TOML table, e.g. {surface = 50}; later ones fold into "
            "__other__",
            validate.table,
        ),
    )
    control: Mapping[str, str] = _key(
        {"model": "control"},
        Key(DEFINITIONS, "the control group's labels, a TOML table (README, Quick start)", validate.table),
    )
    detect_min_effect: float = _key(
        0.05,
        Key(
            DEFINITIONS, "relative drop the detectors look for (README, Regression detectors)", validate.share
        ),
    )
    detect_arl: float = _key(
        1000 * 86400.0, _duration(DEFINITIONS, "average event time between a detector's false alarms")
    )
    detect_reference: float = _key(86400.0, _duration(DEFINITIONS, "how far back a group's own reference is"))
    input: InputMapping = _key(
        InputMapping,
        Key(
            INPUTS,
            "where the fields are in records of another shape: a TOML table, usually [input.impressions] "
            "and [input.events] in --config (README, Your logs)",
            validate.table,
            shown="none",
            title="[input.impressions], [input.events]",
        ),
    )
    max_future: float = _key(
        300.0,
        _duration(
            INPUTS,
            "a record whose event time is further ahead of the clock than this is rejected (ts_out_of_range)",
        ),
    )
    windows: tuple[Window, ...] = _key(
        (Window("5m", 300.0), Window("1h", 3600.0), Window("24h", 86400.0)),
        Key(WINDOWS, "sliding event-time windows", validate.windows),
    )
    allowed_lateness: float = _key(
        10.0, _duration(WINDOWS, "how far the watermark trails the newest event time")
    )
    orphan_ttl: float = _key(300.0, _duration(WINDOWS, "how long an event waits for its impression"))
    commit_interval: float = _key(
        5.0,
        _duration(
            KAFKA,
            "time between checkpoints of state and offsets; the transactions' timeout follows from it "
            "(README, Guarantees), so at most 7m20s on a broker with the default transaction.max.timeout.ms",
        ),
    )
    shutdown_timeout: float = _key(
        20.0, _duration(KAFKA, "longest shutdown after SIGTERM/SIGINT, final checkpoint included")
    )
    kafka_client: str = _key(
        "kafka-python",
        Key(
            KAFKA,
            "the client library of streameval run's consumer and checkpoint producer: kafka-python, or "
            "confluent-kafka (librdkafka, faster; pip install 'streameval[confluent]'; KIP-848 on Kafka "
            "4.0+, else the classic protocol; README, Guarantees)",
            validate.choice("kafka-python", "confluent-kafka"),
        ),
    )
    changelog_replication_factor: int = _key(
        1,
        Key(
            KAFKA,
            "replication factor of a changelog or repartition topic the daemon creates (use 3 on a real "
            "cluster)",
            validate.int_in(1, 32767),
        ),
    )
    repartition: tuple[str, ...] = _key(
        (),
        Key(
            KAFKA,
            "events topics that are not keyed by query_id or not co-partitioned with the impressions: the "
            "daemon re-keys them through <group_id>-repartition-<topic> (README, Repartitioning; flag: "
            "--repartition TOPIC, repeatable)",
            validate.topic_list,
            each="--repartition",
        ),
    )
    repartition_retention: float = _key(
        7 * 86400.0,
        _duration(KAFKA, "retention of the repartition topics the daemon creates (retention.ms)"),
    )

    @property
    def changelog_topic(self) -> str:
        """The compacted topic that holds the partitions' state, named after the group."""
        return f"{self.group_id}-changelog"

    @property
    def minutes_topic(self) -> str:  # the partitions' complete minutes (README, Regression detectors)
        return f"{self.group_id}-minutes"

    def repartition_topic(self, topic: str) -> str:
        """The topic the daemon re-keys ``topic`` into, named after the group."""
        return f"{self.group_id}-repartition-{topic}"

    @property
    def join_topics(self) -> tuple[str, ...]:
        """The topics the join reads, co-partitioned: the impressions, then each events topic or
        the topic it is re-keyed into."""
        events = (self.repartition_topic(t) if t in self.repartition else t for t in self.events_topics)
        return (self.impressions_topic, *events)

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


#: Every configuration key and its description, in the order of the README table.
KEYS: dict[str, Key] = {f.name: f.metadata["key"] for f in fields(Settings) if "key" in f.metadata}


def default_text(key: str, overrides: Mapping[str, Any] | None = None) -> str:
    """A key's default as --help and the README show it."""
    return keys.default_text(KEYS[key], getattr(Settings(), key), (overrides or {}).get(key))


def markdown_table() -> str:
    """The README's Configuration table."""
    defaults = Settings()
    return keys.markdown_table({k: (d, getattr(defaults, k)) for k, d in KEYS.items()})


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
    keys.read_env(env or {}, KEYS, raw, kafka, sources)
    for key, value in (flags or {}).items():
        if isinstance(value, str):
            value = keys.parse_text(KEYS.get(key), value)
        raw[key] = value
        sources[key] = f"flag --{key.replace('_', '-')}"
    if kafka:
        raw["kafka"] = kafka
    return _build(raw, sources)


def _build(raw: Mapping[str, Any], sources: Mapping[str, str]) -> Settings:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        description = KEYS.get(key)
        where = sources.get(key, f"key {key!r}")
        if description is None:
            raise ConfigError(f"{where}: unknown configuration key {key!r}; known keys: {', '.join(KEYS)}")
        try:
            checked = description.parse(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: bad value for {key!r}: {exc}") from None
        if key == "events_topics":
            values["events_topics"], values["topic_types"] = checked
        else:
            values[key] = checked
    _dependent(values, sources)
    settings = Settings(**values)
    validate.check_combination(settings)
    return settings


#: keys whose values are checked against other keys' (group_by, grades), once those are known
_DEPENDENT: dict[str, Callable[[Any, tuple[str, ...], Mapping[str, float]], Any]] = {
    "labels_allow": lambda v, group_by, grades: validate.labels_allow(v, group_by),
    "labels_max_values": lambda v, group_by, grades: validate.labels_max_values(v, group_by),
    "control": lambda v, group_by, grades: validate.control(v, group_by),
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
