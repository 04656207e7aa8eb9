"""The checkpoint producer of the confluent-kafka backend: librdkafka's transactional producer
behind :class:`~streameval.kafka.client.CheckpointProducer` (settings and errors as in
:mod:`~streameval.kafka.librdkafka`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from kafka import OffsetAndMetadata

from streameval.config import Settings
from streameval.kafka.checkpoint import CheckpointFailed
from streameval.kafka.deadletter import Headers, record_size
from streameval.kafka.librdkafka import ck, ck_error, ck_tp, connect, describe, error_of
from streameval.kafka.rdconfig import PRODUCER_EXCLUDE, common_config, librdkafka_config

log = logging.getLogger(__name__)

#: the shortest wait for an abort after a failed commit (one past the deadline gets this much)
MIN_ABORT_S = 0.5
#: how long one init_transactions call waits before it is made again (connect)
INIT_STEP_S = 0.05


class LibrdkafkaTransactions:
    """The checkpoint producer (:class:`~streameval.kafka.client.CheckpointProducer`) on
    librdkafka's transactional producer, with bounded waits and one failure path."""

    def __init__(self, settings: Settings, txn_id: str, timeout_ms: int, timeout: float = 8.0) -> None:
        self.config = {
            **common_config(settings),
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 512 * 1024,
            "enable.idempotence": True,
            **librdkafka_config(settings, PRODUCER_EXCLUDE),
            "transaction.timeout.ms": timeout_ms,
            "transactional.id": txn_id,
        }
        self.timeout = timeout
        self.producer: Any = None
        self.open = False
        self.bytes_sent = 0
        self._failed: list[tuple[str, Any]] = []  # (topic, error) of records the broker refused
        self._dead_letter_queued = 0  # bytes of dead-letter records queued since the last flush
        self._dead_letters_sent = False  # the open transaction sent to the dead-letter topic

    def connect(self) -> None:
        producer = connect("producer", ck.Producer, self.config)
        # in short steps: one long init_transactions call took 0.51 s about half the time
        # (librdkafka tries again to get its producer id 0.5 s later; measured in the daemon's
        # start-up: 0.055 s or 0.51 s), a call made again starts over at once. In 0.05 s steps:
        # 0.01-0.067 s in 8 of 8 (0.1 s steps: 0.105 s in 5 of 8). librdkafka's docs allow a
        # timed-out call to be made again.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                producer.init_transactions(INIT_STEP_S)
                break
            except ck.KafkaException as exc:
                error = error_of(exc)
                if error is None or not error.retriable() or time.monotonic() >= deadline:
                    raise ck_error(exc) from None
        self.producer = producer
        self.open = False
        self._failed = []
        self._dead_letter_queued = 0

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._failed.append((message.topic(), error))

    def _begin(self) -> Any:
        if self.producer is None:
            self.connect()
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
        return self.producer

    def _produce(
        self, producer: Any, topic: str, value: bytes | None, key: bytes | None, **kwargs: Any
    ) -> None:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=self._delivered, **kwargs)
                return
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)

    def send(self, topic: str, value: bytes | None, key: bytes | None, **kwargs: Any) -> None:
        try:
            producer = self._begin()
            headers = kwargs.pop("headers", None)
            if headers:
                kwargs["headers"] = headers
            timestamp = kwargs.pop("timestamp_ms", None)  # the interface's names are kafka-python's
            if timestamp is not None:
                kwargs["timestamp"] = timestamp
            self._produce(producer, topic, value, key, **kwargs)
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise self._send_failed(topic, exc) from None
        self.bytes_sent += len(value or b"") + len(key or b"")

    def send_dead_letter(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Headers, limit: int
    ) -> None:
        """As :meth:`send`. librdkafka writes the records queued for a partition as one batch,
        and the broker holds a batch to the topic's max.message.bytes, which each dead-letter
        record is cut to fit (README, `streameval run`): before a record that would take the
        dead-letter records queued past ``limit``, what is queued is flushed."""
        size = record_size(key, value, headers)
        if self._dead_letter_queued and self._dead_letter_queued + size > limit:
            try:
                self._flush()
            except ck.KafkaException as exc:
                raise self._send_failed(topic, exc) from None
        self.send(topic, value, key, headers=headers)
        self._dead_letter_queued += size
        self._dead_letters_sent = True

    def _flush(self, deadline: float | None = None) -> None:
        if self.producer.flush(self.timeout if deadline is None else _left(deadline)) > 0:
            # librdkafka holds a record for a topic it cannot find (deleted while running) up to
            # topic.metadata.propagation.max.ms, 30 s, before it fails it, and each new producer
            # waits that long again: say that dead-letter records were among those waiting, so
            # that the loop checks the topic (and creates it again) now
            raise CheckpointFailed(
                "records not acknowledged in time", with_dead_letters=self._dead_letters_sent
            )
        self._dead_letter_queued = 0

    def send_many(self, topic: str, partition: int, entries: Iterable[tuple[bytes, bytes | None]]) -> int:
        """As :meth:`send`, many records to one partition. No delivery callback per record: a
        record the broker refuses fails the transaction's commit (librdkafka's
        ``commit_transaction`` raises then), and one too large is refused at once."""
        count = 0
        sent_bytes = 0
        try:
            producer = self._begin()
            produce = producer.produce
            for key, value in entries:
                try:
                    produce(topic, value, key, partition)
                except BufferError:
                    self._produce(producer, topic, value, key, partition=partition)
                sent_bytes += len(key) + len(value or b"")
                count += 1
            producer.poll(0)
        except (ck.KafkaException, ValueError, TypeError) as exc:
            raise self._send_failed(topic, exc) from None
        self.bytes_sent += sent_bytes
        return count

    def commit(self, offsets: dict[Any, OffsetAndMetadata], group_metadata: Any) -> None:
        """Flush, send the offsets and commit within ``timeout`` in all, as kafka-python's
        :class:`~streameval.kafka.checkpoint.Transactions` does; a failure aborts within what
        is left of it (at least ``MIN_ABORT_S``)."""
        deadline = time.monotonic() + self.timeout
        try:
            producer = self._begin()
            self._flush(deadline)
            if self._failed:
                topic, error = self._failed[0]
                self._end_failed(deadline)
                raise CheckpointFailed(f"send to {topic} failed: {error.str()}", _too_large(error), topic)
            if offsets:
                listed = [ck_tp(tp, om.offset) for tp, om in offsets.items()]
                producer.send_offsets_to_transaction(listed, group_metadata, _left(deadline))
            producer.commit_transaction(_left(deadline))
            self._dead_letters_sent = False
        except CheckpointFailed:
            if self.open:
                self._end_failed(deadline)
            raise
        except ck.KafkaException as exc:
            self._end_failed(deadline)
            raise CheckpointFailed(describe(exc)) from None
        self.open = False

    def abort(self) -> None:
        if self.open:
            self._end_failed()

    def close(self, timeout: float) -> None:
        producer, self.producer = self.producer, None
        if producer is None:
            return
        try:
            if self.open:
                producer.abort_transaction(timeout)
        except ck.KafkaException:
            pass  # the broker aborts it after transaction.timeout.ms
        producer.flush(0)
        self.open = False

    def _send_failed(self, topic: str, exc: BaseException) -> CheckpointFailed:
        self._end_failed()
        error = error_of(exc)
        too_large = error is not None and _too_large(error)
        return CheckpointFailed(f"send to {topic} failed: {describe(exc)}", too_large, topic)

    def _end_failed(self, deadline: float | None = None) -> None:
        """Abort (by ``deadline``, if given); when that fails (a fatal error, fenced, no answer
        in time), drop the producer: the next one's init_transactions aborts the transaction
        left open."""
        producer = self.producer
        self.open = False
        self._failed = []
        self._dead_letter_queued = 0
        self._dead_letters_sent = False
        if producer is None:
            return
        try:
            producer.abort_transaction(
                self.timeout if deadline is None else max(MIN_ABORT_S, _left(deadline))
            )
            return
        except ck.KafkaException as exc:
            log.warning(
                "abort failed (%s); a new producer will take over the transactional id", describe(exc)
            )
        self.producer = None


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _too_large(error: Any) -> bool:
    return error.code() in (ck.KafkaError.MSG_SIZE_TOO_LARGE, ck.KafkaError.RECORD_LIST_TOO_LARGE)
