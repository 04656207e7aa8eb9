"""Event-time alignment of co-partitioned topics.

Partition p of the impressions topic and partition p of every events topic hold the records of
the same queries. :class:`Aligner` buffers what was fetched from each of them and hands records
out in event-time order across the topics: the next record is the head with the smallest
timestamp, but only while every topic of the partition either has a buffered record or is
caught up (nothing more to fetch). A topic that is behind blocks the others -- the loop pauses
the topics that run ahead -- so a backlog is processed exactly like live traffic.

How long an empty topic blocks depends on what is known of it (as in Kafka Streams since
KIP-695). One that is *behind* -- the broker has committed records past what was fetched --
blocks until they arrive, however long the fetch takes (a rebalance, a slow broker): those
records are certainly there, and going on without them would count them late. One that is
neither behind nor caught up (its end not known yet, or records written but not yet committed)
blocks for at most ``max_wait`` seconds (Kafka Streams' ``max.task.idle.ms``), so a topic that
may never bring anything cannot stop the others forever. The timed wait is per topic and starts
again each time the topic runs dry: a topic that waited out its time once does not let the
merge run ahead of another topic that falls behind later.

Rejected and ignored records carry no usable time; they are handed out as soon as they reach the head of
their topic's buffer, which keeps each topic in offset order (committed offsets never skip
an unprocessed record).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from streameval.records import Engagement, Ignored, Impression, Rejection


@dataclass(slots=True)
class Entry:
    """One fetched record: where it came from, and what decoding made of it."""

    topic: str
    offset: int
    record: Impression | Engagement | Rejection | Ignored
    message: Any  # the client's record (raw value, key, headers), for the dead-letter topic


class Aligner:
    """Buffers of one partition number, merged in event-time order."""

    def __init__(
        self,
        topics: Iterable[str],
        clock: Callable[[], float],
        max_wait: float = 1.0,
        waits: dict[str, float] | None = None,
    ):
        self.buffers: dict[str, deque[Entry]] = {t: deque() for t in topics}
        self.clock = clock
        self.max_wait = max_wait
        #: topic -> its own max_wait, where it differs (a repartition topic: one commit interval more)
        self.waits = waits or {}
        self._dry_since: dict[str, float] = {}  # topic -> when it ran dry without being caught up

    def add(self, topic: str) -> None:
        """One more input to merge (a partition the stage now owns)."""
        self.buffers.setdefault(topic, deque())

    def remove(self, topic: str) -> None:
        """An input no longer merged; what it buffered is dropped (read again by its next owner)."""
        self.buffers.pop(topic, None)
        self._dry_since.pop(topic, None)

    def push(self, entry: Entry) -> None:
        self.buffers[entry.topic].append(entry)

    def extend(self, topic: str, entries: Iterable[Entry]) -> None:
        """Entries of ``topic``, in offset order."""
        self.buffers[topic].extend(entries)

    def buffered(self, topic: str) -> int:
        return len(self.buffers[topic])

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def pop(
        self, caught_up: Callable[[str], bool], behind: Callable[[str], bool] | None = None
    ) -> Entry | None:
        """The next entry to process, or None when the merge must wait for more input.
        ``caught_up(topic)``: nothing more to fetch now; ``behind(topic)``: committed records
        past what was fetched (wait for them without a time limit)."""
        best: deque[Entry] | None = None
        best_ts = 0.0
        dry: list[str] = []
        for topic, buffer in self.buffers.items():
            if not buffer:
                if caught_up(topic):
                    self._dry_since.pop(topic, None)
                elif behind is not None and behind(topic):
                    self._dry_since.pop(topic, None)
                    return None  # its records are on the broker: the merge waits for them
                else:
                    dry.append(topic)
                continue
            self._dry_since.pop(topic, None)
            head = buffer[0].record
            if isinstance(head, Rejection | Ignored):
                return buffer.popleft()
            if best is None or head.ts < best_ts:
                best, best_ts = buffer, head.ts
        if best is None:
            return None
        if dry:
            now = self.clock()
            for topic in dry:
                if now - self._dry_since.setdefault(topic, now) < self.waits.get(topic, self.max_wait):
                    return None  # this topic may still bring an earlier record
        return best.popleft()

    def take(
        self, caught_up: Callable[[str], bool], behind: Callable[[str], bool] | None = None
    ) -> Iterator[Entry]:
        """The entries :meth:`pop` would hand out one call at a time, in the same order, until
        it would return None. While every topic has a buffered record (a backlog), the next one
        is chosen among the heads without asking ``caught_up`` or ``behind``, as :meth:`pop`
        does then."""
        buffers = list(self.buffers.values())
        while True:
            if all(buffers) and len(buffers) == 2:  # impressions and one events topic
                self._dry_since.clear()
                first, second = buffers
                while first and second:
                    # as below: a record without a time first, then the earlier, first's on a tie
                    a, b = first[0].record, second[0].record
                    if isinstance(a, _UNTIMED) or not (isinstance(b, _UNTIMED) or b.ts < a.ts):
                        yield first.popleft()
                    else:
                        yield second.popleft()
            elif all(buffers):
                self._dry_since.clear()
                while True:
                    best: deque[Entry] | None = None
                    best_ts = 0.0
                    for buffer in buffers:
                        head = buffer[0].record
                        if isinstance(head, Rejection | Ignored):
                            best = buffer
                            break
                        if best is None or head.ts < best_ts:
                            best, best_ts = buffer, head.ts
                    assert best is not None  # every buffer holds a record
                    yield best.popleft()
                    if not best:
                        break
            entry = self.pop(caught_up, behind)
            if entry is None:
                return
            yield entry


#: what is handed out as soon as it heads its buffer (rejected and ignored records)
_UNTIMED = (Rejection, Ignored)


def kafka_seconds(message: Any) -> float | None:
    """A Kafka record's own timestamp in seconds (``ts = "@timestamp"``); None when it has none."""
    timestamp = getattr(message, "timestamp", None)
    return timestamp / 1000 if timestamp is not None and timestamp >= 0 else None
