"""Checkpoints as Kafka transactions (Kafka Streams' exactly-once v2, KIP-447).

Everything the daemon writes -- changelog entries and dead-letter records -- goes out in the
open transaction, and a checkpoint commits it together with the input offsets it covers
(``send_offsets_to_transaction`` with the consumer's group metadata, so a member that lost its
partitions in a rebalance is fenced by the broker). Either all of it becomes visible or none:
the changelog is read with ``read_committed``, and the committed offsets are exactly those of
the last committed state.

This class is the one place that decides what a failed send, commit or abort means: every
failure ends the transaction (abort, or a fresh producer whose ``init_transactions`` aborts it)
and raises :class:`CheckpointFailed`; the loop then rewinds to the last committed checkpoint.
Every wait is bounded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka import KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError, MessageSizeTooLargeError, RecordListTooLargeError

from streameval import state
from streameval.kafka import detection
from streameval.kafka.client import CheckpointProducer
from streameval.kafka.deadletter import Headers
from streameval.kafka.partitions import PartitionState

log = logging.getLogger(__name__)

#: more than a record batch's header and one record's lengths, offsets and flags take
RECORD_FRAMING_BOUND = 1024


class CheckpointFailed(Exception):
    """The open transaction could not be committed; it has been ended (nothing of it is visible).
    ``too_large`` tells that a record was refused for its size; ``with_dead_letters`` that the
    wait for acknowledgements ran out in a transaction that sent dead-letter records (their
    topic may be gone)."""

    def __init__(
        self,
        message: str,
        too_large: bool = False,
        topic: str | None = None,
        with_dead_letters: bool = False,
    ) -> None:
        super().__init__(message)
        self.too_large = too_large
        self.topic = topic  # the topic a failed send was for, when one failed
        self.with_dead_letters = with_dead_letters


class Transactions:
    """The transactional producer, with bounded waits and one failure path."""

    def __init__(
        self, factory: Callable[[], KafkaProducer], timeout: float = 8.0, group_id: str | None = None
    ) -> None:
        self.factory = factory
        self.timeout = timeout
        self.group_id = group_id  # whose offsets the transactions commit: see _find_coordinator
        self.producer: KafkaProducer | None = None
        self.open = False
        self._sent: list[Any] = []
        self.bytes_sent = 0

    def connect(self) -> None:
        """A producer with its transactional state initialised (aborting what a predecessor with
        the same transactional id left open)."""
        producer = self.factory()
        try:
            _find_coordinator(producer, "TRANSACTION", producer.config.get("transactional_id"))
            try:
                producer.init_transactions()
            except KafkaError:
                # the lookup asked for ahead may have failed first (a transactional id the broker
                # does not authorise): its error, not the refused state change it left behind
                cause = getattr(getattr(producer, "_transaction_manager", None), "_last_error", None)
                if isinstance(cause, KafkaError):
                    raise cause from None
                raise
        except BaseException:
            _close(producer, timeout=0)
            raise
        self.producer = producer
        self.open = False
        self._sent = []
        _find_coordinator(producer, "GROUP", self.group_id)

    def send(self, topic: str, value: bytes | None, key: bytes | None, **kwargs: Any) -> None:
        """Send inside the open transaction (begun on demand). A failure raises CheckpointFailed."""
        try:
            producer = self._begin()
            self._sent.append(producer.send(topic, value=value, key=key, **kwargs))
        except (KafkaError, ValueError, AssertionError) as exc:
            raise self._send_failed(topic, exc) from None
        self.bytes_sent += len(value or b"") + len(key or b"")

    def send_dead_letter(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers, limit: int
    ) -> None:
        """As :meth:`send`: a batch of them that the broker refuses as too large, kafka-python's
        sender splits and sends again (``Sender._can_split``)."""
        self.send(topic, value, key, headers=headers)

    def send_many(self, topic: str, partition: int, entries: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Send keyed records to one partition inside the open transaction, as :meth:`send`
        would one by one; returns how many. A failure raises CheckpointFailed.

        kafka-python's ``send()`` redoes per record what a checkpoint needs once per partition:
        argument and header checks, serializer calls, the metadata lookup, the partitioner, a
        debug line formatted whether logged or not, adding the partition to the transaction;
        and its accumulator makes a future per record. Here those run once: each record is
        written straight into the partition's open batch (under the accumulator's lock for the
        partition, as its own ``append`` does), and only a record that opens a new batch goes
        through the accumulator, whose future for it stands for the batch -- a transaction
        commits all of its batches or none, and ``commit`` waits for every one
        (benchmarks/README.md, figure 2). Guarded: a client without these internals takes the
        plain route."""
        count = 0
        try:
            producer = self._begin()
            accumulator = getattr(producer, "_accumulator", None)
            manager = getattr(producer, "_transaction_manager", None)
            if not (
                hasattr(accumulator, "_tp_lock")
                and hasattr(accumulator, "_batches")
                and manager is not None
                and hasattr(producer, "_ensure_valid_record_size")
            ):
                for key, value in entries:
                    self.send(topic, value=value, key=key, partition=partition)
                    count += 1
                return count
            assert accumulator is not None
            if producer._metadata.partitions_for_topic(topic) is None:
                producer._wait_on_metadata(topic, producer.config["max_block_ms"])
            tp = TopicPartition(topic, partition)
            manager.maybe_add_partition_to_transaction(tp)
            no_headers: list[tuple[str, bytes]] = []
            append, sent = accumulator.append, self._sent
            estimate, check = producer._estimate_size_in_bytes, producer._ensure_valid_record_size
            # below this a record cannot reach max_request_size, whatever its framing
            surely_fits = producer.config["max_request_size"] - RECORD_FRAMING_BOUND
            wakeup = producer._sender.wakeup
            lock, batches = accumulator._tp_lock(tp), accumulator._batches
            timestamp_ms = int(time.time() * 1000)
            sent_bytes = 0
            for key, value in entries:
                size = len(key) + (len(value) if value is not None else 0)
                sent_bytes += size
                if size > surely_fits:
                    check(estimate(key, value, no_headers))
                with lock:
                    queue = batches[tp]
                    # the newest batch of a partition is open until the sender takes it, which
                    # it does under this lock; append() answers None when it is full
                    written = (
                        bool(queue)
                        and queue[-1].records.append(timestamp_ms, key, value, no_headers) is not None
                    )
                if not written:  # no open batch with room: the accumulator opens one
                    future, _, _, _ = append(
                        tp, timestamp_ms, key, value, no_headers, abort_on_new_batch=False
                    )
                    wakeup()
                    sent.append(future)
                count += 1
            self.bytes_sent += sent_bytes
        except (KafkaError, ValueError, AssertionError) as exc:
            raise self._send_failed(topic, exc) from None
        return count

    def _send_failed(self, topic: str, exc: Exception) -> CheckpointFailed:
        """End the transaction after a failed send; the error to raise."""
        self._end_failed()
        return CheckpointFailed(f"send to {topic} failed: {_describe(exc)}", _too_large(exc), topic)

    def commit(self, offsets: dict[Any, Any], group_metadata: Any) -> None:
        """Commit everything sent since the last commit, with ``offsets``, as one transaction."""
        deadline = time.monotonic() + self.timeout
        try:
            producer = self._begin()
            producer.flush(timeout=self.timeout)
            for future in self._sent:
                if not future.is_done:
                    raise KafkaTimeoutError("a record was not acknowledged in time")
                if future.failed():
                    raise future.exception
            manager = producer._transaction_manager
            if offsets:
                _await(manager.send_offsets_to_transaction(offsets, group_metadata), producer, deadline)
            _await(manager.begin_commit(), producer, deadline)
        except (KafkaError, ValueError, AssertionError) as exc:
            self._end_failed()
            raise CheckpointFailed(_describe(exc), _too_large(exc)) from None
        self.open = False
        self._sent = []

    def abort(self) -> None:
        """End the open transaction without making any of it visible."""
        if self.open:
            self._end_failed()

    def close(self, timeout: float) -> None:
        if self.producer is not None:
            try:
                if self.open:
                    _await(
                        self.producer._transaction_manager.begin_abort(),
                        self.producer,
                        time.monotonic() + timeout,
                    )
            except (KafkaError, AssertionError):
                pass  # the broker aborts it after transaction_timeout_ms
            _close(self.producer, timeout)
            self.producer = None

    def _begin(self) -> KafkaProducer:
        if self.producer is None:
            self.connect()
        assert self.producer is not None
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
        return self.producer

    def _end_failed(self) -> None:
        """Abort; when even that fails, replace the producer (its init aborts the transaction)."""
        producer, self.producer = self.producer, None
        self.open = False
        self._sent = []
        if producer is None:
            return
        try:
            _await(producer._transaction_manager.begin_abort(), producer, time.monotonic() + self.timeout)
            self.producer = producer
            return
        except (KafkaError, AssertionError) as exc:
            log.warning(
                "abort failed (%s); a new producer will take over the transactional id", _describe(exc)
            )
        _close(producer, timeout=0)


