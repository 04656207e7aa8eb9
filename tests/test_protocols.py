"""The group protocol of the librdkafka consumer, from the broker's API versions."""

from __future__ import annotations

import struct

from streameval.kafka.protocols import (
    CLASSIC,
    CONSUMER,
    consumer_config,
    member_generation,
    protocol_for,
    unused,
)

CGH = 68  # ConsumerGroupHeartbeat


def test_kafka_4_gets_the_consumer_protocol() -> None:
    assert protocol_for({0: (0, 13), CGH: (0, 1)}) == CONSUMER


def test_the_early_access_version_of_3_7_to_3_9_and_older_brokers_get_the_classic_one() -> None:
    assert protocol_for({0: (0, 11), CGH: (0, 0)}) == CLASSIC
    assert protocol_for({0: (0, 9)}) == CLASSIC


def test_each_protocol_names_its_assignor_and_keeps_the_keys_it_uses() -> None:
    assert consumer_config(CONSUMER)["group.remote.assignor"] == "range"
    classic = consumer_config(CLASSIC)
    assert classic["partition.assignment.strategy"] == "range"
    assert classic["session.timeout.ms"] <= 30_000  # at most the consumer's max.poll.interval.ms
    table = {"group_instance_id": "a", "session_timeout_ms": 20_000, "linger_ms": 5}
    assert unused(CLASSIC, table) == set()
    assert unused(CONSUMER, table) >= {"group_instance_id", "session_timeout_ms"}


def test_the_member_and_generation_are_read_from_librdkafkas_group_metadata() -> None:
    # what confluent-kafka 2.12's consumer_group_metadata() gave in generation 2 of a group
    native = struct.pack("=i", 2)
    metadata = b"CGMDv2:" + native + b"g-gen-b51053\x00rdkafka-837f7e6a\x00\x01"
    assert member_generation(metadata) == ("rdkafka-837f7e6a", 2)
    # before the first join: no generation, no member id
    assert member_generation(b"CGMDv2:" + struct.pack("=i", -1) + b"x\x00\x00\x01") is None
    for other in (b"CGMDv3:" + metadata[7:], metadata[:9], b"CGMDv2:" + native + b"g", None, "text"):
        assert member_generation(other) is None
