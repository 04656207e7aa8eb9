"""Incremental scoring of one query, and the from-scratch reference beside it.

A :class:`QueryScore` is plain, serialisable state: the first rank of each shown item, the best
grade of each engaged item, the sorted hit ranks, the relevant grades (ascending), one AP
numerator per AP cut-off and one DCG per NDCG cut-off. :meth:`Scorer.add_grade` applies one
attributed event in O(k) (plus O(|G|) for a sorted insert); :meth:`Scorer.values` reads every
configured metric in O(k) per metric. Nothing is recomputed from the shown list.

What counts as relevant: grade >= ``min_grade``; with ``unshown_items = "ignore"`` only items
that appear in the shown list count, with ``"count"`` (default) unshown ones count towards |G|
and IDCG as well.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streameval.scoring import ap, ndcg
from streameval.scoring.measures import MEASURES, Params
from streameval.scoring.spec import MetricSpec

_NUMERATOR = {"": 0, "ap": 1, "dcg": 2}  # which of a query's numerators a measure reads


@dataclass(frozen=True)
class ScoringParams:
    """The configuration the scorer needs, taken from Settings."""

    metrics: tuple[MetricSpec, ...]
    ap_denominator: str = "min_g_k"
    ndcg_gain: str = "exp"
    min_grade: float = 1.0
    unshown_items: str = "count"


#: joins a shown list into one string: DEL, not in real item ids, and a byte that JSON (the
#: changelog's packs) writes as it is
SEP = "\x7f"
#: the separator of state format 4 and before (unit separator), which JSON writes as ``\u001f``
#: (6 bytes a separator, and a slower encoding): read from such a changelog, see from_row
OLD_SEP = "\x1f"


class QueryScore:
    """Incremental state of one query. Plain attributes; see to_dict/from_dict.

    Most queries settle without a single event, so a new state holds little more than the shown
    list, and holds it compactly: as one string, the items between separators (a 20-item list
    takes about 300 bytes instead of 1.4 KB as a tuple of strings), or as a tuple when an item
    contains the separator. The rank of an item is found in it when an event arrives (no
    per-query index). The containers start as shared empty or zero tuples, replaced by lists of
    the query's own at its first change.
    """

    __slots__ = ("items", "grade", "hits", "ideal", "ap_num", "dcg")

    def __init__(
        self, items: Sequence[str | None], ap_zero: Sequence[float], dcg_zero: Sequence[float]
    ) -> None:
        # a string is a list compact() made already (the daemon decodes impressions so)
        self.items: str | Sequence[str | None] = items if type(items) is str else compact(items)
        self.grade: dict[str, float] = NO_GRADES  # replaced by the first event
        self.hits: Sequence[int] = ()
        self.ideal: Sequence[float] = ()
        self.ap_num: Sequence[float] = ap_zero
        self.dcg: Sequence[float] = dcg_zero

    def rank(self, item: str) -> int | None:
        """The first rank of ``item`` in the shown list (1-based), None when it was not shown."""
        return rank_in(self.items, item)

    def shown(self) -> Sequence[str | None]:
        """The shown list (None where a list from to_dict/from_dict had a repeated item)."""
        items = self.items
        return items[1:-1].split(SEP) if isinstance(items, str) else items

    @property
    def n_relevant(self) -> int:
        """|G|."""
        return len(self.ideal)

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": self.shown(),
            "grade": self.grade,
            "hits": self.hits,
            "ideal": self.ideal,
            "ap_num": self.ap_num,
            "dcg": self.dcg,
        }

    def to_row(self) -> list[Any]:
        """The state as a list: the shown list as held (one string, or a list), and the rest
        unless no event has changed it yet (the changelog's packs)."""
        if self.grade is NO_GRADES:
            return [self.items]
        return [self.items, self.grade, self.hits, self.ideal, self.ap_num, self.dcg]

    @classmethod
    def from_row(cls, row: Sequence[Any], ap_zero: Sequence[float], dcg_zero: Sequence[float]) -> QueryScore:
        """The state :meth:`to_row` wrote; ``ap_zero`` and ``dcg_zero`` as :meth:`Scorer.new`
        starts them."""
        state = cls((), ap_zero, dcg_zero)
        items = row[0]
        if isinstance(items, str):
            if items[:1] == OLD_SEP and items[-1:] == OLD_SEP:  # state format 4
                state.items = compact(items[1:-1].split(OLD_SEP))
            elif items[:1] == SEP and items[-1:] == SEP:
                state.items = items
            else:
                raise ValueError("a shown list held as one string starts and ends with a separator")
        else:
            state.items = compact(items)
        if len(row) > 1:
            state.grade = row[1] or NO_GRADES
            state.hits, state.ideal, state.ap_num, state.dcg = row[2], row[3], row[4], row[5]
        return state

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryScore:
        if "items" in data:
            items: Sequence[str | None] = data["items"]
        else:  # state format 1: item -> first rank
            rank_of: Mapping[str, int] = data["rank_of"]
            ranked: list[str | None] = [None] * max(rank_of.values(), default=0)
            for item, rank in rank_of.items():
                ranked[rank - 1] = item  # later copies of an item stay None: they never rank
            items = ranked
        state = cls(items, data["ap_num"], data["dcg"])
        state.grade = data["grade"] or NO_GRADES
        state.hits, state.ideal = data["hits"], data["ideal"]
        return state


def rank_in(items: str | Sequence[str | None], item: str) -> int | None:
    """The first rank of ``item`` (1-based) in a shown list held as :func:`compact` made it,
    None when it is not in it."""
    if type(items) is str:
        if SEP in item:  # no shown item has one (else the list is not held as a string)
            return None
        # SEP item SEP is found exactly where the item starts; the separators before it
        # count the items before it
        at = items.find(SEP + item + SEP)
        return None if at < 0 else items.count(SEP, 0, at) + 1
    try:
        return items.index(item) + 1
    except ValueError:
        return None


def compact(items: Sequence[str | None]) -> str | Sequence[str | None]:
    """The shown list as SEP item SEP item ... SEP when that is unambiguous, else as it is."""
    try:
        joined = SEP.join(items)  # type: ignore[arg-type]
    except TypeError:  # a None: a list read back from format 1, with gaps
        return items
    if joined.count(SEP) != len(items) - 1:  # an item contains SEP
        return items
    return SEP + joined + SEP


NO_GRADES: dict[str, float] = {}  # shared and never written: add_grade replaces it first
_ONCE_TABLE_SIZE = 65536  # signatures remembered by Scorer.values_once
#: what a query's values depend on: (rank, grade) of each shown relevant item, and the grades of
#: the relevant items not shown (when they count)
_Signature = tuple[tuple[tuple[int, float], ...], tuple[float, ...]]
#: what :meth:`Scorer.values` reads of a query's state: hits, relevant grades, AP numerators, DCGs
_State = tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]
#: states remembered by Scorer.values (one table per partition's pipeline: a few MB at most)
_READ_TABLE_SIZE = 4096


