"""The kafka-python workarounds (streameval/kafka/compat.py), each held to the client internals
it relies on. A failure here after a kafka-python upgrade means an internal changed: check
whether the workaround is still needed, and adapt or remove it (README, Guarantees)."""

from __future__ import annotations

import gc
import inspect
import weakref
from collections.abc import Callable

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.coordinator.base import BaseCoordinator, MemberState
from kafka.errors import KafkaTimeoutError
from kafka.future import Future
from kafka.structs import OffsetAndTimestamp

from streameval.kafka import compat


@pytest.fixture
def consumer():
    # with api_version given, the client builds without a broker (nothing is sent until a poll)
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 5, 0), group_id="compat-test")
    yield consumer
    consumer.close(autocommit=False)


def _source(function) -> str:
    return " ".join(inspect.getsource(function).split())


def test_the_fetcher_restores_parked_records_only_when_its_record_set_is_none(consumer) -> None:
    fetcher = consumer._fetcher
    assert isinstance(fetcher, Fetcher)
    assert fetcher._next_partition_records is None
    assert fetcher._paused_partition_records == {}
    source = _source(Fetcher.fetched_records)
    # the condition the workaround satisfies, and the falsy test used everywhere else
    assert (
        "if self._next_partition_records is None: for tp in list(self._paused_partition_records):" in source
    )
    assert "if not self._next_partition_records:" in source


def test_an_exhausted_record_set_is_replaced_by_none_only_while_records_are_parked(consumer) -> None:
    class Exhausted:
        def __bool__(self) -> bool:
            return False

    fetcher = consumer._fetcher
    fetcher._next_partition_records = exhausted = Exhausted()
    compat.release_parked_fetches(consumer)
    assert fetcher._next_partition_records is exhausted  # nothing parked: left alone
    fetcher._paused_partition_records = {"tp": object()}
    compat.release_parked_fetches(consumer)
    assert fetcher._next_partition_records is None
    fetcher._paused_partition_records = {}


def test_the_join_loop_sends_a_new_join_when_the_task_is_done_and_awaits_it_while_a_rejoin_is_needed(
    consumer,
) -> None:
    coordinator = consumer._coordinator
    assert isinstance(coordinator, BaseCoordinator)
    assert coordinator._join_task is None
    assert hasattr(coordinator, "rejoin_needed")
    source = _source(BaseCoordinator.join_group_async)
    assert "while self.need_rejoin():" in source
    assert "if self._join_task is None or self._join_task.is_done:" in source
    assert "self._manager.wait_for( self._join_task, timer.timeout_ms)" in source
    assert "self.rejoin_needed = False" in source  # cleared when the join's result is taken
    assert "self.rejoin_needed" in _source(BaseCoordinator.need_rejoin)


def test_a_running_join_is_wrapped_to_look_not_done_and_a_rejoin_marked_needed(consumer) -> None:
    class Task:
        is_done = True

        def add_errback(self, *args):
            return self

    coordinator = consumer._coordinator
    compat.keep_join_awaited(consumer)
    assert coordinator._join_task is None  # no join running: nothing to do
    coordinator.rejoin_needed = False
    task = Task()
    coordinator._join_task = task
    compat.keep_join_awaited(consumer)
    wrapped = coordinator._join_task
    assert wrapped is not task and wrapped.task is task and wrapped.is_done is False
    assert coordinator.rejoin_needed is True
    compat.keep_join_awaited(consumer)
    assert coordinator._join_task is wrapped  # wrapped once
    coordinator._join_task = None


def test_the_group_metadata_says_when_the_member_is_rebalancing(consumer) -> None:
    assert hasattr(MemberState, "REBALANCING")
    assert hasattr(consumer.group_metadata(), "state")
    assert compat.rejoining(consumer) is (consumer.group_metadata().state is MemberState.REBALANCING)


def test_poll_waits_itself_while_the_broker_is_silent() -> None:
    calls = []

    class Consumer:
        def poll(self, timeout_ms):
            calls.append(timeout_ms)
            return {}

    assert compat.poll(Consumer(), 10, broker_silent=False) == {}
    assert compat.poll(Consumer(), 10, broker_silent=True) == {}
    assert calls == [10, 0]


