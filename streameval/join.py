"""The join of engagement events to impressions, and the life of a query until it settles.

Rules (README, section Definitions, The join):

- An event is attributed to the impression with its ``query_id`` when
  ``imp.ts <= ev.ts <= imp.ts + horizon(ev.type)``; otherwise it is unattributed with the
  reason ``before_impression`` or ``after_horizon`` and changes nothing.
- Events are deduplicated first, by ``event_id`` or (query_id, item, type, ts); a duplicate
  counts once. Impressions are deduplicated by ``query_id``: the first wins.
- An event whose impression has not arrived is an orphan. It is held until its impression
  arrives (then judged as above) or until the watermark passes ``ev.ts + orphan_ttl``: then it
  is dropped as ``unknown_query``.
- A query settles when the watermark passes ``imp.ts + max horizon``; its values are final and
  its state is freed. Its id and time are remembered (a tombstone), so a later event for it is
  still judged by event time: ``before_impression``, ``after_horizon``, or -- when it would have
  counted but arrived too late -- ``late``.
- An impression that arrives after the watermark passed its own settling time is dropped and
  counted as a late impression: its events have been judged without it, and it may be a
  duplicate of a query the daemon no longer remembers.

The daemon remembers tombstones and dedup keys for a bounded time: max(max horizon, 10 min)
plus ``orphan_ttl`` of event time past the event or the settling. With an ``orphan_ttl`` longer
than the input spans it keeps them, and holds orphans, until the input ends, so its answer is
the batch definition of the README (Definitions) however far apart related records are: the
answer ``replay`` computes in one batch (``replay.batch``; the tests hold the two equal so).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from streameval import native
from streameval.changes import Changes, Unrecorded
from streameval.config import Settings
from streameval.deadlines import Queue, deadlines
from streameval.records import Engagement, Impression
from streameval.scoring import QueryScore, Scorer

UNATTRIBUTED_REASONS = ("before_impression", "after_horizon", "unknown_query", "late")
#: What a change touched, for checkpoints: ("q", query_id) for an open query or its tombstone,
#: ("o", query_id) for the orphans waiting for it; and, in the same set, ("w", window, bucket)
#: from the windows. Of any length: a compiled build checks it. An event dedup key is recorded
#: apart, when it is first remembered (``Changes.add_seen``).
#: The daemon remembers settled query ids and event dedup keys at least this long (event time).
MIN_RETENTION_S = 600.0


class OpenQuery:
    """A query whose values may still change."""

    __slots__ = ("query_id", "ts", "group", "score", "n_relevant", "values")

    def __init__(self, query_id: str, ts: float, group: tuple[str, ...], score: QueryScore) -> None:
        self.query_id = query_id
        self.ts = ts
        self.group = group
        self.score = score
        self.n_relevant = 0
        self.values: tuple[float, ...] | None = None


class JoinSink(Protocol):
    """What the join tells the pipeline."""

    def group_of(self, labels: tuple[str, ...]) -> tuple[str, ...]: ...

    def opened(self, query: OpenQuery) -> None: ...

    def changed(
        self, query: OpenQuery, old_n_relevant: int, old_values: tuple[float, ...] | None
    ) -> None: ...

    def settled(self, query: OpenQuery) -> None: ...

    def unattributed(self, reason: str) -> None: ...

    def duplicate(self, kind: str) -> None: ...

    def late_impression(self) -> None: ...

    def attributed(self) -> None: ...


class Joiner:
    """Per-query state: open queries, orphans, tombstones, dedup keys; settling by watermark."""

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        sink: JoinSink,
    ) -> None:
        self.settings = settings
        # per event type, looked up once per event (every decoded event's type has a grade)
        self._grades = dict(settings.grades)
        self._horizons = {t: settings.horizon_for(t) for t in settings.grades}
        self.scorer = scorer
        #: ``scorer.add_grade``, through the native core where it is installed
        self._add_grade = native.grader(scorer)
        self.sink = sink
        self.max_horizon = settings.max_horizon
        self.retention = max(settings.max_horizon, MIN_RETENTION_S) + settings.orphan_ttl
        self.open: dict[str, OpenQuery] = {}
        self.tombstones: dict[str, float] = {}
        self.orphans: dict[str, list[Engagement]] = {}
        self.orphan_count = 0
        self.seen: dict[tuple[str, ...] | str, float] = {}  # dedup key -> when it is forgotten
        #: keys changed since the last checkpoint, when the owner tracks them (the daemon)
        #: the state keys changed since the last checkpoint (shared with the windows)
        self.changes: Changes = Unrecorded()
        self._settle_at: Queue[str] = deadlines()  # query ids, by ts + max horizon
        self._orphan_expiry: Queue[Engagement] = deadlines()
        self._tombstone_expiry: Queue[str] = deadlines()
        self._seen_expiry: Queue[tuple[str, ...] | str] = deadlines()
        #: no item of the four queues is due before the watermark passes this (the earliest
        #: time among them, or less): a watermark up to it has nothing to settle or forget
        self.next_due = math.inf

    # --- records -------------------------------------------------------------------------------

    def impression(self, imp: Impression, watermark: float) -> None:
        """Open a query (unless its id is known: then it is a duplicate) and claim its orphans."""
        if imp.query_id in self.open or imp.query_id in self.tombstones:
            self.sink.duplicate("impressions")
            return
        if imp.ts + self.max_horizon < watermark:
            # it would settle at once, after its events were judged without it
            self.sink.late_impression()
            return
        group = self.sink.group_of(imp.group)
        query = OpenQuery(imp.query_id, imp.ts, group, self.scorer.new(imp.items))
        self.add_open(query)
        self.sink.opened(query)
        waiting = self.orphans.pop(imp.query_id, None)
        if waiting:
            self.changes.add(("o", imp.query_id))
            self.orphan_count -= len(waiting)
            for event in waiting:
                self._judge(query, event)

    def event(self, ev: Engagement, watermark: float) -> None:
        """Deduplicate, then attribute, hold as an orphan, or count as unattributed."""
        key = ev.event_id if ev.event_id is not None else ev.dedup_key
        if key in self.seen:
            self.sink.duplicate("events")
            return
        if ev.ts + self.retention >= watermark:  # else it would be forgotten at once
            self.add_seen(key, ev.ts + self.retention)
        query = self.open.get(ev.query_id)
        if query is not None:
            self._judge(query, ev)
            return
        imp_ts = self.tombstones.get(ev.query_id)
        if imp_ts is not None:
            self.sink.unattributed(self._misfit(imp_ts, ev) or "late")
            return
        if ev.ts + self.settings.orphan_ttl < watermark:
            self.sink.unattributed("unknown_query")
            return
        self.add_orphan(ev)

    def _misfit(self, imp_ts: float, ev: Engagement) -> str | None:
        """Why ``ev`` cannot be attributed to an impression at ``imp_ts``, or None if it can."""
        if ev.ts < imp_ts:
            return "before_impression"
        if ev.ts > imp_ts + self._horizons.get(ev.type, self.settings.horizon):
            return "after_horizon"
        return None

    def _judge(self, query: OpenQuery, ev: Engagement) -> None:
        reason = self._misfit(query.ts, ev)
        if reason is not None:
            self.sink.unattributed(reason)
            return
        self.sink.attributed()
        if self._add_grade(query.score, ev.item, self._grades[ev.type]):
            self.changes.add(("q", query.query_id))
            old_n, old_values = query.n_relevant, query.values
            query.n_relevant = query.score.n_relevant
            query.values = self.scorer.values(query.score)
            self.sink.changed(query, old_n, old_values)

    # --- time ----------------------------------------------------------------------------------

    def advance(self, watermark: float) -> None:
        """Settle queries, expire orphans and forget old tombstones and keys the watermark passed."""
        if watermark <= self.next_due:
            return  # nothing is due (most watermark moves, in a backlog shorter than the horizon)
        for query_id in self._settle_at.pop_due(watermark):
            query = self.open.pop(query_id, None)
            if query is None:
                continue
            self.add_tombstone(query_id, query.ts)
            self.changes.add(("q", query_id))
            self.sink.settled(query)
        for event in self._orphan_expiry.pop_due(watermark):
            waiting = self.orphans.get(event.query_id)
            index = next((i for i, e in enumerate(waiting or ()) if e is event), None)
            if waiting is not None and index is not None:  # else its impression claimed it
                self.changes.add(("o", event.query_id))
                del waiting[index]
                if not waiting:
                    del self.orphans[event.query_id]
                self.orphan_count -= 1
                self.sink.unattributed("unknown_query")
        for query_id in self._tombstone_expiry.pop_due(watermark):
            if self.tombstones.pop(query_id, None) is not None:
                self.changes.add(("q", query_id))
        seen = self.seen
        for key in self._seen_expiry.pop_due(watermark):
            seen.pop(key, None)  # its pack goes when the watermark passes all of it (packs)
        queues = (self._settle_at, self._orphan_expiry, self._tombstone_expiry, self._seen_expiry)
        self.next_due = min(queue.earliest() for queue in queues)

    # --- state: adding one piece, as processing does and as a restore does -------------------

    def add_open(self, query: OpenQuery) -> None:
        """Hold an open query until it settles."""
        self.open[query.query_id] = query
        self._hold(self._settle_at, query.ts + self.max_horizon, query.query_id)
        self.changes.add(("q", query.query_id))

    def add_tombstone(self, query_id: str, imp_ts: float) -> None:
        """Remember a settled query (its impression time) for the retention."""
        self.tombstones[query_id] = imp_ts
        self._hold(self._tombstone_expiry, imp_ts + self.max_horizon + self.retention, query_id)

    def add_orphan(self, ev: Engagement) -> None:
        """Hold an event until its impression arrives or the watermark passes ts + orphan_ttl."""
        self._hold(self._orphan_expiry, ev.ts + self.settings.orphan_ttl, ev)
        self.orphans.setdefault(ev.query_id, []).append(ev)
        self.orphan_count += 1
        self.changes.add(("o", ev.query_id))

    def add_seen(self, key: tuple[str, ...] | str, expiry: float) -> None:
        """Remember an event dedup key until the watermark passes ``expiry``."""
        self.seen[key] = expiry
        self._hold(self._seen_expiry, expiry, key)
        self.changes.add_seen((key, expiry))

    def _hold(self, queue: Queue[Any], when: float, item: Any) -> None:
        queue.push(when, item)
        if not when >= self.next_due:  # earlier, or NaN (which the queues sort with -inf)
            self.next_due = when
