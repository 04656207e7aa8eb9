"""Aggregatable parts of a set of queries: counts, sums and sums of squares per metric.

Per query the contribution of each metric is its value when |G| > 0 and 0 otherwise, so the
sums are the same under both ``no_relevant`` policies; only the mean's denominator differs:

- ``skip`` (default): mean = sum / queries_with_relevant;
- ``zero``: mean = sum / queries;
- ``wmap@k`` in either policy: sum_q |G_q| AP_q / sum_q |G_q| (``relevant_items``).

The mean is None when its denominator is 0 ("no query counts").
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

from streameval.scoring.measures import MEASURES
from streameval.scoring.spec import MetricSpec


class Sums:
    """queries, queries_with_relevant, relevant_items, and per metric a sum and sum of squares."""

    __slots__ = ("queries", "with_relevant", "relevant_items", "sums", "squares")

    def __init__(self, n_metrics: int) -> None:
        self.queries = 0
        self.with_relevant = 0
        self.relevant_items = 0
        self.sums = [0.0] * n_metrics
        self.squares = [0.0] * n_metrics

    def add(self, n_relevant: int, values: Sequence[float] | None, sign: int = 1) -> None:
        """Add (sign=1) or remove (sign=-1) one query's contribution."""
        self.queries += sign
        if values is None:
            return
        self.with_relevant += sign
        self.relevant_items += sign * n_relevant
        for i, value in enumerate(values):
            self.sums[i] += sign * value
            self.squares[i] += sign * value * value

    def replace(
        self,
        old_n_relevant: int,
        old_values: Sequence[float] | None,
        n_relevant: int,
        values: Sequence[float] | None,
    ) -> None:
        """Replace one query's contribution by its new one (its values changed): the same sums,
        bit for bit, as ``add(old, -1)`` then ``add(new)``, in one pass."""
        if old_values is None or values is None:
            self.add(old_n_relevant, old_values, -1)
            self.add(n_relevant, values)
            return
        self.relevant_items += n_relevant - old_n_relevant
        sums, squares = self.sums, self.squares
        for i, old in enumerate(old_values):
            value = values[i]
            # x + (-1 * v) is x - v, and (-1 * v) * v is -(v * v), exactly
            sums[i] = sums[i] - old + value
            squares[i] = squares[i] - old * old + value * value

    def add_exact(
        self,
        queries: int,
        with_relevant: int,
        relevant_items: int,
        columns: Sequence[Sequence[Sequence[float]]],
        partials: Sequence[Sequence[tuple[Sequence[float], Sequence[float]]]] = (),
    ) -> None:
        """Add queries as counts and, per metric, the values of those with a relevant item, in
        any number of pieces (``replay``, which adds every query at the end, perhaps from
        several processes): each sum and sum of squares correctly rounded (``math.fsum``), so
        the same whatever the order of the values. ``partials``: per metric, more pieces given
        as pairs of floats whose exact sums are those of their values and of their squares."""
        self.queries += queries
        self.with_relevant += with_relevant
        self.relevant_items += relevant_items
        for i, pieces in enumerate(columns):
            exact = partials[i] if partials else ()
            self.sums[i] = math.fsum(itertools.chain([self.sums[i]], *pieces, *(s for s, _ in exact)))
            squares = (map(operator.mul, piece, piece) for piece in pieces)
            self.squares[i] = math.fsum(itertools.chain([self.squares[i]], *squares, *(q for _, q in exact)))

    def merge(self, other: Sums) -> None:
        """Add every part of ``other``."""
        self.queries += other.queries
        self.with_relevant += other.with_relevant
        self.relevant_items += other.relevant_items
        for i in range(len(self.sums)):
            self.sums[i] += other.sums[i]
            self.squares[i] += other.squares[i]

    def copy(self) -> Sums:
        """An independent copy."""
        other = Sums(0)
        other.queries, other.with_relevant = self.queries, self.with_relevant
        other.relevant_items = self.relevant_items
        other.sums, other.squares = list(self.sums), list(self.squares)
        return other

    def reset_if_empty(self) -> None:
        """Zero the float sums exactly when no query is left, so add/remove leaves no residue."""
        if self.queries == 0:
            self.with_relevant = self.relevant_items = 0
            self.sums = [0.0] * len(self.sums)
            self.squares = [0.0] * len(self.squares)

    def means(self, metrics: Sequence[MetricSpec], no_relevant: str) -> list[float | None]:
        """The mean of each metric (MAP, mean NDCG, ...), None where no query counts."""
        out: list[float | None] = []
        for i, metric in enumerate(metrics):
            count = self.count(metric, no_relevant)
            out.append(self.sums[i] / count if count else None)
        return out

    def count(self, metric: MetricSpec, no_relevant: str) -> int:
        """The denominator of a metric's mean: the relevant items for a weighted one, else the
        queries counted (with a relevant item, or all under ``no_relevant = "zero"``)."""
        if MEASURES[metric.name].weighted:
            return self.relevant_items
        return self.with_relevant if no_relevant == "skip" else self.queries

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "with_relevant": self.with_relevant,
            "relevant_items": self.relevant_items,
            "sums": self.sums,
            "squares": self.squares,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sums:
        sums = cls(0)
        sums.queries, sums.with_relevant = data["queries"], data["with_relevant"]
        sums.relevant_items, sums.sums, sums.squares = data["relevant_items"], data["sums"], data["squares"]
        return sums
