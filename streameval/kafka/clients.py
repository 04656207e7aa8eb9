"""Kafka clients built from Settings, and the start-up checks on the topics.

The ``[kafka]`` table is passed to every client (security settings and the like); secrets in it
are never logged. Offsets are committed by the loop, never automatically.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import (
    AuthorizationError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
)

from streameval.config import Settings
from streameval.errors import ConfigError, InputError
from streameval.kafka.assignor import CooperativeCopartitioned
from streameval.kafka.client import GroupConsumer

log = logging.getLogger(__name__)

CLIENT_ID = "streameval"
#: how long the broker holds a fetch whose partitions have nothing new (500 ms by default). A
#: partition resumed meanwhile (flow control, the end of a restore) is only fetched after that
#: answer: at the end of a backlog the loop waited up to this long for the records of a paused
#: partition (README, Performance)
FETCH_MAX_WAIT_MS = 100
# Settings only one kind of client accepts; the [kafka] table is filtered per client.
# PRODUCER_ONLY holds for librdkafka's producer too (rdconfig.py).
_CONSUMER_ONLY = {
    "fetch_max_wait_ms",
    "fetch_min_bytes",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "max_poll_records",
    "group_instance_id",
    "isolation_level",
    "auto_offset_reset",
    "enable_incremental_fetch_sessions",
    "check_crcs",
}
PRODUCER_ONLY = {
    "acks",
    "compression_type",
    "linger_ms",
    "batch_size",
    "max_request_size",
    "enable_idempotence",
    "delivery_timeout_ms",
    "retries",
    "transaction_timeout_ms",
}


def _common(settings: Settings) -> dict[str, Any]:
    return {"bootstrap_servers": settings.bootstrap_servers.split(","), "client_id": CLIENT_ID}


def _table(settings: Settings, exclude: set[str]) -> dict[str, Any]:
    return {k: v for k, v in settings.kafka.items() if k not in exclude}


def _connect(kind: str, factory: Any, settings: Settings, **config: Any) -> Any:
    try:
        return factory(**config)
    except KafkaTimeoutError:
        raise InputError(
            f"bootstrap_servers: cannot reach Kafka at {settings.bootstrap_servers} ({kind}); check the "
            "address and the [kafka] security settings"
        ) from None
    except (KafkaConfigurationError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"kafka: a setting in the [kafka] table is not accepted by the {kind}: {exc}"
        ) from None
    except KafkaError as exc:
        raise InputError(f"cannot create the Kafka {kind}: {exc}") from None


def make_consumer(settings: Settings) -> GroupConsumer:
    assignor = CooperativeCopartitioned(settings.repartition)
    config = {
        **_common(settings),
        "group_id": settings.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        # whole partition numbers, kept across rebalances (README, Guarantees)
        "partition_assignment_strategy": [assignor],
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 3_000,
        # also the rebalance timeout: how long the broker waits for members to rejoin. The loop
        # polls every 200 ms, so 30 s is ample and bounds a stalled rebalance (default 300 s)
        "max_poll_interval_ms": 30_000,
        "max_poll_records": 2_000,
        "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
        # how soon a change of the input topics (partitions added, a topic deleted) is seen: it
        # triggers a rebalance, whose co-partitioning check stops the daemon (default 5 min)
        "metadata_max_age_ms": 30_000,
        # offsets are committed in the checkpoint transactions; read_committed also makes the
        # committed-offset fetch wait for a transaction still open (KIP-447), so a new owner
        # never starts from offsets its restored state does not cover
        "isolation_level": "read_committed",
        **_table(settings, PRODUCER_ONLY),
    }
    consumer: GroupConsumer = _connect("consumer", GroupConsumer, settings, **config)
    assignor.owned = consumer.assignment
    return consumer


#: Consumer settings that belong to group membership; the restore consumer has no group.
_GROUP_ONLY = {"group_instance_id", "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"}


def restore_consumer_config(settings: Settings) -> dict[str, Any]:
    """The consumer that reads the changelog back: no group, committed transactions only."""
    return {
        **_common(settings),
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": 8 * 1024 * 1024,
        **_table(settings, PRODUCER_ONLY | _GROUP_ONLY),
        "isolation_level": "read_committed",
    }


def transactional_id(settings: Settings) -> str:
    """Stable across restarts with static membership (a restart then aborts the transaction
    its predecessor left open at once); unique per process otherwise."""
    instance = settings.kafka.get("group_instance_id") or uuid.uuid4().hex[:12]
    return f"streameval-{settings.group_id}-{instance}"


#: Kafka's default transaction.max.timeout.ms (15 minutes), for a broker that does not list it
BROKER_MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: the transaction timeout of short commit intervals: a transaction left open by a dead
#: instance blocks readers this long at most
MIN_TRANSACTION_TIMEOUT_MS = 30_000


def transaction_timeout_ms(settings: Settings, broker_max_ms: int) -> int:
    """The producer's ``transaction_timeout_ms`` for ``commit_interval``, or a ConfigError
    naming ``commit_interval`` when the broker allows no timeout long enough.

    A checkpoint's transaction opens at the first send after the last commit (a dead-letter
    record, or the checkpoint's own changelog entries) and commits at the next checkpoint: one
    ``commit_interval`` later, plus a rebalance it waits for (at most ``max_poll_interval_ms``,
    30 s) and its own duration. So the timeout is 30 s, or twice the interval plus 20 s when
    that is longer; an explicit ``[kafka] transaction_timeout_ms`` must cover the interval."""
    interval_ms = settings.commit_interval * 1000
    explicit = settings.kafka.get("transaction_timeout_ms")
    if explicit is not None:
        if not isinstance(explicit, int) or explicit <= interval_ms:
            raise ConfigError(
                f"commit_interval: {settings.commit_interval:g} s is not shorter than the [kafka] "
                f"transaction_timeout_ms ({explicit}): the broker would abort every checkpoint's "
                "transaction before it commits; leave transaction_timeout_ms out (it is chosen from "
                "commit_interval) or shorten commit_interval"
            )
        return explicit
    wanted = max(MIN_TRANSACTION_TIMEOUT_MS, int(2 * interval_ms + 20_000))
    if wanted > broker_max_ms:
        longest = (broker_max_ms - 20_000) / 2000
        raise ConfigError(
            f"commit_interval: {settings.commit_interval:g} s needs a transaction timeout of "
            f"{wanted / 1000:g} s, more than the broker allows (transaction.max.timeout.ms = "
            f"{broker_max_ms}); use a commit_interval of at most {longest:g} s, or raise the "
            "broker's transaction.max.timeout.ms"
        )
    return wanted


def make_producer(
    settings: Settings, txn_id: str, timeout_ms: int = MIN_TRANSACTION_TIMEOUT_MS
) -> KafkaProducer:
    """The transactional producer of checkpoints and dead-letter records; ``timeout_ms`` from
    :func:`transaction_timeout_ms`."""
    config = {
        **_common(settings),
        "acks": "all",
        "linger_ms": 20,
        # A checkpoint sends its changelog records in one burst: large batches mean one request
        # (and one wake-up of the sender thread) per few thousand records, not per thirty.
        # Below the broker's default message.max.bytes (1 MiB).
        "batch_size": 512 * 1024,
        # a send waits this long at most for metadata or buffer space (a missing topic); with the
        # checkpoint's own bounds it keeps the loop well inside max_poll_interval_ms (30 s)
        "max_block_ms": 5_000,
        **_table(settings, _CONSUMER_ONLY),
        "transaction_timeout_ms": timeout_ms,
        "transactional_id": txn_id,
    }
    return _connect("producer", KafkaProducer, settings, **config)


def make_plain_producer(settings: Settings, **config: Any) -> KafkaProducer:
    """A producer without transactions (``streameval simulate``), with the ``[kafka]`` table."""
    return _connect(
        "producer",
        KafkaProducer,
        settings,
        **{**_common(settings), **_table(settings, _CONSUMER_ONLY), **config},
    )


def make_admin(settings: Settings, **config: Any) -> KafkaAdminClient:
    """An admin client with the ``[kafka]`` table; ``config`` overrides both."""
    exclude = _CONSUMER_ONLY | PRODUCER_ONLY
    return _connect(
        "admin client",
        KafkaAdminClient,
        settings,
        **{**_common(settings), **_table(settings, exclude), **config},
    )


def failure(exc: KafkaError) -> str:
    """A broker's refusal in a line: a missing right said plainly, else the error (kafka-python's
    text of a failed request repeats the whole request and response, so it is cut)."""
    if isinstance(exc, AuthorizationError):
        return f"this client is not authorized to do that ({type(exc).__name__})"
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:300] + " ..."
