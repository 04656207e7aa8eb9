"""When the daemon runs CPython's cycle collector over everything it holds.

The daemon's state is millions of long-lived objects (open queries, their scores, dedup keys,
tombstones). By default CPython scans all of them again each time the objects that survived two
collections grow by a quarter: on a backlog, where the state only grows, that was a fifth of the
daemon's time (2.5 of 11.8 s on a 243k-record backlog, 16 full collections). Almost none of
the state is garbage: it is freed by reference counting the moment a query settles or a key is
forgotten, which the collector's settings do not touch. So the daemon turns the automatic full
collections off and runs one itself every ``FULL_COLLECTION_INTERVAL_S``: a reference cycle
that becomes garbage among old objects (the Kafka client's futures and callbacks make some) is
reclaimed at most that late. The young generations are collected as usual.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

FULL_COLLECTION_INTERVAL_S = 300.0
#: gc's thresholds are C ints: the oldest generation's count never reaches this
_NEVER = 2**31 - 1


class FullCollections:
    """Automatic full collections off while the daemon runs; one every ``interval`` instead."""

    def __init__(self, interval: float = FULL_COLLECTION_INTERVAL_S) -> None:
        self.interval = interval
        self._thresholds = gc.get_threshold()
        young, middle = self._thresholds[:2]
        gc.set_threshold(young, middle, _NEVER)
        self._due = time.monotonic() + interval

    def end(self) -> None:
        """The process's own thresholds again."""
        gc.set_threshold(*self._thresholds)

    def tick(self) -> None:
        """Between rounds of the loop: a full collection when one is due."""
        now = time.monotonic()
        if now < self._due:
            return
        found = gc.collect()
        took = time.monotonic() - now
        self._due = time.monotonic() + self.interval
        log.debug("full garbage collection: %d unreachable objects, %.3f s", found, took)
