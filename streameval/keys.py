"""How a configuration key is described: once, beside its field in
:class:`~streameval.config.Settings`; the flags, their ``--help``, the environment and the README's
Configuration table read the description."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from streameval.errors import ConfigError
from streameval.scoring.spec import MetricSpec
from streameval.validate import Window, format_duration, parse_duration

KAFKA, INPUTS, DEFINITIONS, WINDOWS, HTTP = "Kafka", "inputs", "definitions", "windows and time", "HTTP"


@dataclass(frozen=True)
class Key:
    """The description of one configuration key, beside its field's type and default."""

    group: str  # its group in --help: KAFKA, INPUTS, DEFINITIONS, WINDOWS or HTTP
    help: str  # one line, for --help and the README
    parse: Callable[[Any], Any]  # raw value -> typed value, or ValueError
    #: the default as --help and the README show it, when the field's value does not say it well
    shown: str | None = None
    #: env and flag values stay raw strings (else they are read as TOML values)
    string: bool = False
    #: shown as a duration
    duration: bool = False
    #: the README's name for it, when not the key itself (a TOML table)
    title: str | None = None
    #: given by a flag too (``[kafka]`` is not: its settings come from the file or the environment)
    flag: bool = True
    #: for a list: the repeatable flag that gives one item (the items given replace the list)
    each: str | None = None


def key(default: Any, description: Key) -> Any:
    """A Settings field that is a configuration key. Mutable defaults are made per instance."""
    if isinstance(default, Mapping):
        frozen = MappingProxyType(dict(default))
        return field(default_factory=lambda: frozen, metadata={"key": description})
    if callable(default):
        return field(default_factory=default, metadata={"key": description})
    return field(default=default, metadata={"key": description})


def duration_key(group: str, text: str) -> Key:
    return Key(group, text, parse_duration, duration=True)


def default_text(description: Key, default: Any, override: Any = None) -> str:
    """A key's default as --help and the README show it (TOML, durations spelled out); an
    ``override`` is a command's own default, as its flag would be given."""
    if override is not None:
        return ", ".join(override) if isinstance(override, list) else str(override)
    if description.shown is not None:
        return description.shown
    return _toml(default, description.duration)


def _toml(value: Any, duration: bool = False) -> str:
    if duration:
        return format_duration(value)
    if isinstance(value, Window):
        return f'"{value.name}"'
    if isinstance(value, MetricSpec):
        return f'"{value}"'
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else _toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _markdown(text: str) -> str:
    """Plain help text as Markdown shows it literally."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("__", "\\_\\_")


def markdown_table(described: Mapping[str, tuple[Key, Any]]) -> str:
    """The README's Configuration table: key -> (its description, its default)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for name, (description, default) in described.items():
        title = ", ".join(f"`{part.strip()}`" for part in (description.title or name).split(","))
        lines.append(f"| {title} | `{default_text(description, default)}` | {_markdown(description.help)} |")
    return "\n".join(lines)


def parse_text(description: Key | None, text: str) -> Any:
    """An env or flag value: a TOML value (``9464``, ``["5m", "1h"]``, ``{click = 1}``) or a string
    (always, for a key whose description says so)."""
    if description is not None and description.string:
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


def parse_kafka_text(key: str, text: str) -> Any:
    """A ``STREAMEVAL_KAFKA_<KEY>`` value: a string for names, secrets and paths (a password of
    digits stays a string), else a TOML value (``10000``, ``true``). Whole words of the name
    count: ``client_id`` is a string, ``enable_idempotence`` a boolean."""
    if _KAFKA_STRING_WORDS.intersection(key.split("_")):
        return text
    return parse_text(None, text)


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


ENV_PREFIX = "STREAMEVAL_"
KAFKA_ENV_PREFIX = "STREAMEVAL_KAFKA_"


def read_env(
    env: Mapping[str, str],
    known: Mapping[str, Key],
    raw: dict[str, Any],
    kafka: dict[str, Any],
    sources: dict[str, str],
) -> None:
    """``STREAMEVAL_<KEY>`` into ``raw``, ``STREAMEVAL_KAFKA_<SETTING>`` into the ``[kafka]`` table;
    where each came from into ``sources``."""
    for name, text in sorted(env.items()):
        # STREAMEVAL_KAFKA_CLIENT is the key kafka_client, not a [kafka] setting "client"
        if name.startswith(KAFKA_ENV_PREFIX) and name[len(ENV_PREFIX) :].lower() not in known:
            kafka_key = name[len(KAFKA_ENV_PREFIX) :].lower()
            kafka[kafka_key] = parse_kafka_text(kafka_key, text)
            raw["kafka"] = kafka
            sources.setdefault("kafka", f"environment variable {name}")
        elif name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower()
            raw[key] = parse_text(known.get(key), text)
            sources[key] = f"environment variable {name}"
