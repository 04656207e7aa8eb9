"""The confluent-kafka backend (``kafka_client = "confluent-kafka"``): the loop's group consumer
and settings on librdkafka, which reads records in C (its checkpoint producer:
:mod:`~streameval.kafka.rdproducer`).

Only the two clients on the path of every record are librdkafka's; the changelog reader, the
admin requests at start-up and the detectors' minutes reader stay kafka-python's (they run at
start, on a restore and once a minute). The consumer joins the group with the consumer
protocol of KIP-848 (``group.protocol = consumer``) and the broker's ``range`` assignor where the
broker has it (Kafka 4.0+), else with the classic protocol and eager range assignment
(:mod:`~streameval.kafka.protocols`): either way partition p of every co-partitioned input goes
to one member, and a member lets a partition go only once its listener has returned -- after
the checkpoint of what it gives up, as kafka-python's cooperative protocol does.

librdkafka's errors are raised as ``kafka.errors.KafkaError`` (:mod:`~streameval.kafka.client`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka import TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from streameval.config import Settings
from streameval.errors import ConfigError, InputError
from streameval.kafka import protocols
from streameval.kafka.client import Listed
from streameval.kafka.clients import FETCH_MAX_WAIT_MS, PRODUCER_ONLY
from streameval.kafka.rdconfig import CONSUMER_ONLY, common_config, librdkafka_config
from streameval.kafka.rdrecords import by_partition

try:  # the optional extra: streameval[confluent]
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, OffsetSpec
except ImportError:  # pragma: no cover - checked by available()
    ck = None

log = logging.getLogger(__name__)

#: how long start-up waits for the brokers' first answer
BOOTSTRAP_TIMEOUT_S = 10.0
#: how long a partition count is waited for, and how long after no answer it is not asked again
METADATA_TIMEOUT_S, METADATA_RETRY_S = 5.0, 30.0
#: records one poll hands the loop at most (kafka-python's max_poll_records of the loop)
POLL_RECORDS = 2_000
#: how long a resume's wake-up request is waited for: not at all (LibrdkafkaConsumer._wake)
WAKE_TIMEOUT_S = 0.0001


def available() -> bool:
    return ck is not None


def error_of(exc: BaseException) -> Any:
    """The confluent_kafka.KafkaError a KafkaException carries, or None."""
    first = exc.args[0] if exc.args else None
    return first if hasattr(first, "str") else None


def ck_error(exc: BaseException) -> KafkaError:
    """librdkafka's error as the interface's KafkaError."""
    error = error_of(exc)
    text = error.str() if error is not None else str(exc)
    if error is not None and error.code() == ck.KafkaError._TIMED_OUT:
        return KafkaTimeoutError(text)
    return KafkaError(text)


def ck_tp(tp: TopicPartition, offset: int | None = None) -> Any:
    return (
        ck.TopicPartition(tp.topic, tp.partition)
        if offset is None
        else ck.TopicPartition(tp.topic, tp.partition, offset)
    )


def _tps(partitions: Iterable[Any]) -> set[TopicPartition]:
    return {TopicPartition(p.topic, p.partition) for p in partitions}


#: librdkafka's log lines, through the daemon's logging: kafka's level and throttle (README,
#: streameval run); confluent-kafka logs every line with one template: they share one throttle
LOG = logging.getLogger("kafka.librdkafka")


def connect(kind: str, factory: Any, config: dict[str, Any]) -> Any:
    try:
        return factory({**config, "logger": LOG})
    except ck.KafkaException as exc:
        raise ConfigError(
            f"kafka: a setting in the [kafka] table is not accepted by the {kind}: {exc}"
        ) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"kafka: a setting in the [kafka] table is not accepted by the {kind}: {exc}"
        ) from None


class AdminOffsets:
    """The offsets the admin client's futures will hold (:class:`~streameval.kafka.client.PendingOffsets`)."""

    def __init__(self, futures: dict[Any, concurrent.futures.Future[Any]]) -> None:
        self.futures = futures

    def result(self) -> dict[TopicPartition, int] | None:
        if not all(future.done() for future in self.futures.values()):
            return None
        try:
            offsets = {
                TopicPartition(c.topic, c.partition): f.result().offset for c, f in self.futures.items()
            }
        except ck.KafkaException as exc:
            raise ck_error(exc) from None
        if any(offset < 0 for offset in offsets.values()):
            # with the broker away librdkafka 2.12 answers OFFSET_INVALID (-1001), not an error
            raise KafkaTimeoutError("offsets not listed: no answer from the partitions' leaders")
        return offsets


