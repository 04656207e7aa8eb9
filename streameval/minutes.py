"""The regression detectors' input: settled queries per event-time minute (README, Regression
detectors), gathered per pipeline and, in the daemon, combined across partitions. No I/O.

A pipeline's :class:`MinuteSums` holds the minutes its settled frontier has not passed yet.
``replay`` hands complete minutes straight to its detectors. In the daemon each partition
hands them on through the minutes topic (``<group_id>-minutes``, one partition), inside the
checkpoint that commits its state: one record per partition and checkpoint, ``{"p": partition,
"through": the last complete minute, "minutes": [[minute, [[labels, [n, sum, squares]], ...]],
...]}``. The member that owns partition 0 reads the topic into a :class:`Combiner`, which runs a
minute once every partition has passed it, summing the partitions in partition order; its
state, with the offset it has read to, is part of partition 0's checkpoint, so a restart or a
rebalance resumes it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from streameval.changes import Changes, Unrecorded
from streameval.detect import MINUTE, Detectors, Group, Moments
from streameval.scoring.measures import MEASURES


class MinuteSums:
    """One pipeline's settled queries per event-time minute and group, until the minute is
    complete: when the settled frontier has passed its end, no query of it can settle later."""

    __slots__ = ("open", "no_relevant_counts", "through", "changes", "first", "handed_on")

    def __init__(self, no_relevant: str) -> None:
        #: minute -> group -> moments of its counted queries so far
        self.open: dict[int, dict[Group, Moments]] = {}
        self.no_relevant_counts = no_relevant == "zero"
        #: the last minute handed on (the daemon's partitions)
        self.through: int | None = None
        #: records ("m", minute) of minutes handed on (shared with the pipeline); the open ones,
        #: one or two at the frontier, go into every checkpoint instead of being recorded per query
        self.changes: Changes = Unrecorded()
        #: the earliest open minute (None: none open)
        self.first: int | None = None
        #: whether the minutes are handed on (the daemon's partitions, :meth:`hand_on`); a
        #: pipeline without detectors that does not hand them on drops them once complete
        self.handed_on = False

    @classmethod
    def of(cls, settings: Any) -> MinuteSums | None:
        """The accumulator ``settings`` need; None when the detectors are off (a weighted first
        metric)."""
        return None if MEASURES[settings.metrics[0].name].weighted else cls(settings.no_relevant)

    def counted(self, values: Any) -> float | None:
        """A query's value as the detectors count it (``values`` None: no relevant item)."""
        if values is None:
            return 0.0 if self.no_relevant_counts else None
        return float(values[0])

    def add(self, ts: float, group: Group, values: Any) -> None:
        """One settled query (``values`` None: no relevant item)."""
        x = self.counted(values)
        if x is None:
            return
        minute = int(ts // MINUTE)
        groups = self.open.get(minute)
        if groups is None:
            groups = self.open[minute] = {}
            if self.first is None or minute < self.first:
                self.first = minute
        moments = groups.get(group)
        if moments is None:
            groups[group] = [1.0, x, x * x]
        else:
            moments[0] += 1.0
            moments[1] += x
            moments[2] += x * x

    def restore(self, minute: int, groups: dict[Group, Moments]) -> None:
        """An open minute read back from a checkpoint."""
        self.open[minute] = groups
        self.first = minute if self.first is None else min(self.first, minute)

    def complete(self, frontier: float) -> list[tuple[int, dict[Group, Moments]]]:
        """Take the minutes that ended at or before ``frontier``, in order."""
        if self.first is None or (self.first + 1) * MINUTE > frontier:
            return []
        done = sorted(m for m in self.open if (m + 1) * MINUTE <= frontier)
        self.changes.update(("m", m) for m in done)
        out = [(m, self.open.pop(m)) for m in done]
        self.first = min(self.open) if self.open else None
        return out

    def due(self, frontier: float) -> bool:
        """Whether :meth:`hand_on` has something to hand on at ``frontier``."""
        return (
            self.handed_on
            and math.isfinite(frontier)
            and (self.through is None or math.floor(frontier / MINUTE) - 1 > self.through)
        )

    def hand_on(self, partition: int, frontier: float) -> dict[str, Any] | None:
        """The minutes topic's record of this partition: the minutes complete at ``frontier``
        and the last complete minute; None when nothing moved since the last one."""
        if not self.due(frontier):
            return None
        through = math.floor(frontier / MINUTE) - 1
        done = self.complete(frontier)
        self.through = through
        return {
            "p": partition,
            "through": through,
            "minutes": [[m, [[list(g), moments] for g, moments in groups.items()]] for m, groups in done],
        }


class Combiner:
    """The detectors of a consumer group, fed every partition's minutes in any interleaving: a
    minute runs once every partition's ``through`` has reached it, its groups summed over the
    partitions in partition order (so the sums do not depend on the order records arrived in)."""

    def __init__(self, detectors: Detectors, partitions: int) -> None:
        self.detectors = detectors
        self.partitions = partitions
        #: the next offset of the minutes topic to read
        self.offset = 0
        self.through: dict[int, int] = {}
        #: minute -> partition -> group -> moments
        self.parts: dict[int, dict[int, dict[Group, Moments]]] = {}
        self.changed = False

    def add(self, offset: int, record: Mapping[str, Any]) -> list[tuple[str, Group]]:
        """One record of the minutes topic at ``offset``; returns the alarms raised."""
        if offset < self.offset:
            return []  # read already (and in the state)
        # read it whole before changing anything: a record that does not fit raises, unapplied
        partition, through = int(record["p"]), int(record["through"])
        minutes = [
            (int(minute), {tuple(g): [float(x) for x in m] for g, m in groups})
            for minute, groups in record["minutes"]
        ]
        self.offset = offset + 1
        self.changed = True
        for minute, sums in minutes:
            self.parts.setdefault(minute, {})[partition] = sums
        self.through[partition] = max(through, self.through.get(partition, -1))
        return self._run()

    def _run(self) -> list[tuple[str, Group]]:
        if len(self.through) < self.partitions:
            return []
        ready = min(self.through[p] for p in range(self.partitions) if p in self.through)
        last = self.detectors.last_minute
        raised = []
        for minute in sorted(m for m in self.parts if m <= ready):
            by_partition = self.parts.pop(minute)
            if last is not None and minute <= last:
                continue  # before the detectors' last minute (a partition count that grew)
            sums: dict[Group, Moments] = {}
            for partition in sorted(by_partition):
                for group, moments in by_partition[partition].items():
                    total = sums.get(group)
                    if total is None:
                        sums[group] = list(moments)
                    else:
                        for i in range(3):
                            total[i] += moments[i]
            raised += self.detectors.minute(minute, sums)
        return raised

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "through": [[p, m] for p, m in self.through.items()],
            "parts": [
                [m, [[p, [[list(g), v] for g, v in groups.items()]] for p, groups in by_p.items()]]
                for m, by_p in self.parts.items()
            ],
            "detectors": self.detectors.to_dict(),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        self.offset = int(data["offset"])
        self.through = {int(p): int(m) for p, m in data["through"]}
        self.parts = {
            int(m): {int(p): {tuple(g): list(v) for g, v in groups} for p, groups in by_p}
            for m, by_p in data["parts"]
        }
        self.detectors.load(data["detectors"])
