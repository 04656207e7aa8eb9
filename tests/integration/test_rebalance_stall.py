"""The rebalance that never ended (kafka-python 3.0.12), and the daemon's workaround for it.

Two bare consumers in one group, polled as the daemon polls (200 ms, other work between polls).
The leader is made to rejoin first, so its JoinGroup waits for the other member, which learns
of the rebalance only at its next heartbeat: the leader's poll gives up, and the join finishes
on the client's network thread between two polls. Without ``keep_join_awaited`` the next poll
dropped that result and sent a new JoinGroup, starting a new rebalance every ~3 s for as long
as it was watched (the leader never took its assignment). With it, the leader rejoins once.
"""

from __future__ import annotations

import time
import uuid

from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic

from streameval.kafka.compat import keep_join_awaited


def test_a_leader_that_rejoins_first_takes_its_assignment(bootstrap: str, admin: KafkaAdminClient) -> None:
    topic, group = f"stall-{uuid.uuid4().hex[:8]}", f"stall-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 4, 1)], wait_for_metadata=True)

    def member() -> KafkaConsumer:
        return KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=3_000,
            max_poll_interval_ms=30_000,
        )

    def poll(consumer: KafkaConsumer) -> None:
        consumer.poll(timeout_ms=200)
        keep_join_awaited(consumer)
        time.sleep(0.05)  # the daemon's work between polls

    leader = member()
    other = None
    try:
        deadline = time.monotonic() + 30
        while not leader.assignment():
            assert time.monotonic() < deadline, "the first member got no assignment"
            poll(leader)
        other = member()
        deadline = time.monotonic() + 30
        while not (other.assignment() and leader.assignment() and len(leader.assignment()) < 4):
            assert time.monotonic() < deadline, "the two members did not share the partitions"
            poll(leader)
            poll(other)
        leader._coordinator.request_rejoin()  # as a leader whose subscription metadata changed
        generations = []
        deadline = time.monotonic() + 25
        while leader._coordinator.need_rejoin() or other._coordinator.need_rejoin():
            assert time.monotonic() < deadline, (
                f"still rebalancing after 25 s; generations seen {sorted(set(generations))}"
            )
            poll(leader)
            poll(other)
            generations.append(leader._coordinator._generation.generation_id)
        settled = leader._coordinator._generation.generation_id
        for _ in range(40):  # 6 s, two heartbeat intervals: no new rebalance starts
            poll(leader)
            poll(other)
        assert leader._coordinator._generation.generation_id == settled
        assert len(leader.assignment()) + len(other.assignment()) == 4
    finally:
        leader.close()
        if other is not None:
            other.close()
        admin.delete_topics([topic])
