"""Records -> join -> scoring -> windows, with every counter. No I/O: the daemon feeds it bytes
(or decoded records) and reads :meth:`Pipeline.snapshot`; ``replay`` computes its answer on
time-ordered input in one batch (``replay.join_in_batch``) and keeps its totals in one.

Processing one record: decode (a bad one is counted and handed back to the caller for the
dead-letter topic), apply it to the join, then let the watermark advance, which settles queries
and expires orphans. Settled queries go into the cumulative totals and the sliding windows;
open ones are summed as the provisional view.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from streameval.clock import Watermark
from streameval.config import Settings
from streameval.join import Joiner, OpenQuery
from streameval.records import (
    Engagement,
    Impression,
    Rejection,
    decode_event,
    decode_impression,
)
from streameval.scoring import Scorer, ScoringParams, Sums
from streameval.windows import WindowedSums

OTHER_GROUP = "__other__"


class GroupCap:
    """The ``max_groups`` cap: the first groups seen keep their labels, later ones fold into
    ``__other__``. One cap can be shared by several pipelines (the daemon's partitions), so the
    cap holds for everything an instance exports."""

    def __init__(self, max_groups: int, n_labels: int) -> None:
        self.max_groups = max_groups
        #: each admitted group's labels, to itself: every query of a group holds the one tuple
        self.known: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.other = (OTHER_GROUP,) * n_labels

    def admit(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """Count ``labels`` as admitted (a restored group the previous owner admitted)."""
        return self.known.setdefault(labels, labels)

    def map(self, labels: tuple[str, ...]) -> tuple[str, ...] | None:
        """The labels to use, or None when they are folded into ``other``."""
        known = self.known.get(labels)
        if known is not None:
            return known
        if len(self.known) < self.max_groups:
            self.known[labels] = labels
            return labels
        return None


@dataclass
class Counters:
    """Everything counted about the input, cumulative."""

    consumed: Counter[str] = field(default_factory=Counter)  # topic -> records read
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, reason)
    dead_lettered: Counter[tuple[str, str]] = field(default_factory=Counter)  # sent to the DLQ
    unattributed: Counter[str] = field(default_factory=Counter)  # reason
    duplicates: Counter[str] = field(default_factory=Counter)  # "impressions" / "events"
    attributed: int = 0
    groups_folded: int = 0  # impressions whose group was folded into __other__
    late_impressions: int = 0  # impressions that arrived after their settling time


@dataclass
class Snapshot:
    """A consistent read of the pipeline for exporters and reports."""

    watermark: float
    frontier: float
    windows: dict[str, dict[tuple[str, ...], Sums]]
    settled: dict[tuple[str, ...], Sums]
    provisional: dict[tuple[str, ...], Sums]
    open_queries: int
    orphans_held: int
    counters: Counters


class Pipeline:
    """The whole evaluation, fed one record at a time."""

    def __init__(
        self,
        settings: Settings,
        wall_clock: Callable[[], float] | None = None,
        remember_until_end: bool = False,
        group_cap: GroupCap | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = settings.metrics
        self.scorer = Scorer(
            ScoringParams(
                metrics=settings.metrics,
                ap_denominator=settings.ap_denominator,
                ndcg_gain=settings.ndcg_gain,
                min_grade=settings.min_grade,
                unshown_items=settings.unshown_items,
            )
        )
        self.watermark = Watermark(settings.allowed_lateness, wall_clock)
        self.joiner = Joiner(settings, self.scorer, self, remember_until_end)
        self.windows = WindowedSums(settings.windows, len(settings.metrics))
        self.counters = Counters()
        self.settled_totals: dict[tuple[str, ...], Sums] = {}
        self.provisional: dict[tuple[str, ...], Sums] = {}
        self.group_cap = group_cap or GroupCap(settings.max_groups, len(settings.group_by))

    # --- input ---------------------------------------------------------------------------------

    def decode_impression(self, raw: bytes | str) -> Impression | Rejection:
        """Decode one impression (counts nothing: records are counted when handled)."""
        return decode_impression(raw, self.settings.group_by)

    def decode_event(self, raw: bytes | str, topic: str) -> Engagement | Rejection:
        """Decode one engagement event; ``topic`` may give it a default type."""
        return decode_event(raw, self.settings.grades, self.settings.topic_types.get(topic))

    def handle(self, topic: str, record: Impression | Engagement | Rejection) -> None:
        """Count one decoded record of ``topic`` as consumed, and reject or process it."""
        self.counters.consumed[topic] += 1
        if isinstance(record, Rejection):
            self.counters.rejected[(topic, record.reason)] += 1
        else:
            self.process(record)

    def ingest(self, raw: bytes | str, topic: str, is_impression: bool) -> Rejection | None:
        """Decode and handle one record; a bad one is counted and its Rejection returned."""
        record = self.decode_impression(raw) if is_impression else self.decode_event(raw, topic)
        self.handle(topic, record)
        return record if isinstance(record, Rejection) else None

    def process(self, record: Impression | Engagement) -> None:
        """Apply one decoded record, then advance the watermark to it."""
        watermark = self.watermark
        before = watermark.value
        if type(record) is Impression:
            self.joiner.impression(record, before)
        else:
            self.joiner.event(record, before)  # type: ignore[arg-type]
        after = watermark.observe(record.ts)
        # nothing the record added can fall due at the watermark it was judged against (a due
        # query or orphan is rejected as late instead), so an unmoved watermark settles nothing
        if after != before:
            self._advance(after)

    def tick(self) -> None:
        """Input is quiet: let the watermark advance with the wall clock."""
        self._advance(self.watermark.idle())

    def finish(self) -> None:
        """End of input: everything settles and every orphan left is ``unknown_query``."""
        self._advance(self.watermark.finish())

    def _advance(self, watermark: float) -> None:
        self.joiner.advance(watermark)
        if not math.isinf(watermark):
            self.windows.advance(watermark - self.joiner.max_horizon)

    # --- JoinSink ------------------------------------------------------------------------------

    def group_of(self, labels: tuple[str, ...], queries: int = 1) -> tuple[str, ...]:
        """The group of ``queries`` impressions with these labels (replay asks once for all of
        a group's queries)."""
        mapped = self.group_cap.map(labels)
        if mapped is None:
            self.counters.groups_folded += queries
            return self.group_cap.other
        return mapped

    def _sums(self, table: dict[tuple[str, ...], Sums], group: tuple[str, ...]) -> Sums:
        sums = table.get(group)
        if sums is None:
            sums = table[group] = Sums(len(self.metrics))
        return sums

    def opened(self, query: OpenQuery) -> None:
        self._sums(self.provisional, query.group).add(0, None)

    def restored_open(self, query: OpenQuery) -> None:
        """An open query read back from a checkpoint joins the provisional sums."""
        self._sums(self.provisional, query.group).add(query.n_relevant, query.values)

    def changed(self, query: OpenQuery, old_n_relevant: int, old_values: tuple[float, ...] | None) -> None:
        sums = self._sums(self.provisional, query.group)
        sums.add(old_n_relevant, old_values, -1)
        sums.add(query.n_relevant, query.values)

    def settled(self, query: OpenQuery) -> None:
        self._sums(self.settled_totals, query.group).add(query.n_relevant, query.values)
        provisional = self._sums(self.provisional, query.group)
        provisional.add(query.n_relevant, query.values, -1)
        provisional.reset_if_empty()
        self.windows.add(query.ts, query.group, query.n_relevant, query.values)

    def unattributed(self, reason: str) -> None:
        self.counters.unattributed[reason] += 1

    def duplicate(self, kind: str) -> None:
        self.counters.duplicates[kind] += 1

    def attributed(self) -> None:
        self.counters.attributed += 1

    def late_impression(self) -> None:
        self.counters.late_impressions += 1

    # --- output --------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Copies of every aggregate, safe to read while the pipeline goes on."""
        return Snapshot(
            watermark=self.watermark.value,
            frontier=self.windows.frontier,
            windows=self.windows.snapshot(),
            settled={g: s.copy() for g, s in self.settled_totals.items()},
            provisional={g: s.copy() for g, s in self.provisional.items()},
            open_queries=len(self.joiner.open),
            orphans_held=self.joiner.orphan_count,
            counters=self.counters,
        )