def test_the_known_position_is_the_subscription_states_without_a_request(consumer) -> None:
    from kafka import TopicPartition

    tp = TopicPartition("compat-test", 0)
    consumer.assign([tp])
    assert compat.known_position(consumer, tp) is None  # none yet
    consumer.seek(tp, 5)
    assert consumer._subscription.assignment[tp].position.offset == 5
    assert compat.known_position(consumer, tp) == 5
    assert compat.known_position(consumer, TopicPartition("compat-test", 1)) is None  # not assigned


def test_end_offsets_are_the_fetchers_coroutine_that_request_end_offsets_schedules(consumer) -> None:
    fetcher = consumer._fetcher
    source = _source(Fetcher.beginning_or_end_offset)
    assert "self._net.run(self._fetch_offsets_by_times_async, timestamps, timeout_ms)" in source
    assert "offsets[tp] = offsets[tp].offset" in source
    assert callable(fetcher._net.call_soon_with_future)
    pending = compat.request_end_offsets(consumer, [TopicPartition("t", 0)], 100)
    assert isinstance(pending, compat.FutureOffsets) and isinstance(pending.future, Future)
    assert compat.request_end_offsets(consumer, [], 100) is None


def test_future_offsets_are_none_until_the_answer_and_raise_its_error() -> None:
    future = Future()
    pending = compat.FutureOffsets(future)
    assert pending.result() is None
    future.success({TopicPartition("t", 0): OffsetAndTimestamp(42, -1, None)})
    assert pending.result() == {TopicPartition("t", 0): 42}
    failed = Future()
    failed.failure(KafkaTimeoutError("no answer"))
    with pytest.raises(KafkaTimeoutError):
        compat.FutureOffsets(failed).result()


class _Held:
    """A local of the caller of a poll (weak-referenceable)."""


def test_a_timed_out_wait_no_longer_keeps_its_callers_locals_in_a_cycle(consumer) -> None:
    # the internals: the fetcher drops the timeout that run() raises from its waits
    assert "except Errors.KafkaTimeoutError: pass" in _source(Fetcher.fetch_records)
    fetcher = consumer._fetcher

    def poll_like() -> Callable[[], object]:
        held = _Held()  # what a poll's caller holds: its records, the loop's round
        try:
            fetcher._net.run(fetcher._manager.wait_for, Future(), 0)
        except KafkaTimeoutError:
            pass
        return weakref.ref(held)

    gc.disable()  # only reference counting frees what is not in a cycle
    try:
        compat.drop_timeout_tracebacks()
        compat.drop_timeout_tracebacks()  # once only
        assert poll_like()() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("kind", ["TRANSACTION", "GROUP"])
def test_a_coordinator_asked_for_ahead_is_the_first_transactional_request(kind: str) -> None:
    """``checkpoint._find_coordinator``: the producer's transaction manager queues a
    FindCoordinator request for the key, sent before any request that needs the coordinator
    (whose sender otherwise looks it up only then, and backs off before sending it again)."""
    from kafka import KafkaProducer
    from kafka.producer.sender import Sender
    from kafka.producer.transaction_manager import FindCoordinatorHandler

    from streameval.kafka.checkpoint import _find_coordinator

    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(2, 5, 0), transactional_id="tid")
    manager = producer._transaction_manager
    queued: list[object] = []  # what is queued, read here: the sender thread may take it at once
    enqueue = manager._enqueue_request
    manager._enqueue_request = lambda handler: (queued.append(handler), enqueue(handler))
    try:
        _find_coordinator(producer, kind, "key")
        (handler,) = queued
        assert isinstance(handler, FindCoordinatorHandler)
        assert handler.request.key == "key"
        assert handler.request.key_type == (1 if kind == "TRANSACTION" else 0)
    finally:
        producer.close(timeout=0)
    source = _source(Sender._maybe_send_pending_request)
    assert "self._transaction_manager.lookup_coordinator_for_request(next_request_handler)" in source
    assert "retry_backoff_ms" in source


def test_a_lookup_that_failed_before_init_transactions_raises_its_own_error() -> None:
    """Where the transaction coordinator's lookup, asked for ahead, fails first (fatally: a
    transactional id the broker does not authorise), ``init_transactions`` refuses the state
    change it left behind; ``Transactions.connect`` raises the lookup's error instead."""
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError
    from kafka.producer.transaction_manager import TransactionState

    from streameval.kafka.checkpoint import Transactions

    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(2, 5, 0), transactional_id="tid")
    producer._transaction_manager._transition_to(
        TransactionState.FATAL_ERROR, error=TransactionalIdAuthorizationFailedError("tid")
    )
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        Transactions(lambda: producer).connect()