def _find_coordinator(producer: KafkaProducer, kind: str, key: str | None) -> None:
    """Ask for the coordinator of ``key`` (``kind``: ``"TRANSACTION"``, the transactional id's;
    ``"GROUP"``, the group's whose offsets the transactions commit) now, before a request needs
    it. kafka-python asks for a coordinator only when a request that needs it is next to send,
    then sends that request again after its ``retry_backoff_ms``, and waits for its answer
    another backoff: measured, ``init_transactions`` took 0.21 s at every start where, with the
    transaction coordinator asked for first, it takes 0.004 s; and 0.2 s of the first
    checkpoint's commit (0.21 s of 0.31 s) waited so for the group's. Where this fails, or with
    a client without these internals, the request looks the coordinator up as before."""
    try:
        from kafka.protocol.metadata.find_coordinator import CoordinatorType
    except ImportError:  # another kafka-python than 3.0's layout
        return
    manager = getattr(producer, "_transaction_manager", None)
    lookup = getattr(manager, "_lookup_coordinator", None)
    sender = getattr(producer, "_sender", None)
    coordinator_type = getattr(CoordinatorType, kind, None)
    if key is None or lookup is None or sender is None or coordinator_type is None:
        return
    if manager.coordinator(coordinator_type) is None:  # type: ignore[union-attr]
        lookup(coordinator_type, key)
        sender.wakeup()


