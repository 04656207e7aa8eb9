"""The group protocol of the librdkafka consumer, from the broker's API versions."""

from __future__ import annotations

from streameval.kafka.protocols import CLASSIC, CONSUMER, consumer_config, protocol_for, unused

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
