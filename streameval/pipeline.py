"""Records -> join -> scoring -> windows, with every counter. No I/O: the daemon feeds it bytes
(or decoded records) and reads :meth:`Pipeline.snapshot`; ``replay`` computes its answer on
time-ordered input in one batch (``replay.batch``) and keeps its totals in one.

Processing one record: decode (a bad one is counted and handed back to the caller for the
dead-letter topic), apply it to the join, then let the watermark advance, which settles queries
and expires orphans. Settled queries go into the cumulative totals and the sliding windows;
open ones are summed as the provisional view.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streameval.changes import Changes
from streameval.clock import Watermark
from streameval.config import Settings
from streameval.decoding import Decoder
from streameval.detect import DetectorRow, Detectors
from streameval.groups import GroupCap
from streameval.join import Joiner, OpenQuery
from streameval.minutes import Combiner, MinuteSums
from streameval.packs import Packs
from streameval.records import Engagement, Ignored, Impression, Rejection
from streameval.scoring import Scorer, ScoringParams, Sums
from streameval.windows import WindowedSums


@dataclass
class Counters:
    """Everything counted about the input, cumulative."""

    consumed: Counter[str] = field(default_factory=Counter)  # topic -> records read
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, reason)
    ignored: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, type): ignore_types
    misrouted: Counter[str] = field(default_factory=Counter)  # topic -> records not in murmur2's partition
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
    #: the regression detectors' rows (:meth:`Detectors.rows`): partition 0's in the daemon
    detectors: list[DetectorRow] = field(default_factory=list)


class Pipeline:
    """The whole evaluation, fed one record at a time."""

    def __init__(
        self,
        settings: Settings,
        wall_clock: Callable[[], float] | None = None,
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
        self.joiner = Joiner(settings, self.scorer, self)
        self.windows = WindowedSums(settings.windows, len(settings.metrics))
        #: the state keys changed since the last checkpoint: none recorded until
        #: :meth:`record_changes` (a pipeline that is never checkpointed records nothing)
        self.changes: Changes = self.joiner.changes
        #: which changelog pack holds each query's and dedup key's newest entry (streameval.packs)
        self.packs = Packs()
        self.counters = Counters()
        self.settled_totals: dict[tuple[str, ...], Sums] = {}
        self.provisional: dict[tuple[str, ...], Sums] = {}
        self.group_cap = group_cap or GroupCap.of(settings)
        #: settled queries per minute for the regression detectors (None: the first metric is
        #: weighted); the pipeline feeds complete minutes to ``detectors`` when it has them
        #: (replay); the daemon's partitions hand theirs on (README, Regression detectors)
        self.minutes = MinuteSums.of(settings)
        self.detectors: Detectors | None = None
        #: the consumer group's detectors, on the daemon's partition 0 (README, Regression
        #: detectors); part of its state
        self.combiner: Combiner | None = None
        # the event-time guard measures from the wall clock; in pure event time (replay, tests)
        # from the moment the pipeline was made
        started = time.time()
        self.decoder = Decoder(settings, wall_clock or (lambda: started))

    def record_changes(self) -> None:
        """From now on, record which state keys change (the daemon's pipelines, once restored)."""
        self.changes = self.joiner.changes = self.windows.changes = Changes()
        if self.minutes is not None:
            self.minutes.changes = self.changes

    # --- input ---------------------------------------------------------------------------------

    def decode_impression(self, raw: bytes | str, kafka_ts: float | None = None) -> Impression | Rejection:
        """Decode one impression (counts nothing: records are counted when handled);
        ``kafka_ts`` is the Kafka record's timestamp in seconds, if any."""
        fields = self.decoder.impression(raw, kafka_ts)
        if type(fields) is Rejection:
            return fields
        query_id, ts, items, group = fields  # type: ignore[misc]
        return Impression(query_id, ts, tuple(items), group)

    def decode_event(
        self, raw: bytes | str, topic: str, kafka_ts: float | None = None
    ) -> Engagement | Rejection | Ignored:
        """Decode one engagement event; ``topic`` may give it a default type."""
        fields = self.decoder.event(raw, topic, kafka_ts)
        if type(fields) is tuple:
            return Engagement(*fields)
        return fields  # type: ignore[return-value]

    def decode(
        self, topic: str, raw: bytes | str, kafka_ts: float | None = None
    ) -> Impression | Engagement | Rejection | Ignored:
        """Decode one record of ``topic``: an impression from the impressions topic, else an event."""
        if topic == self.settings.impressions_topic:
            return self.decode_impression(raw, kafka_ts)
        return self.decode_event(raw, topic, kafka_ts)

    def decode_values(
        self, topic: str, values: list[Any]
    ) -> list[Impression | Engagement | Rejection | Ignored]:
        """Kafka records' values of ``topic`` (None: an empty one) decoded as :meth:`decode`
        decodes each, in one call to the native core where it is installed; an impression's
        shown list compacted (:func:`~streameval.scoring.query.compact`), as the join holds it."""
        if topic == self.settings.impressions_topic:
            return [Impression(*f) if type(f) is tuple else f for f in self.decoder.impression_values(values)]  # type: ignore[misc]
        return [Engagement(*f) if type(f) is tuple else f for f in self.decoder.event_values(values, topic)]  # type: ignore[misc]

    def handle(self, topic: str, record: Impression | Engagement | Rejection | Ignored) -> None:
        """Count one decoded record of ``topic`` as consumed, and reject, ignore or process it."""
        self.counters.consumed[topic] += 1
        if type(record) is Rejection:
            self.counters.rejected[(topic, record.reason)] += 1
        elif type(record) is Ignored:
            self.counters.ignored[(topic, record.type)] += 1
        else:
            self.process(record)  # type: ignore[arg-type]

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
        minutes = self.minutes
        if minutes is not None and not minutes.handed_on:
            for minute, sums in minutes.complete(watermark - self.joiner.max_horizon):
                if self.detectors is not None:
                    self.detectors.minute(minute, sums)

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
        self._sums(self.provisional, query.group).replace(
            old_n_relevant, old_values, query.n_relevant, query.values
        )

    def settled(self, query: OpenQuery) -> None:
        self._sums(self.settled_totals, query.group).add(query.n_relevant, query.values)
        provisional = self._sums(self.provisional, query.group)
        provisional.add(query.n_relevant, query.values, -1)
        provisional.reset_if_empty()
        self.windows.add(query.ts, query.group, query.n_relevant, query.values)
        if self.minutes is not None:
            self.minutes.add(query.ts, query.group, query.values)

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
        detectors = self.combiner.detectors if self.combiner is not None else self.detectors
        return Snapshot(
            watermark=self.watermark.value,
            frontier=self.windows.frontier,
            windows=self.windows.snapshot(),
            settled={g: s.copy() for g, s in self.settled_totals.items()},
            provisional={g: s.copy() for g, s in self.provisional.items()},
            open_queries=len(self.joiner.open),
            orphans_held=self.joiner.orphan_count,
            counters=self.counters,
            detectors=detectors.rows() if detectors is not None else [],
        )
