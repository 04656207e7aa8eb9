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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from streameval.scoring import ap, ndcg, rates
from streameval.scoring.spec import MetricSpec


@dataclass(frozen=True)
class ScoringParams:
    """The configuration the scorer needs, taken from Settings."""

    metrics: tuple[MetricSpec, ...]
    ap_denominator: str = "min_g_k"
    ndcg_gain: str = "exp"
    min_grade: float = 1.0
    unshown_items: str = "count"


class QueryScore:
    """Incremental state of one query. Plain attributes; see to_dict/from_dict."""

    __slots__ = ("items", "_rank_of", "grade", "hits", "ideal", "ap_num", "dcg")
    #: what to_dict writes (the shown list as its first ranks)
    FIELDS: ClassVar[tuple[str, ...]] = ("rank_of", "grade", "hits", "ideal", "ap_num", "dcg")

    def __init__(self, items: Sequence[str], n_ap: int, n_dcg: int) -> None:
        # Most queries settle without a single relevant event: the rank of each item is looked
        # up only once one arrives (rank_of), and until then the shown list is all we keep.
        self.items: Sequence[str] | None = items
        self._rank_of: dict[str, int] | None = None
        self.grade: dict[str, float] = {}
        self.hits: list[int] = []
        self.ideal: list[float] = []
        self.ap_num = [0.0] * n_ap
        self.dcg = [0.0] * n_dcg

    @property
    def rank_of(self) -> dict[str, int]:
        """Item -> its first rank in the shown list (1-based)."""
        if self._rank_of is None:
            rank_of: dict[str, int] = {}
            for rank, item in enumerate(self.items or (), start=1):
                rank_of.setdefault(item, rank)
            self._rank_of = rank_of
            self.items = None
        return self._rank_of

    @property
    def n_relevant(self) -> int:
        """|G|."""
        return len(self.ideal)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryScore:
        state = cls((), 0, 0)
        state.items = None
        state._rank_of = data["rank_of"]
        for name in cls.FIELDS[1:]:
            setattr(state, name, data[name])
        return state


class Scorer:
    """Applies attributed grades to QueryScore states and reads metric values from them."""

    def __init__(self, params: ScoringParams) -> None:
        self.params = params
        self.metrics = params.metrics
        self.ap_ks = sorted({m.k for m in params.metrics if m.name in ("map", "wmap")})
        self.dcg_ks = sorted({m.k for m in params.metrics if m.name == "ndcg"})
        self._ap_index = {k: i for i, k in enumerate(self.ap_ks)}
        self._dcg_index = {k: i for i, k in enumerate(self.dcg_ks)}

    def new(self, items: Sequence[str]) -> QueryScore:
        """The state of a query with no engagement yet."""
        return QueryScore(items, len(self.ap_ks), len(self.dcg_ks))

    def add_grade(self, state: QueryScore, item: str, grade: float) -> bool:
        """Apply one attributed event of ``grade`` on ``item``; True when any metric changed."""
        p = self.params
        old = state.grade.get(item)
        if old is not None and grade <= old:
            return False
        state.grade[item] = grade
        if grade < p.min_grade:
            return False
        rank = state.rank_of.get(item)
        if rank is None and p.unshown_items == "ignore":
            return False
        was_relevant = old is not None and old >= p.min_grade
        if old is not None and was_relevant:
            del state.ideal[bisect.bisect_left(state.ideal, old)]
        bisect.insort(state.ideal, grade)
        if rank is None:
            return True
        if not was_relevant:
            position = bisect.bisect_left(state.hits, rank)
            state.hits.insert(position, rank)
            for i, k in enumerate(self.ap_ks):
                state.ap_num[i] += ap.add_hit(state.hits, position, rank, k)
        gain_delta = ndcg.gain(grade, p.ndcg_gain) - (
            ndcg.gain(old, p.ndcg_gain) if was_relevant and old is not None else 0.0
        )
        for i, k in enumerate(self.dcg_ks):
            if rank <= k:
                state.dcg[i] += gain_delta * ndcg.discount(rank)
        return True

    def values(self, state: QueryScore) -> tuple[float, ...] | None:
        """Every configured metric of one query, in config order; None when |G| = 0."""
        n_rel = len(state.ideal)
        if n_rel == 0:
            return None
        out = []
        for metric in self.metrics:
            k = metric.k
            hits_k = bisect.bisect_right(state.hits, k)
            if metric.name in ("map", "wmap"):
                d = ap.denominator(self.params.ap_denominator, n_rel, k, hits_k)
                value = state.ap_num[self._ap_index[k]] / d if d else 0.0
                if metric.name == "wmap":
                    value *= n_rel
            elif metric.name == "ndcg":
                ideal = ndcg.ideal_dcg(state.ideal, k, self.params.ndcg_gain)
                value = state.dcg[self._dcg_index[k]] / ideal if ideal > 0 else 0.0
            elif metric.name == "recall":
                value = hits_k / n_rel
            elif metric.name == "precision":
                value = hits_k / k
            else:  # mrr
                value = 1.0 / state.hits[0] if hits_k else 0.0
            out.append(value)
        return tuple(out)

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
        out: list[float] = []
        for metric in self.metrics:
            k = metric.k
            # relevant is not empty, so no function below returns None
            if metric.name in ("map", "wmap"):
                value = ap.average_precision(items, relevant, k, self.params.ap_denominator) or 0.0
                if metric.name == "wmap":
                    value *= len(relevant)
            elif metric.name == "ndcg":
                value = ndcg.ndcg(items, relevant, k, self.params.ndcg_gain) or 0.0
            elif metric.name == "recall":
                value = rates.recall(items, relevant, k) or 0.0
            elif metric.name == "precision":
                value = rates.precision(items, relevant, k) or 0.0
            else:
                value = rates.reciprocal_rank(items, relevant, k) or 0.0
            out.append(value)
        return tuple(out)