class LibrdkafkaConsumer:
    """The loop's group consumer (:class:`~streameval.kafka.client.Consumer`) on librdkafka."""

    def __init__(self, settings: Settings, protocol: str = protocols.CONSUMER) -> None:
        config = {
            **common_config(settings),
            "group.id": settings.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # partition p of every co-partitioned input on one member (README, Guarantees)
            **protocols.consumer_config(protocol),
            "max.poll.interval.ms": 30_000,
            "topic.metadata.refresh.interval.ms": 30_000,
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
            # with its fetch queue full librdkafka waits this long before it fetches again (1 s
            # by default): on a backlog the loop drains the queue much sooner and then waited
            # for records; measured, figure 2's run took 30% longer (README, Performance)
            "fetch.queue.backoff.ms": 20,
            "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,  # see clients.FETCH_MAX_WAIT_MS
            **librdkafka_config(settings, PRODUCER_ONLY | protocols.unused(protocol, settings.kafka)),
        }
        self.consumer = connect("consumer", ck.Consumer, config)
        try:  # librdkafka connects lazily: reach the brokers now, as kafka-python's client does
            self.consumer.list_topics(timeout=BOOTSTRAP_TIMEOUT_S)
        except ck.KafkaException:
            self.consumer.close()
            raise InputError(
                f"bootstrap_servers: cannot reach Kafka at {settings.bootstrap_servers} (consumer); "
                "check the address and the [kafka] security settings"
            ) from None
        self._listener: Any = None
        self._eager = protocol == protocols.CLASSIC
        self._paused: set[TopicPartition] = set()
        self._assignment: set[TopicPartition] | None = None  # librdkafka's, while it is not changed
        self._in_callback = False
        self._admin_config = common_config(settings) | librdkafka_config(
            settings, PRODUCER_ONLY | protocols.CLASSIC_ONLY | CONSUMER_ONLY
        )
        self._admin: Any = None  # for the end offsets: made when first asked
        self._partitions: dict[str, set[int] | None] = {}  # what the brokers last said, by topic
        self._metadata_retry = 0.0  # the brokers did not answer: the cache until then

    # membership
    def subscribe(self, topics: list[str], listener: Any) -> None:
        self._listener = listener

        def assigned(_: Any, partitions: list[Any]) -> None:
            self._rebalancing(listener.on_partitions_assigned, partitions)

        def revoked(_: Any, partitions: list[Any]) -> None:
            self._rebalancing(listener.on_partitions_revoked, partitions)

        def lost(_: Any, partitions: list[Any]) -> None:
            self._rebalancing(listener.on_partitions_lost, partitions)

        self.consumer.subscribe(list(topics), on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def _rebalancing(self, handler: Callable[[set[TopicPartition]], None], partitions: list[Any]) -> None:
        """A rebalance callback: confluent-kafka changes the assignment when it returns (unless
        the handler did), so the one :meth:`assignment` keeps is known again only after it."""
        self._assignment = None
        self._in_callback = True
        try:
            handler(_tps(partitions))
        finally:
            self._in_callback = False

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Read these partitions outside the group (:mod:`~streameval.kafka.rdstage`)."""
        self._assignment = None
        self._call(self.consumer.assign, [ck_tp(tp) for tp in sorted(tps)])

    def unassign(self) -> None:
        self._assignment = None
        self._call(self.consumer.unassign)
        self._paused.clear()

    def assignment(self) -> set[TopicPartition]:
        """Asked of librdkafka once after each change (a rebalance callback, :meth:`assign`):
        the loop asks every round."""
        assignment = self._assignment
        if assignment is None:
            try:
                assignment = _tps(self.consumer.assignment())
            except ck.KafkaException as exc:
                raise ck_error(exc) from None
            if not self._in_callback:
                self._assignment = assignment
        return set(assignment)

    def poll_round(self, timeout_ms: int, broker_silent: bool) -> dict[TopicPartition, list[Any]]:
        # consume(n, timeout) waits until it has n records or the timeout passes: with fewer
        # queued (inputs paused by flow control, a backlog's tail) every round would wait the
        # whole timeout. So take what is queued; only with nothing queued wait, for one record.
        messages = self.consumer.consume(POLL_RECORDS, 0)
        if not messages:
            first = self.consumer.poll(timeout_ms / 1000)
            if first is None:
                return {}
            messages = [first, *self.consumer.consume(POLL_RECORDS - 1, 0)]
        return by_partition(messages)

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        return self.poll_round(timeout_ms, False)

    def rejoining(self) -> bool:
        return False  # the consumer protocol has no group-wide pause: a checkpoint can commit

    def known_position(self, tp: TopicPartition) -> int | None:
        try:
            offset = self.consumer.position([ck_tp(tp)])[0].offset
        except ck.KafkaException:
            return None
        return offset if offset >= 0 else None

    def group_metadata(self) -> Any:
        return self.consumer.consumer_group_metadata()

    def eager_generation(self) -> tuple[str, int] | None:
        return protocols.member_generation(self.group_metadata()) if self._eager else None

    # positions
    def pause(self, *tps: TopicPartition) -> None:
        if tps:
            self._call(self.consumer.pause, [ck_tp(tp) for tp in tps])
            self._paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        if tps:
            self._call(self.consumer.resume, [ck_tp(tp) for tp in tps])
            self._paused.difference_update(tps)
            self._wake(tps)

    def _wake(self, tps: tuple[TopicPartition, ...]) -> None:
        """Have the threads of these partitions' leaders fetch now. librdkafka 2.12 does not wake
        a broker's thread for a resume: it fetched a resumed partition up to 1 s later, so every
        restore, rewind and flow-control pause cost up to that much (measured: `run` on a backlog
        waited 0.9 s for its first records after restoring). Any request to the leaders wakes them: a
        ListOffsets, sent, not waited for (its answer, timed out at once, is dropped)."""
        try:
            self.consumer.offsets_for_times([ck_tp(tp, ck.OFFSET_END) for tp in tps], timeout=WAKE_TIMEOUT_S)
        except ck.KafkaException:
            pass

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._call(self.consumer.seek, ck_tp(tp, offset))

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._call(self.consumer.seek, ck_tp(tp, ck.OFFSET_BEGINNING))

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._call(self.consumer.seek, ck_tp(tp, ck.OFFSET_END))

    def position(self, tp: TopicPartition) -> int:
        position = self.known_position(tp)
        if position is None:
            raise KafkaError(f"no position in {tp.topic}[{tp.partition}] yet")
        return position

    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return self._list_offsets(tps, timeout_ms, OffsetSpec.earliest())

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        """The ends with read_committed: the last stable offsets."""
        return self._list_offsets(tps, timeout_ms, OffsetSpec.latest())

    def request_end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> AdminOffsets | Listed:
        return self._request(tps, timeout_ms, OffsetSpec.latest()) if tps else Listed({})

    def _list_offsets(
        self, tps: list[TopicPartition], timeout_ms: int, spec: Any
    ) -> dict[TopicPartition, int]:
        """Offsets of these partitions in one request per leader (get_watermark_offsets asks
        one partition at a time, a round trip each)."""
        if not tps:
            return {}
        pending = self._request(tps, timeout_ms, spec)
        concurrent.futures.wait(pending.futures.values(), timeout=timeout_ms / 1000 + 0.5)
        offsets = pending.result()
        if offsets is None:
            raise KafkaTimeoutError(f"offsets of {len(tps)} partitions not listed in {timeout_ms} ms")
        return offsets

    def _request(self, tps: list[TopicPartition], timeout_ms: int, spec: Any) -> AdminOffsets:
        if self._admin is None:
            self._admin = connect("admin client", AdminClient, self._admin_config)
        try:
            futures = self._admin.list_offsets(
                {ck_tp(tp): spec for tp in tps},
                isolation_level=ck.IsolationLevel.READ_COMMITTED,
                request_timeout=max(0.05, timeout_ms / 1000),
            )
        except ck.KafkaException as exc:
            raise ck_error(exc) from None
        return AdminOffsets(futures)

    def highwater(self, tp: TopicPartition) -> int | None:
        try:
            high = self.consumer.get_watermark_offsets(ck_tp(tp), cached=True)[1]
        except ck.KafkaException:
            return None
        return high if high >= 0 else None

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """As the brokers say now; while they do not answer, as they last said (kafka-python's
        consumer answers from its metadata cache, never failing)."""
        now = time.monotonic()
        if topic in self._partitions and now < self._metadata_retry:
            return self._partitions[topic]
        try:
            metadata = self.consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except ck.KafkaException as exc:
            if topic not in self._partitions:
                raise ck_error(exc) from None
            self._metadata_retry = now + METADATA_RETRY_S  # not a wait per topic and call
            return self._partitions[topic]
        found = metadata.topics.get(topic)
        ok = found is not None and found.error is None and found.partitions
        self._partitions[topic] = set(found.partitions) if ok else None
        return self._partitions[topic]

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None:
        self._admin = None  # no close in confluent-kafka's AdminClient: dropped, it stops
        try:
            self.consumer.close()
        except (ck.KafkaException, RuntimeError) as exc:
            log.debug("consumer close: %s", exc)

    def _call(self, method: Any, *args: Any) -> Any:
        try:
            return method(*args)
        except ck.KafkaException as exc:
            raise ck_error(exc) from None


def describe(exc: BaseException) -> str:
    error = error_of(exc)
    return error.str() if error is not None else f"{type(exc).__name__}: {exc}"


def check_available() -> None:
    if not available():
        raise ConfigError(
            'kafka_client: "confluent-kafka" needs the confluent-kafka package: '
            "pip install 'streameval[confluent]'"
        )
