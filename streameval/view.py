"""What the daemon shows: one immutable :class:`View`, published by the loop, read by the
exporter and the HTTP pages from another thread. Merging per-partition snapshots is pure.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from streameval.config import Settings
from streameval.pipeline import Counters, Snapshot
from streameval.scoring import Sums

LATENCY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, math.inf)


def _merge_groups(target: dict[tuple[str, ...], Sums], source: Mapping[tuple[str, ...], Sums]) -> None:
    for group, sums in source.items():
        if group in target:
            target[group].merge(sums)
        else:
            target[group] = sums.copy()


def merge_snapshots(snapshots: Iterable[Snapshot]) -> Snapshot:
    """Pool the snapshots of several partitions: sums add up, the watermark is the lowest."""
    merged = Snapshot(
        watermark=math.inf,
        frontier=math.inf,
        windows={},
        settled={},
        provisional={},
        open_queries=0,
        orphans_held=0,
        counters=Counters(),
    )
    any_snapshot = False
    for snap in snapshots:
        any_snapshot = True
        merged.watermark = min(merged.watermark, snap.watermark)
        merged.frontier = min(merged.frontier, snap.frontier)
        for window, groups in snap.windows.items():
            _merge_groups(merged.windows.setdefault(window, {}), groups)
        _merge_groups(merged.settled, snap.settled)
        _merge_groups(merged.provisional, snap.provisional)
        merged.open_queries += snap.open_queries
        merged.orphans_held += snap.orphans_held
        c, s = merged.counters, snap.counters
        c.consumed.update(s.consumed)
        c.rejected.update(s.rejected)
        c.ignored.update(s.ignored)
        c.misrouted.update(s.misrouted)
        c.dead_lettered.update(s.dead_lettered)
        c.unattributed.update(s.unattributed)
        c.duplicates.update(s.duplicates)
        c.attributed += s.attributed
        c.groups_folded += s.groups_folded
        c.late_impressions += s.late_impressions
        merged.detectors += snap.detectors
    if not any_snapshot:
        merged.watermark = merged.frontier = -math.inf
    return merged


@dataclass
class Latency:
    """A cumulative histogram of processing latency (record's Kafka timestamp to processed)."""

    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: float = 0.0

    def observe_all(self, seconds: list[float]) -> None:
        """Count each of ``seconds`` (sorted here, in place) in the first bucket whose bound is
        >= it, a negative one as 0: sorted once, each bucket's count is the difference of two
        bisections (in C), not a call per record."""
        if not seconds:
            return
        seconds.sort()
        self.total += sum(seconds[bisect_right(seconds, 0.0) :])
        counts, below = self.counts, 0
        for i, bound in enumerate(LATENCY_BUCKETS):
            upto = bisect_right(seconds, bound)  # those <= bound (all of them at +Inf)
            counts[i] += upto - below
            below = upto

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, count in zip(LATENCY_BUCKETS, self.counts, strict=True):
            running += count
            out.append(("+Inf" if math.isinf(bound) else repr(bound), running))
        return out


@dataclass
class Operations:
    """Checkpoint and restore figures of one instance (cumulative counts, last durations)."""

    last_checkpoint: float | None = None  # wall time of the last committed checkpoint
    checkpoints: int = 0
    checkpoint_failures: int = 0
    checkpoint_seconds: float = 0.0  # the last one's duration
    checkpoint_entries: int = 0  # the last one's changelog entries
    checkpoint_bytes: int = 0  # the last one's bytes (changelog and dead-letter records)
    changelog_bytes: int = 0  # cumulative bytes of committed checkpoints
    restores: int = 0
    restore_records: int = 0  # cumulative changelog records read by restores
    restore_seconds: float = 0.0  # the last restore's duration
    partitions_restoring: int = 0
    last_failure: float | None = None  # wall time of the last failed checkpoint
    last_failure_reason: str = ""

    def failed(self, wall_time: float, reason: str) -> None:
        self.checkpoint_failures += 1
        self.last_failure, self.last_failure_reason = wall_time, reason

    def failing(self) -> bool:
        """Checkpoints fail: the last attempt failed (none committed since)."""
        return self.last_failure is not None and (
            self.last_checkpoint is None or self.last_failure > self.last_checkpoint
        )

    def checkpointed(self, wall_time: float, seconds: float, entries: int, size: int) -> None:
        self.last_checkpoint = wall_time
        self.checkpoints += 1
        self.checkpoint_seconds, self.checkpoint_entries, self.checkpoint_bytes = seconds, entries, size
        self.changelog_bytes += size

    def restored(self, records: int, seconds: float) -> None:
        self.restores += 1
        self.restore_records += records
        self.restore_seconds = seconds

    def copy(self) -> Operations:
        return replace(self)


@dataclass(frozen=True)
class View:
    """A consistent picture of the daemon at one moment."""

    settings: Settings
    snapshot: Snapshot
    partition_watermarks: Mapping[int, float]
    consumer_lag: Mapping[tuple[str, int], int]
    latency_buckets: tuple[tuple[str, int], ...]
    latency_sum: float
    wall_time: float
    ops: Operations
    ready: bool


def empty_view(settings: Settings, wall_time: float) -> View:
    return View(
        settings=settings,
        snapshot=merge_snapshots([]),
        partition_watermarks={},
        consumer_lag={},
        latency_buckets=tuple(Latency().cumulative()),
        latency_sum=0.0,
        wall_time=wall_time,
        ops=Operations(),
        ready=False,
    )
