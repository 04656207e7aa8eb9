"""Sliding event-time windows of settled queries, bucketed by impression time.

Window ``w`` holds the settled queries with ``F - w < imp.ts <= F``, where F is the settled
frontier ``watermark - max horizon``. Each window keeps buckets of :class:`Sums` per group at a
resolution of w/60, so memory is bounded (61 buckets per window and group) and a snapshot sums
at most 61 buckets; adding a query touches one bucket per window. The lower edge of a window is
exact to one bucket: a bucket is in the window while any part of it is after ``F - w``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from streameval.changes import Changes, Unrecorded
from streameval.config import Window
from streameval.scoring import Sums

BUCKETS_PER_WINDOW = 60


class _Ring:
    """One window's buckets: bucket index -> group -> Sums."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self.resolution = window.seconds / BUCKETS_PER_WINDOW
        self.buckets: dict[int, dict[tuple[str, ...], Sums]] = {}
        #: the first bucket still (partly) in the window at the current frontier; kept up to
        #: date by evict, so adding a query compares with it instead of recomputing it
        self.low: float = -math.inf

    def first_live_bucket(self, frontier: float) -> float:
        """Buckets with an index below this are entirely at or before ``frontier - w``."""
        if math.isinf(frontier):
            return -math.inf if frontier < 0 else math.inf
        return math.floor((frontier - self.window.seconds) / self.resolution)

    def next_boundary(self) -> float:
        """A frontier below which first_live_bucket stays at ``low``: the next bucket boundary,
        less a margin far wider than the rounding of the division, so that close to a
        boundary the formula decides."""
        if math.isinf(self.low):
            return self.low
        return (self.low + 1 - 1e-3) * self.resolution + self.window.seconds

    def evict(self, frontier: float) -> list[int]:
        """Drop the buckets that left the window; returns their indices."""
        low = self.first_live_bucket(frontier)
        if low <= self.low:  # the frontier has not crossed a bucket boundary
            return []
        self.low = low
        gone = [i for i in self.buckets if i < low]
        for index in gone:
            del self.buckets[index]
        return gone


class WindowedSums:
    """Settled-query sums per window and group."""

    def __init__(self, windows: Sequence[Window], n_metrics: int) -> None:
        self.rings = [_Ring(w) for w in windows]
        self.n_metrics = n_metrics
        self.frontier = -math.inf
        #: a frontier below this leaves every ring's first live bucket where it is (advance
        #: then only moves the frontier: it runs for every record)
        self._next_evict = -math.inf
        #: records ("w", window name, bucket index) of buckets changed (shared with the join)
        self.changes: Changes = Unrecorded()

    def add(
        self, imp_ts: float, group: tuple[str, ...], n_relevant: int, values: Sequence[float] | None
    ) -> None:
        """Add one settled query (imp_ts <= frontier) to every window that still covers it."""
        for ring in self.rings:
            index = math.floor(imp_ts / ring.resolution)
            if index < ring.low:
                continue
            groups = ring.buckets.get(index)
            if groups is None:
                groups = ring.buckets[index] = {}
            sums = groups.get(group)
            if sums is None:
                sums = groups[group] = Sums(self.n_metrics)
            sums.add(n_relevant, values)
            self.changes.add(("w", ring.window.name, index))

    def advance(self, frontier: float) -> None:
        """Move the settled frontier forward (never back) and drop buckets that left every window."""
        if frontier <= self.frontier:
            return
        self.frontier = frontier
        if frontier < self._next_evict:  # no window crosses a bucket boundary yet
            return
        for ring in self.rings:
            gone = ring.evict(frontier)
            if gone:
                self.changes.update(("w", ring.window.name, index) for index in gone)
        self._next_evict = min((ring.next_boundary() for ring in self.rings), default=math.inf)

    def ring(self, window_name: str) -> _Ring | None:
        """The buckets of one window, by its name."""
        return next((r for r in self.rings if r.window.name == window_name), None)

    def snapshot(self) -> dict[str, dict[tuple[str, ...], Sums]]:
        """Window name -> group -> Sums over the window's live buckets."""
        out: dict[str, dict[tuple[str, ...], Sums]] = {}
        for ring in self.rings:
            per_group: dict[tuple[str, ...], Sums] = {}
            for groups in ring.buckets.values():
                for group, sums in groups.items():
                    total = per_group.get(group)
                    if total is None:
                        total = per_group[group] = Sums(self.n_metrics)
                    total.merge(sums)
            out[ring.window.name] = per_group
        return out
