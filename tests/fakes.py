"""Fakes of the Kafka clients the consumer loop uses (the protocols of streameval/kafka/client.py),
for unit tests of its decisions.

They keep what a broker would: a log per input partition, committed offsets, a changelog per
partition that only committed transactions reach. No network; a rebalance happens when a test
asks for one, inside the next poll, as kafka-python calls the listener there."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from kafka import TopicPartition

from streameval import state
from streameval.kafka.checkpoint import CheckpointFailed
from streameval.kafka.client import Listed


class Message(NamedTuple):
    key: bytes | None
    value: bytes | None
    offset: int
    timestamp: int


class Cluster:
    """What the broker holds."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics  # topic -> partitions
        self.logs: dict[TopicPartition, list[Message]] = defaultdict(list)
        self.committed: dict[TopicPartition, int] = {}
        self.changelog: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)

    def produce(
        self, topic: str, partition: int, value: bytes, key: bytes | None = None, ts_ms: int = 0
    ) -> None:
        log = self.logs[TopicPartition(topic, partition)]
        log.append(Message(key, value, len(log), ts_ms))


class FakeConsumer:
    def __init__(self, cluster: Cluster, max_records: int = 500) -> None:
        self.cluster = cluster
        self.max_records = max_records
        self.listener: Any = None
        self.assigned: set[TopicPartition] = set()
        self.paused: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.next_rebalance: set[TopicPartition] | None = None
        self.lose_next = False
        self.end_offsets_fail = False
        self.closed = False
        #: partitions whose fetches bring nothing for now (as during a rebalance or a slow fetch)
        self.stalled: set[TopicPartition] = set()
        #: eager rebalances (as librdkafka's classic protocol): each revokes the whole assignment
        #: and assigns the next generation's whole assignment
        self.eager = False
        self.generation = ("member-1", 0)
        self.generations_missed = 0  # by the next rebalance (as a member too slow to rejoin)
        self.rejoin_as: str | None = None  # the member id the next rebalance gives (its session ended)

    # what the loop calls
    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.listener = listener

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.positions[tp] = 0

    def seek_to_end(self, tp: TopicPartition) -> None:
        self.positions[tp] = len(self.cluster.logs[tp])

    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return {tp: 0 for tp in tps}

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        if self.end_offsets_fail:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError("no answer")
        return {tp: len(self.cluster.logs[tp]) for tp in tps}

    def request_end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> Listed:
        return Listed(self.end_offsets(tps, timeout_ms))

    def highwater(self, tp: TopicPartition) -> int | None:
        return None

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.cluster.topics.get(topic)
        return set(range(n)) if n else None

    def group_metadata(self) -> Any:
        return None

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None:
        self.closed = True

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Message]]:
        if self.lose_next:
            self.lose_next = False
            self.listener.on_partitions_lost(set(self.assigned))
            self.assigned = set()
            return {}
        if self.next_rebalance is not None:
            target, self.next_rebalance = self.next_rebalance, None
            revoked = set(self.assigned) if self.eager else self.assigned - target
            if revoked:
                self.listener.on_partitions_revoked(revoked)
            member, generation = self.generation
            self.generation = (self.rejoin_as or member, generation + 1 + self.generations_missed)
            self.generations_missed, self.rejoin_as = 0, None
            self.assigned = set(target)
            self.listener.on_partitions_assigned(target if self.eager else target - revoked)
            return {}
        out = {}
        for tp in sorted(self.assigned):
            if tp in self.paused or tp in self.stalled:
                continue
            log = self.cluster.logs[tp]
            at = self.positions.get(tp, 0)
            batch = log[at : at + self.max_records]
            if batch:
                out[tp] = batch
                self.positions[tp] = at + len(batch)
        return out

    def poll_round(self, timeout_ms: int, broker_silent: bool) -> dict[TopicPartition, list[Message]]:
        return self.poll(timeout_ms)

    def rejoining(self) -> bool:
        return False

    def known_position(self, tp: TopicPartition) -> int | None:
        return None

    def eager_generation(self) -> tuple[str, int] | None:
        return self.generation if self.eager else None

    # what the tests call
    def rebalance(self, assignment: set[TopicPartition]) -> None:
        """The next poll's rebalance ends with this assignment."""
        self.next_rebalance = assignment


