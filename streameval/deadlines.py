"""Deadlines: items that fall due once the watermark passes their time, in (time, arrival) order.

The join keeps four kinds (queries to settle, orphans, tombstones and dedup keys to forget).
One binary heap of every pending item costs about log2(n) tuple comparisons a push and a pop,
so a record would cost more the larger the state. Here items are bucketed by whole seconds: a small
heap per second, and a heap of the seconds that hold items. With many items a second (a large
state) an operation sorts within one second's items; with few, the heap of seconds is small.
Items come out in the order one heap would give: by time, then by arrival.

:func:`deadlines` gives the native core's ``Deadlines`` where it is installed (README,
Performance: "The native core"): one binary heap of (time, arrival) in compiled code, which
hands out the same items in the same order (``tests/test_deadlines.py`` holds the two equal).
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
from typing import Generic, Protocol, TypeVar

from streameval.native import core

T = TypeVar("T")


class Queue(Protocol[T]):
    """What the join needs of deadlines: :class:`Deadlines`, or the native core's (a compiled
    build checks attribute types, so the join's are typed by this protocol)."""

    def __len__(self) -> int: ...

    def push(self, when: float, item: T) -> None: ...

    def pop_due(self, watermark: float) -> list[T]: ...

    def earliest(self) -> float: ...


_INFINITE = sys.maxsize  # the "second" of items at +inf (never due) and, negated, at -inf


class Deadlines(Generic[T]):
    """Items with a time; :meth:`pop_due` hands out those whose time is below a watermark."""

    __slots__ = ("_buckets", "_seconds", "_seq", "_len")

    def __init__(self) -> None:
        self._buckets: dict[int, list[tuple[float, int, T]]] = {}  # second -> heap of its items
        self._seconds: list[int] = []  # heap of the seconds in _buckets
        self._seq = itertools.count()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def push(self, when: float, item: T) -> None:
        """Hold ``item`` until the watermark passes ``when``."""
        second = math.floor(when) if math.isfinite(when) else (_INFINITE if when > 0 else -_INFINITE)
        entry = (when, next(self._seq), item)
        bucket = self._buckets.get(second)
        if bucket is None:
            self._buckets[second] = [entry]
            heapq.heappush(self._seconds, second)
        else:
            heapq.heappush(bucket, entry)
        self._len += 1

    def earliest(self) -> float:
        """The time of the earliest item (-inf for one at NaN, which sorts with -inf), inf with
        none: no watermark up to it makes any item due."""
        if not self._seconds:
            return math.inf
        when = self._buckets[self._seconds[0]][0][0]
        return -math.inf if math.isnan(when) else when

    def pop_due(self, watermark: float) -> list[T]:
        """Remove and return the items whose time is below ``watermark``, earliest first."""
        out: list[T] = []
        seconds, buckets = self._seconds, self._buckets
        while seconds and seconds[0] < watermark:
            second = seconds[0]
            bucket = buckets[second]
            if second + 1 <= watermark and second != _INFINITE:  # all of [second, second + 1) is due
                bucket.sort()
                out += [entry[2] for entry in bucket]
                del buckets[second]
                heapq.heappop(seconds)
                continue
            while bucket and bucket[0][0] < watermark:
                out.append(heapq.heappop(bucket)[2])
            if bucket:
                break  # the rest of this second, and every later second, is not due yet
            del buckets[second]
            heapq.heappop(seconds)
        self._len -= len(out)
        return out


def deadlines() -> Queue[T]:
    """An empty :class:`Deadlines`: the native core's where it is installed."""
    if core is None or not hasattr(core.Deadlines, "earliest"):  # none, or one built before it
        return Deadlines()
    queue: Queue[T] = core.Deadlines()
    return queue
