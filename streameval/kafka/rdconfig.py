"""The ``[kafka]`` table (kafka-python's names) as librdkafka's settings, for the confluent-kafka
backend (:mod:`~streameval.kafka.librdkafka`, :mod:`~streameval.kafka.rdproducer`)."""

from __future__ import annotations

from typing import Any

from streameval.config import Settings
from streameval.kafka import protocols
from streameval.kafka.clients import CLIENT_ID

#: [kafka] keys (kafka-python's names) whose librdkafka name is not the key with dots
_RENAMED = {
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_keyfile_password": "ssl.key.password",
    "fetch_max_wait_ms": "fetch.wait.max.ms",
    "max_request_size": "message.max.bytes",
    "request_timeout_ms": "socket.timeout.ms",
}
#: [kafka] keys of kafka-python that librdkafka has no use for (dropped)
_KAFKA_PYTHON_ONLY = {"max_poll_records", "enable_incremental_fetch_sessions", "api_version", "max_block_ms"}
CONSUMER_ONLY = {
    "fetch_max_wait_ms",
    "fetch_min_bytes",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "max_poll_interval_ms",
    "group_instance_id",
    "isolation_level",
    "auto_offset_reset",
    "check_crcs",
}

#: [kafka] keys the producer leaves out
PRODUCER_EXCLUDE = CONSUMER_ONLY | protocols.CLASSIC_ONLY


def librdkafka_config(settings: Settings, exclude: set[str]) -> dict[str, Any]:
    """The ``[kafka]`` table (kafka-python's names) in librdkafka's: ``sasl_plain_username`` ->
    ``sasl.username`` and the others of ``_RENAMED``, kafka-python's own settings dropped, any
    other key with dots for underscores (``security_protocol`` -> ``security.protocol``), so a
    librdkafka setting can be given as well (``socket_keepalive_enable``)."""
    out: dict[str, Any] = {}
    for key, value in settings.kafka.items():
        if key in exclude or key in _KAFKA_PYTHON_ONLY:
            continue
        if key == "ssl_check_hostname":
            out["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
            continue
        name = _RENAMED.get(key, key.replace("_", "."))
        out[name] = value
    return out


def common_config(settings: Settings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.bootstrap_servers, "client.id": CLIENT_ID}