class FakeTransactions:
    """A transactional producer: what it sends reaches the cluster only on commit."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.open = False
        self.bytes_sent = 0
        self.timeout = 8.0
        self.pending_changelog: list[tuple[int, bytes, bytes | None]] = []
        self.pending_dead_letters: list[bytes | None] = []
        self.pending_writes: list[tuple[str, int, bytes | None, bytes | None, int]] = []
        self.dead_letters: list[bytes | None] = []
        self.commits: list[dict[Any, Any]] = []
        self.aborts = 0
        self.fail_next_commit = False

    def send(
        self, topic: str, value: bytes | None, key: bytes | None, partition: int | None = None, **kwargs: Any
    ) -> None:
        self.open = True
        if partition is None:  # a dead-letter record
            self.pending_dead_letters.append(value)
        else:  # a record the repartition stage writes
            self.pending_writes.append((topic, partition, key, value, kwargs.get("timestamp_ms") or 0))
        self.bytes_sent += len(value or b"")

    def send_dead_letter(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, limit: int
    ) -> None:
        self.send(topic, value, key, headers=headers)

    def send_many(self, topic: str, partition: int, entries: Any) -> int:
        self.open = True
        n = 0
        for key, value in entries:
            self.pending_changelog.append((partition, key, value))
            self.bytes_sent += len(key) + len(value or b"")
            n += 1
        return n

    def commit(self, offsets: dict[Any, Any], group_metadata: Any) -> None:
        if self.fail_next_commit:
            self.fail_next_commit = False
            self.abort()
            raise CheckpointFailed("commit refused (a test's fault)")
        for p, key, value in self.pending_changelog:
            self.cluster.changelog[p].append((key, value))
        for tp, meta in offsets.items():
            self.cluster.committed[tp] = meta.offset
        self.dead_letters += self.pending_dead_letters
        for topic, partition, key, value, ts_ms in self.pending_writes:
            self.cluster.produce(topic, partition, value or b"", key, ts_ms)
        self.commits.append(dict(offsets))
        self.pending_changelog, self.pending_dead_letters, self.pending_writes = [], [], []
        self.open = False

    def abort(self) -> None:
        self.pending_changelog, self.pending_dead_letters, self.pending_writes = [], [], []
        if self.open:
            self.aborts += 1
        self.open = False

    def close(self, timeout: float) -> None:
        self.abort()


class FakeRestorer:
    """Reads a partition's committed changelog back in one step."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.restoring: set[int] = set()
        self.started: list[int] = []  # every partition whose restore started, in order
        self.offsets_unavailable = 0  # how many committed() calls fail before one answers

    def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self.offsets_unavailable:
            from kafka.errors import KafkaTimeoutError

            self.offsets_unavailable -= 1
            raise KafkaTimeoutError("a transaction holding offsets is open")
        return {tp: self.cluster.committed.get(tp) for tp in tps}

    def last_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        return {tp: self.cluster.committed.get(tp) for tp in tps}

    def start(self, partitions: list[int]) -> None:
        self.restoring.update(partitions)
        self.started += partitions

    def cancel(self, partitions: list[int]) -> None:
        self.restoring.difference_update(partitions)

    def step(self, timeout_ms: int = 0) -> dict[int, tuple[state.Values, int, float]]:
        done = {}
        for p in sorted(self.restoring):
            records = self.cluster.changelog[p]
            values = state.latest(
                (key, value, f"changelog[{p}]@{i}") for i, (key, value) in enumerate(records)
            )
            done[p] = (values, len(records), 0.0)
        self.restoring.clear()
        return done

    def close(self) -> None:
        pass
