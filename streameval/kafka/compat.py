"""The workarounds for kafka-python 3.0.12's internals, in one place.

Each one reaches into the client's private attributes, guarded so that a client without them is
left alone; ``tests/test_compat.py`` holds each to the internals it relies on, and fails when a
kafka-python release changes them (then check whether the workaround is still needed).
"""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.coordinator.base import MemberState
from kafka.protocol.consumer import OffsetSpec


def poll(consumer: KafkaConsumer, timeout_ms: int, broker_silent: bool) -> Any:
    """``consumer.poll(timeout_ms)``; while the broker does not answer, a poll without waiting
    and the wait here instead: kafka-python's poll() then spins inside its timeout (a full core
    with a hung broker)."""
    if broker_silent:
        batches = consumer.poll(timeout_ms=0)
        if not batches:
            time.sleep(timeout_ms / 1000)
        return batches
    return consumer.poll(timeout_ms=timeout_ms)


def known_position(consumer: KafkaConsumer, tp: TopicPartition) -> int | None:
    """The consumer's position in ``tp`` as it knows it now, without a request (its public
    ``position()`` may first refresh committed offsets from the coordinator); None when it has
    none. The position passes the commit markers of a transactional topic, which no fetched
    record's offset covers."""
    assignment = getattr(getattr(consumer, "_subscription", None), "assignment", None)
    state = assignment.get(tp) if isinstance(assignment, dict) else None
    position = getattr(state, "position", None)
    offset = getattr(position, "offset", None)
    return offset if isinstance(offset, int) else None


class FutureOffsets:
    """The offsets a kafka-python future will hold (:class:`~streameval.kafka.client.PendingOffsets`)."""

    def __init__(self, future: Any) -> None:
        self.future = future

    def result(self) -> dict[TopicPartition, int] | None:
        future = self.future
        if not future.is_done:
            return None
        if future.exception is not None:
            raise future.exception
        return {tp: found.offset for tp, found in future.value.items()}


def request_end_offsets(consumer: KafkaConsumer, tps: list[TopicPartition], timeout_ms: int) -> Any:
    """``consumer.end_offsets(tps, timeout_ms)`` without waiting: the same coroutine of the
    fetcher, scheduled on the client's network thread, as a :class:`FutureOffsets`; None when
    the client has not these internals. Waiting for the answer cost the loop 8 % of its time
    (README, Performance): the request waits on that thread behind the fetches' responses."""
    fetcher = getattr(consumer, "_fetcher", None)
    request = getattr(fetcher, "_fetch_offsets_by_times_async", None)
    schedule = getattr(getattr(fetcher, "_net", None), "call_soon_with_future", None)
    if request is None or schedule is None or not tps:
        return None
    future = schedule(request, {tp: OffsetSpec.LATEST for tp in tps}, timeout_ms)
    return FutureOffsets(future)


def rejoining(consumer: KafkaConsumer) -> bool:
    """Whether the member is rebalancing (its generation is about to end)."""
    return getattr(consumer.group_metadata(), "state", None) is MemberState.REBALANCING


def release_parked_fetches(consumer: KafkaConsumer) -> None:
    """Let a resumed partition's parked records be restored.

    The fetcher parks the records it fetched for a paused partition (KAFKA-7548) and does not
    fetch that partition again while they are parked. After resume() it restores them only when
    its current record set ``is None``, but an exhausted record set stays in place and is merely
    falsy: the partition would stay stuck. Everywhere else the fetcher treats a falsy record set
    as "none", so replacing an exhausted one by None changes nothing else.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not getattr(fetcher, "_paused_partition_records", None):
        return
    current = getattr(fetcher, "_next_partition_records", None)
    if current is not None and not current:
        fetcher._next_partition_records = None


class _AwaitedJoin:
    """A group join that a poll gave up waiting for, shown to the next poll as still running, so
    that the next poll awaits it (and takes its result) whether or not it has finished since."""

    __slots__ = ("task",)
    is_done = False  # what kafka-python's join loop reads to decide to send a new JoinGroup

    def __init__(self, task: Any) -> None:
        self.task = task

    def add_callback(self, f: Any, *args: Any, **kwargs: Any) -> _AwaitedJoin:
        self.task.add_callback(f, *args, **kwargs)
        return self

    def add_errback(self, f: Any, *args: Any, **kwargs: Any) -> _AwaitedJoin:
        self.task.add_errback(f, *args, **kwargs)
        return self

    def __await__(self) -> Any:
        return self.task.__await__()


def keep_join_awaited(consumer: KafkaConsumer) -> None:
    """Make the next poll await a group join that outlived this poll (README, Guarantees).

    A poll waits for the group join (JoinGroup, then SyncGroup) at most its own timeout and leaves
    the join running for the next poll. kafka-python's next poll awaits it only while the task
    is not done and a rejoin is still needed; otherwise it sends a new JoinGroup or none, and
    either way drops the assignment that join brought: the member stays "rejoining", and as
    the group's leader it starts a new rebalance on every poll. So after each poll the running
    join is wrapped to look not done, and the rejoin is marked as needed until the join's result
    is taken (the client clears the flag then). The incidents behind this are in
    ``benchmarks/README.md`` ("kafka-python's rebalance that never ends").
    """
    coordinator = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_join_task", None)
    if task is None or not hasattr(task, "add_errback") or not hasattr(coordinator, "rejoin_needed"):
        return
    coordinator.rejoin_needed = True  # type: ignore[union-attr]
    if not isinstance(task, _AwaitedJoin):
        coordinator._join_task = _AwaitedJoin(task)  # type: ignore[union-attr]


def drop_timeout_tracebacks() -> None:
    """A wait that times out inside kafka-python's poll no longer keeps the poll's records.

    ``NetworkSelector.run`` raises a timed-out wait's ``KafkaTimeoutError`` to the caller (the
    fetcher, every poll that finds nothing buffered and a fetch in flight), which drops it. The
    exception's traceback holds the frames it passed through, the frame of ``run`` holds the
    exception: a reference cycle, and through the frames' ``f_back`` it held every caller's
    locals at their return, the poll's records and the loop's round with them. The young
    collections ran while those frames were alive, so the cycles reached the oldest generation,
    reclaimed only by the daemon's full collection every 5 minutes (``streameval/collector.py``):
    measured on live traffic at 1,350 records/s, 1.2-1.5 million objects after 60 s, nearly
    every record consumed among them, and a 1.8-2.2 s collection. The exception now leaves
    ``run`` without the frames inside it, so nothing refers back to them. Process-wide and
    idempotent (the daemon calls it at start-up).
    """
    from kafka.errors import KafkaTimeoutError
    from kafka.net.selector import NetworkSelector

    run = NetworkSelector.run
    if getattr(run, "drops_timeout_tracebacks", False):
        return

    def run_dropping_timeout_tracebacks(self: Any, coro: Any, *args: Any) -> Any:
        try:
            return run(self, coro, *args)
        except KafkaTimeoutError as exc:
            exc.__traceback__ = None  # its frames and the cycle through run's own
            raise

    run_dropping_timeout_tracebacks.drops_timeout_tracebacks = True  # type: ignore[attr-defined]
    NetworkSelector.run = run_dropping_timeout_tracebacks