class Scorer:
    """Applies attributed grades to QueryScore states and reads metric values from them."""

    def __init__(self, params: ScoringParams) -> None:
        self.params = params
        self.metrics = params.metrics
        self.measures = [MEASURES[m.name] for m in params.metrics]
        self.definitions = Params(params.ap_denominator, params.ndcg_gain)
        self.ap_ks = sorted({m.k for m in params.metrics if MEASURES[m.name].state == "ap"})
        self.dcg_ks = sorted({m.k for m in params.metrics if MEASURES[m.name].state == "dcg"})
        index = {
            "": {},
            "ap": {k: i for i, k in enumerate(self.ap_ks)},
            "dcg": {k: i for i, k in enumerate(self.dcg_ks)},
        }
        # one step per metric: its read, its k, which numerator it reads and where
        self._plan = [
            (measure.read, m.k, _NUMERATOR[measure.state], index[measure.state].get(m.k, -1))
            for m, measure in zip(params.metrics, self.measures, strict=True)
        ]
        self._once: dict[_Signature, tuple[int, tuple[float, ...]]] = {}
        self._read_table: dict[_State, tuple[float, ...]] = {}
        # what every new query starts from (tuples: shared, and copied before a change)
        self._ap_zero = (0.0,) * len(self.ap_ks)
        self._dcg_zero = (0.0,) * len(self.dcg_ks)

    def new(self, items: Sequence[str]) -> QueryScore:
        """The state of a query with no engagement yet."""
        return QueryScore(items, self._ap_zero, self._dcg_zero)

    def from_row(self, row: Sequence[Any]) -> QueryScore:
        """A query's state as :meth:`QueryScore.to_row` wrote it."""
        return QueryScore.from_row(row, self._ap_zero, self._dcg_zero)

    def add_grade(self, state: QueryScore, item: str, grade: float) -> bool:
        """Apply one attributed event of ``grade`` on ``item``; True when any metric changed."""
        p = self.params
        grades = state.grade
        old = grades.get(item)
        if old is not None and grade <= old:
            return False
        if grades is NO_GRADES:
            grades = state.grade = {}
        grades[item] = grade
        if grade < p.min_grade:
            return False
        rank = state.rank(item)
        if rank is None and p.unshown_items == "ignore":
            return False
        was_relevant = old is not None and old >= p.min_grade
        _regrade(state, old if was_relevant else None, grade)
        if rank is None:
            return True
        if not was_relevant:
            self._add_hit(state, rank)
        if self.dcg_ks:
            self._add_gain(state, rank, old if was_relevant else None, grade)
        return True

    def _add_hit(self, state: QueryScore, rank: int) -> None:
        """A shown item became relevant: its rank joins the hits, and each AP numerator grows."""
        hits = state.hits = _own(state.hits)
        position = bisect.bisect_left(hits, rank)
        hits.insert(position, rank)
        if self.ap_ks:
            ap_num = state.ap_num = _own(state.ap_num)
            for i, k in enumerate(self.ap_ks):
                ap_num[i] += ap.add_hit(hits, position, rank, k)

    def _add_gain(self, state: QueryScore, rank: int, old: float | None, grade: float) -> None:
        """A shown relevant item's grade rose (from ``old``, None: not relevant before)."""
        kind = self.params.ndcg_gain
        gain_delta = ndcg.gain(grade, kind) - (ndcg.gain(old, kind) if old is not None else 0.0)
        dcg = state.dcg = _own(state.dcg)
        for i, k in enumerate(self.dcg_ks):
            if rank <= k:
                dcg[i] += gain_delta * ndcg.discount(rank)

    def values(self, state: QueryScore) -> tuple[float, ...] | None:
        """Every configured metric of one query, in config order; None when |G| = 0.

        The values are :meth:`_read` of the state's hits, relevant grades, AP numerators and
        DCGs, and nothing else, and few such states recur across queries (one click at rank 3):
        a small table of them, keyed by exactly those numbers, spares most changes the metric
        loops. Bounded: cleared when full."""
        ideal = state.ideal
        if not ideal:
            return None
        key = (tuple(state.hits), tuple(ideal), tuple(state.ap_num), tuple(state.dcg))
        table = self._read_table
        known = table.get(key)
        if known is None:
            if len(table) >= _READ_TABLE_SIZE:
                table.clear()
            known = table[key] = self._read(state.hits, ideal, state.ap_num, state.dcg)
        return known

    def _read(
        self,
        hits: Sequence[int],
        ideal: Sequence[float],
        ap_num: Sequence[float],
        dcg: Sequence[float],
    ) -> tuple[float, ...]:
        """The metrics from a query's hit ranks (ascending), its relevant grades (ascending, not
        empty), one AP numerator per AP cut-off and one DCG per NDCG cut-off."""
        definitions = self.definitions
        out = []
        # one step per metric, prepared in __init__ (this runs on every change of every query)
        for read, k, numerator, index in self._plan:
            num = ap_num[index] if numerator == 1 else dcg[index] if numerator == 2 else 0.0
            out.append(read(definitions, k, hits, bisect.bisect_right(hits, k), ideal, num))
        return tuple(out)

    def values_once(
        self, items: str | Sequence[str | None], grades: Iterable[tuple[str, float]]
    ) -> tuple[int, tuple[float, ...] | None]:
        """|G| and every configured metric of a query with these best grades (item, grade pairs,
        one per item), computed in one go (``replay``'s batch, where a query is scored only
        once): the values of :meth:`values_from_scratch` -- the same floating-point operations
        in the same order -- from the hit ranks, found once for all metrics."""
        p = self.params
        min_grade, unshown_count = p.min_grade, p.unshown_items == "count"
        hits: list[tuple[int, float]] = []  # (rank, grade) of the shown relevant items
        unshown: list[float] = []  # the grades of relevant items not shown, when they count
        for item, grade in grades:
            if grade < min_grade:
                continue
            rank = rank_in(items, item)
            if rank is not None:
                hits.append((rank, grade))
            elif unshown_count:
                unshown.append(grade)
        if not hits and not unshown:
            return 0, None
        hits.sort()
        unshown.sort()
        # The values depend on nothing else, and few such signatures recur (one click at rank 3
        # is one signature): a table of them spares most queries the metric loops. Bounded.
        signature = (tuple(hits), tuple(unshown))
        known = self._once.get(signature)
        if known is None:
            if len(self._once) >= _ONCE_TABLE_SIZE:
                self._once.clear()
            known = self._once[signature] = self.values_of_signature(hits, unshown)
        return known

    def values_of_signature(
        self, hits: list[tuple[int, float]], unshown: list[float]
    ) -> tuple[int, tuple[float, ...]]:
        """|G| and the values of a query's signature (the hits, ascending, and the unshown
        relevant grades, ascending) from scratch: the AP numerators and DCGs summed as the
        formulas of ap.py and ndcg.py sum them, then read as :meth:`values` reads a query's state
        (also the native core's source of the values, ``streameval.native.score_rows``)."""
        ranks = [rank for rank, _grade in hits]  # ascending
        relevant = sorted([grade for _rank, grade in hits] + unshown)
        ap_num = []
        for k in self.ap_ks:
            total = 0.0
            for j, rank in enumerate(ranks[: bisect.bisect_right(ranks, k)], start=1):
                total += j / rank
            ap_num.append(total)
        dcg = []
        for k in self.dcg_ks:
            total = 0.0
            for rank, grade in hits[: bisect.bisect_right(ranks, k)]:
                total += ndcg.gain(grade, self.params.ndcg_gain) * ndcg.discount(rank)
            dcg.append(total)
        return len(relevant), self._read(ranks, relevant, ap_num, dcg)

    # --- the from-scratch reference, for tests and self-checks ---------------------------------

    def relevant_set(self, items: Sequence[str], grades: Mapping[str, float]) -> dict[str, float]:
        """G from the best grade of each engaged item, under min_grade and unshown_items."""
        shown = set(items)
        return {
            item: g
            for item, g in grades.items()
            if g >= self.params.min_grade and (self.params.unshown_items == "count" or item in shown)
        }

    def values_from_scratch(
        self, items: Sequence[str], grades: Mapping[str, float]
    ) -> tuple[float, ...] | None:
        """The same values as :meth:`values`, from the formulas of each metric module."""
        relevant = self.relevant_set(items, grades)
        if not relevant:
            return None
        return tuple(
            measure.from_scratch(self.definitions, items, relevant, metric.k)
            for metric, measure in zip(self.metrics, self.measures, strict=True)
        )


def _own(values: Sequence[Any]) -> list[Any]:
    """A query's own list of these values: a shared tuple is copied at the query's first change."""
    return list(values) if type(values) is tuple else values  # type: ignore[return-value]


def _regrade(state: QueryScore, old: float | None, grade: float) -> None:
    """The relevant grades (ascending) with ``old`` (None: not relevant before) replaced by ``grade``."""
    ideal = state.ideal = _own(state.ideal)
    if old is not None:
        del ideal[bisect.bisect_left(ideal, old)]
    bisect.insort(ideal, grade)
