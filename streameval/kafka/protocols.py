"""Which group protocol the librdkafka consumer joins with (``kafka_client = "confluent-kafka"``).

- ``consumer`` (KIP-848), where the broker has it on: Apache Kafka 4.0 or later, whose
  ConsumerGroupHeartbeat request has version 1 or more (3.7-3.9 have only an early-access
  version 0, off unless the operator turned it on). The broker's ``range`` assignor gives
  partition p of every co-partitioned input to one member; revocations are incremental.
- ``classic`` otherwise: the member joins as consumers always did, with librdkafka's ``range``
  assignor, which also gives partition p of every input with the same partition count to one
  member, but eagerly: every rebalance revokes every partition of every member (each first
  takes the checkpoint of what it gives up, in the listener, before it rejoins) and assigns
  them anew. A partition the next generation hands back to the same member keeps its state
  (:mod:`~streameval.kafka.kept`, which reads the member's generation with
  :func:`member_generation`); the others are restored from the changelog.

A consumer of the consumer protocol on a broker without it would wait for an assignment that
never comes, with nothing in its logs; so the choice is made from the broker's answer at
start-up, and said in the log.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from typing import Any

from streameval.config import Settings

log = logging.getLogger(__name__)

CONSUMER = "consumer"
CLASSIC = "classic"
#: Kafka's API key of ConsumerGroupHeartbeat (KIP-848)
CONSUMER_GROUP_HEARTBEAT = 68
#: [kafka] keys that only the classic protocol uses: under KIP-848 the broker owns the session
#: and heartbeat, and a restarted static member with the instance id of one killed is refused
#: (UNRELEASED_INSTANCE_ID, fatal in librdkafka) until its session expires -- it would wait as
#: long without it, so there the id only names the transactional id
CLASSIC_ONLY = frozenset({"session_timeout_ms", "heartbeat_interval_ms", "group_instance_id"})


def protocol_for(api_versions: Mapping[Any, tuple[int, int]]) -> str:
    """``consumer`` when the broker's versions of ConsumerGroupHeartbeat (API key 68: its
    lowest and highest) reach 1 -- Kafka 4.0, where the protocol is on by default -- else
    ``classic``."""
    versions = {int(key): span for key, span in api_versions.items()}
    span = versions.get(CONSUMER_GROUP_HEARTBEAT)
    return CONSUMER if span is not None and span[1] >= 1 else CLASSIC


def broker_protocol(settings: Settings) -> str:
    """The protocol for the brokers of ``settings``, asked with kafka-python's admin client."""
    from streameval.kafka.clients import make_admin

    admin = make_admin(settings)
    try:
        protocol = protocol_for(admin.api_versions())
    finally:
        admin.close()
    if protocol == CLASSIC:
        log.info(
            "the broker has no KIP-848 consumer protocol (Kafka 4.0+): the consumer joins with the "
            "classic protocol and eager range assignment; each rebalance restores every partition "
            "(README, Guarantees)"
        )
    return protocol


def consumer_config(protocol: str) -> dict[str, Any]:
    """librdkafka's settings of the group protocol."""
    if protocol == CONSUMER:
        return {"group.protocol": CONSUMER, "group.remote.assignor": "range"}
    # the session and heartbeat of kafka-python's consumer (clients.py); librdkafka's 45 s
    # session would also pass its max.poll.interval.ms, which it refuses
    return {
        "group.protocol": CLASSIC,
        "partition.assignment.strategy": "range",
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 3_000,
    }


def unused(protocol: str, table: Mapping[str, Any]) -> set[str]:
    """The ``[kafka]`` keys the consumer of ``protocol`` leaves out (said once in the log)."""
    if protocol == CLASSIC:
        return set()
    ignored = sorted(k for k in table if k in CLASSIC_ONLY)
    if ignored:
        log.info("kafka: %s not used by the consumer with kafka_client = confluent-kafka (KIP-848)", ignored)
    return set(CLASSIC_ONLY)


_GROUP_METADATA = b"CGMDv2:"


def member_generation(metadata: Any) -> tuple[str, int] | None:
    """The member id and generation in confluent-kafka's group metadata (librdkafka's
    serialisation: ``CGMDv2:``, the generation id as a native int32, the group id and the member
    id, each ending in a NUL byte, then the static member's id); None for another layout, or
    outside a generation."""
    head = len(_GROUP_METADATA)
    if not isinstance(metadata, bytes) or not metadata.startswith(_GROUP_METADATA):
        return None
    parts = metadata[head + 4 :].split(b"\0", 2)
    if len(metadata) < head + 4 or len(parts) < 3:
        return None
    (generation,) = struct.unpack_from("=i", metadata, head)
    return (parts[1].decode("utf-8", "replace"), generation) if generation >= 0 and parts[1] else None
