"""The Kafka client interface of the daemon: what the consumer loop asks of its clients.

The loop (:mod:`~streameval.kafka.loop`) and its parts talk to three clients, and only through
the methods below; a *backend* (:mod:`~streameval.kafka.backends`) makes them from the settings.
kafka-python is the backend: :class:`GroupConsumer` is a ``KafkaConsumer`` with its workarounds
(:mod:`~streameval.kafka.compat`) behind :meth:`GroupConsumer.poll_round`,
:class:`~streameval.kafka.checkpoint.Transactions` its transactional producer and
:class:`~streameval.kafka.changelog.Restorer` the changelog reader. The unit tests' fake clients
(``tests/fakes.py``) implement the same protocols.

- :class:`Consumer`: the group member reading the inputs -- subscription and assignment,
  polls, positions, pausing, the group's metadata for transactional offset commits. Its
  records have ``topic``, ``partition``, ``offset``, ``key``, ``value``, ``timestamp`` (ms,
  Kafka's) and ``headers``; partitions are ``kafka.TopicPartition`` pairs.
- :class:`CheckpointProducer`: one transaction at a time holding a checkpoint's changelog
  records, the dead-letter records and the input offsets; it fails one way
  (:class:`~streameval.kafka.checkpoint.CheckpointFailed`, the transaction then ended).
- :class:`ChangelogReader`: reads changelog partitions back to their end, a step at a time,
  and the group's committed offsets.

A request the broker refuses raises ``kafka.errors.KafkaError`` (or a subclass), whatever the
backend; a mismatch of assignors in the group raises :class:`GroupProtocolMismatch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import InconsistentGroupProtocolError

from streameval.kafka import compat

if TYPE_CHECKING:
    from streameval import state
    from streameval.kafka.deadletter import Headers


class GroupProtocolMismatch(Exception):
    """Members of the group assign partitions another way (another application, or an older
    streameval, in the same group)."""


class PendingOffsets(Protocol):
    """Offsets asked for and not waited for."""

    def result(self) -> dict[TopicPartition, int] | None:
        """The offsets once the answer is in, None until then; raises KafkaError when the
        request failed or was not answered in its time."""
        ...


class Listed:
    """Offsets already known: the answer of a client that waited for them."""

    def __init__(self, offsets: dict[TopicPartition, int]) -> None:
        self.offsets = offsets

    def result(self) -> dict[TopicPartition, int] | None:
        return self.offsets


class Consumer(Protocol):
    """The group member that reads the input topics."""

    def subscribe(self, topics: list[str], listener: Any) -> None: ...

    def assignment(self) -> set[TopicPartition]: ...

    def poll_round(self, timeout_ms: int, broker_silent: bool) -> dict[TopicPartition, list[Any]]:
        """One poll of the loop: the records fetched, by partition, after waiting at most
        ``timeout_ms`` (``broker_silent``: the broker does not answer; wait without spinning)."""
        ...

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]: ...

    def rejoining(self) -> bool:
        """Whether the member is rebalancing (a checkpoint now would likely be refused)."""
        ...

    def known_position(self, tp: TopicPartition) -> int | None:
        """The position in ``tp`` as the client knows it, without a request; None if unknown."""
        ...

    def group_metadata(self) -> Any: ...

    def eager_generation(self) -> tuple[str, int] | None:
        """With an eager protocol (every rebalance revokes the whole assignment): the member id
        and generation the member is in, so that state given up in one generation can be kept
        when the next hands it back (:mod:`~streameval.kafka.kept`). None otherwise."""
        ...

    def pause(self, *tps: TopicPartition) -> None: ...

    def resume(self, *tps: TopicPartition) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def seek_to_beginning(self, *tps: TopicPartition) -> None: ...

    def seek_to_end(self, *tps: TopicPartition) -> None: ...

    def position(self, tp: TopicPartition) -> int: ...

    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]: ...

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]: ...

    def request_end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> PendingOffsets:
        """As :meth:`end_offsets`, without waiting for the answer."""
        ...

    def highwater(self, tp: TopicPartition) -> int | None: ...

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None: ...


class CheckpointProducer(Protocol):
    """The transactional producer of checkpoints and dead-letter records."""

    open: bool
    bytes_sent: int
    timeout: float

    def connect(self) -> None: ...

    def send(self, topic: str, value: bytes | None, key: bytes | None, **kwargs: Any) -> None: ...

    def send_dead_letter(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers, limit: int
    ) -> None:
        """As :meth:`send`, a dead-letter record cut to fit ``limit`` bytes; no batch of them
        may pass that either."""

    def send_many(self, topic: str, partition: int, entries: Iterable[tuple[bytes, bytes | None]]) -> int: ...

    def commit(self, offsets: dict[Any, Any], group_metadata: Any) -> None: ...

    def abort(self) -> None: ...

    def close(self, timeout: float) -> None: ...


class ChangelogReader(Protocol):
    """Reads the state of partitions back from the changelog, and the committed offsets."""

    @property
    def restoring(self) -> set[int]: ...

    def start(self, partitions: Iterable[int]) -> None: ...

    def cancel(self, partitions: Iterable[int]) -> None: ...

    def step(self, timeout_ms: int = 200) -> dict[int, tuple[state.Values, int, float]]: ...

    def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]: ...

    def last_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]: ...

    def close(self) -> None: ...


class GroupConsumer(KafkaConsumer):
    """kafka-python's consumer as the loop's :class:`Consumer`: its workarounds for kafka-python
    3.0.12 (:mod:`~streameval.kafka.compat`) around each poll."""

    def poll_round(self, timeout_ms: int, broker_silent: bool) -> dict[TopicPartition, list[Any]]:
        compat.release_parked_fetches(self)
        try:
            batches = compat.poll(self, timeout_ms, broker_silent=broker_silent)
        except InconsistentGroupProtocolError:
            raise GroupProtocolMismatch() from None
        compat.keep_join_awaited(self)
        return batches

    def rejoining(self) -> bool:
        return compat.rejoining(self)

    def known_position(self, tp: TopicPartition) -> int | None:
        return compat.known_position(self, tp)

    def eager_generation(self) -> tuple[str, int] | None:
        return None  # the cooperative assignor: a member keeps what it is not asked to give up

    def request_end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> PendingOffsets:
        pending = compat.request_end_offsets(self, tps, timeout_ms)
        return pending if pending is not None else Listed(self.end_offsets(tps, timeout_ms=timeout_ms))