def _close(producer: KafkaProducer, timeout: float) -> None:
    """Close, also when records are still pending: kafka-python's close() first flushes, and a
    flush that times out (broker unreachable) raises before the sender thread is stopped, so the
    sender is then stopped here (private attributes, guarded)."""
    try:
        producer.close(timeout=timeout)
    except KafkaError as exc:
        log.debug("producer close: %s; stopping its sender", _describe(exc))
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()
        producer._closed = True  # so its __del__ does not try (and fail) again


def _await(result: Any, producer: KafkaProducer, deadline: float) -> None:
    """Wait for a transaction-manager result until ``deadline`` (the client's own methods wait
    without a bound)."""
    producer._sender.wakeup()
    remaining = max(0.0, deadline - time.monotonic())
    if not result.wait(timeout_ms=remaining * 1000):
        raise KafkaTimeoutError(f"no answer from the transaction coordinator within {remaining:.0f} s")


def _too_large(exc: BaseException) -> bool:
    return isinstance(exc, MessageSizeTooLargeError | RecordListTooLargeError)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def commit_checkpoint(
    transactions: CheckpointProducer,
    changelog_topic: str,
    partitions: dict[int, PartitionState],
    group_metadata: Any,
    sources: dict[TopicPartition, int] | None = None,
    minutes_topic: str | None = None,
) -> int:
    """Commits, as one transaction with what it holds already (dead-letter records), the changed
    state of every partition that has a pipeline (active, or giving up) into its changelog
    partition, and the input offsets it covers (with ``sources``: the repartition stage's, which
    cover what it wrote), after each partition's newly complete minutes into ``minutes_topic``;
    returns the changelog records sent. Raises
    CheckpointFailed (the transaction is then ended; nothing of it is visible)."""
    offsets = {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in (sources or {}).items()}
    if minutes_topic is not None:
        detection.hand_on(minutes_topic, transactions.send, partitions)
    owners = []
    for p, ps in partitions.items():
        if ps.pipeline is None or not ps.changed():
            continue
        moved = ps.moved_offsets()
        owners.append((p, ps, moved))
        for topic, offset in moved.items():
            offsets[TopicPartition(topic, p)] = OffsetAndMetadata(offset, "", -1)
    entries = 0
    for p, ps, _ in owners:
        entries += transactions.send_many(changelog_topic, p, state.checkpoint_entries(ps.pipeline))  # type: ignore[arg-type]
    transactions.commit(offsets, group_metadata)
    for _, ps, moved in owners:
        ps.committed.update(moved)
    return entries
