"""When CPython's cycle collector runs over what streameval holds: the one place of that policy.

The state is millions of long-lived objects (open queries, their scores, dedup keys,
tombstones), and almost none of it is garbage: it is freed by reference counting the moment a
query settles or a key is forgotten, which the collector's settings do not touch. By default
CPython scans all of it again each time the objects that survived two collections grow by a
quarter, which on a growing state is a large share of the run (figures: ``benchmarks/README.md``,
"Figure 2 (daemon)"). So:

- the daemon turns the automatic full collections off and runs one itself every
  ``FULL_COLLECTION_INTERVAL_S`` (:class:`FullCollections`): a reference cycle that becomes
  garbage among old objects (the Kafka client's futures and callbacks make some) is reclaimed at
  most that late;
- it collects the young generations once after each round of its loop instead of every 700
  allocations (``young_after_rounds``): an object a round leaves for the state is scanned once
  (``gc.collect(1)`` moves what survives to the old generation), not twice (young, then middle),
  and what a round makes and frees by reference counting not at all. On figure 2's backlog the
  collector's time went from 0.40-0.43 s to 0.18-0.19 s (``benchmarks/README.md``);
- a partition's dropped state, which is held in reference cycles (its pipeline and join point
  at each other), is reclaimed at once (:func:`reclaim_now`);
- ``replay``, which holds everything until the end and makes no cycles, runs with the collector
  off (:func:`paused`), and a command about to exit leaves what it built to the end of the
  process (:func:`keep_until_exit`) before the collector is back on: else its next young
  collection scans every object made while it was off (0.3 s on 1M records).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

FULL_COLLECTION_INTERVAL_S = 300.0
#: gc's thresholds are C ints: the oldest generation's count never reaches this
_NEVER = 2**31 - 1


class FullCollections:
    """Automatic full collections off while the daemon runs; one every ``interval`` instead.
    With ``young_after_rounds``, no automatic collection at all: :meth:`tick`, called after each
    round, collects the young generations."""

    def __init__(
        self, interval: float = FULL_COLLECTION_INTERVAL_S, young_after_rounds: bool = False
    ) -> None:
        self.interval = interval
        self._thresholds = gc.get_threshold()
        young, middle = self._thresholds[:2]
        gc.set_threshold(young, middle, _NEVER)
        self._due = time.monotonic() + interval
        self._young = young_after_rounds and gc.isenabled()
        if self._young:
            gc.disable()

    def end(self) -> None:
        """The process's own thresholds again (and automatic collections, if it had them)."""
        gc.set_threshold(*self._thresholds)
        if self._young:
            gc.enable()

    def tick(self) -> None:
        """Between rounds of the loop: the young generations (``young_after_rounds``), or a
        full collection when one is due."""
        now = time.monotonic()
        if now < self._due:
            if self._young:
                gc.collect(1)
            return
        found = gc.collect()
        took = time.monotonic() - now
        self._due = time.monotonic() + self.interval
        log.debug("full garbage collection: %d unreachable objects, %.3f s", found, took)


def reclaim_now() -> None:
    """A full collection now (state just dropped, held in reference cycles)."""
    gc.collect()


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the block, as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: what a command leaves for the end of the process to reclaim
_LEFT_TO_EXIT: list[object] = []


def keep_until_exit(held: object) -> None:
    """Hold ``held`` until the process exits (which reclaims it at once, where freeing millions
    of objects one by one is work); the collector need never scan it again."""
    _LEFT_TO_EXIT.append(held)
    gc.freeze()


def kept_for_exit() -> bool:
    """Whether something is held for the exit (then the program ends with ``os._exit``)."""
    return bool(_LEFT_TO_EXIT)
