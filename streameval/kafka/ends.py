"""How far each input partition goes: its end offset, asked for at most every second (less
often while the broker does not answer) and taken when the answer is in, and the lag of what is
processed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from kafka import TopicPartition
from kafka.errors import KafkaError

from streameval.kafka.client import Consumer, PendingOffsets
from streameval.kafka.partitions import PartitionState

log = logging.getLogger(__name__)

END_OFFSETS_INTERVAL_S = 1.0  # how often the end offsets of the inputs are asked for
END_OFFSETS_MAX_BACKOFF_S = 8.0  # ... at most, while the broker does not answer


class EndOffsets:
    def __init__(self, consumer: Consumer, clock: Callable[[], float] = time.monotonic) -> None:
        self.consumer = consumer
        self.clock = clock
        self.listed: dict[TopicPartition, int] = {}
        #: tp -> (the largest end seen, when it was first seen)
        self._grew: dict[TopicPartition, tuple[int, float]] = {}
        self.due = 0.0
        self.backoff = END_OFFSETS_INTERVAL_S
        self._pending: PendingOffsets | None = None  # the request whose answer is not in yet

    @property
    def broker_silent(self) -> bool:
        """The last requests went unanswered."""
        return self.backoff > END_OFFSETS_INTERVAL_S

    def reset(self) -> None:
        self.backoff = END_OFFSETS_INTERVAL_S

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.listed.pop(tp, None)
            self._grew.pop(tp, None)
        self.ask_again()  # what is asked for may name them

    def ask_again(self) -> None:
        """Ask at the next refresh, and drop the answer to a request made before now."""
        self._pending = None
        self.due = 0.0

    def quiet(self, tp: TopicPartition, seconds: float) -> bool:
        """The end of ``tp`` has not grown for ``seconds`` (a partition first seen counts as
        having just grown)."""
        end = self.end(tp)
        if end is None:
            return False
        now = self.clock()
        seen = self._grew.get(tp)
        if seen is None or end > seen[0]:
            self._grew[tp] = (end, now)
            return False
        return now - seen[1] >= seconds

    def end(self, tp: TopicPartition) -> int | None:
        """The end of an input partition as far as it is known: the larger of the end offset
        last listed (the last stable offset, with read_committed) and the high watermark of the
        latest fetch response."""
        try:
            highwater = self.consumer.highwater(tp)
        except KafkaError:
            highwater = None
        listed = self.listed.get(tp)
        if highwater is None:
            return listed
        return highwater if listed is None else max(highwater, listed)

    def refresh(self, owned: list[TopicPartition]) -> None:
        """Take the answer to the last request when it is in; ask again when due. The loop does
        not wait for the answer: with kafka-python that wait, behind the fetches' responses on
        the client's network thread, cost 8 % of the loop's time (README, Performance)."""
        now = self.clock()
        if self._pending is not None:
            self._take(now)
            return
        if now < self.due:
            return
        self.due = now + END_OFFSETS_INTERVAL_S
        if not owned:
            self.backoff = END_OFFSETS_INTERVAL_S  # nothing to ask: poll as usual (and rejoin)
            return
        try:
            self._pending = self.consumer.request_end_offsets(owned, timeout_ms=500)
        except (KafkaError, KeyError) as exc:
            self._failed(now, exc)
            return
        self._take(now)  # a client that waited for the answer

    def _take(self, now: float) -> None:
        assert self._pending is not None
        try:
            offsets = self._pending.result()
        except (KafkaError, KeyError) as exc:  # KeyError: a topic deleted (the rebalance then stops us)
            self._pending = None
            self._failed(now, exc)
            return
        if offsets is not None:
            self._pending = None
            self.listed.update(offsets)
            self.backoff = END_OFFSETS_INTERVAL_S

    def _failed(self, now: float, exc: Exception) -> None:
        # an unanswered request stays in flight until the client's request timeout: asking
        # every second would pile them up (and keep the client's network thread busy)
        self.backoff = min(END_OFFSETS_MAX_BACKOFF_S, self.backoff * 2)
        self.due = now + self.backoff
        log.debug("end offsets not available: %s", exc)

    def caught_up(self, partition: int, ps: PartitionState) -> Callable[[str], bool]:
        """A topic of this partition is caught up when it has nothing more to fetch now: what
        was fetched reaches its known end. (An input topic written in transactions ends on a
        commit marker that no fetched record covers: it then counts as behind, and the merge
        waits for it at most the aligner's ``max_wait`` each time it runs dry.)"""

        def caught_up(topic: str) -> bool:
            end = self.end(TopicPartition(topic, partition))
            fetched = ps.fetched.get(topic)
            return end is not None and fetched is not None and fetched >= end

        return caught_up

    def behind(self, tp: TopicPartition, fetched: int | None, position: int | None) -> bool:
        """The broker has committed records of ``tp`` that were not fetched yet: the end last
        listed (with read_committed, the last stable offset) lies past both the offset fetched up
        to and the consumer's position (which also passes commit markers and aborted records,
        which no fetched record covers)."""
        listed = self.listed.get(tp)
        reached = max(fetched if fetched is not None else -1, position if position is not None else -1)
        return listed is not None and reached >= 0 and reached < listed

    def lag(
        self, partitions: Mapping[int, PartitionState], topics: Iterable[str]
    ) -> dict[tuple[str, int], int]:
        """(topic, partition) -> records between the first unprocessed offset and the end."""
        lag = {}
        topics = tuple(topics)
        for p, ps in partitions.items():
            for topic in topics:
                end = self.end(TopicPartition(topic, p))
                start = ps.next_offsets.get(topic, ps.committed.get(topic))
                if end is not None:
                    lag[(topic, p)] = max(0, end - (start if start is not None else 0))
        return lag
