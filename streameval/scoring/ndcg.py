"""Normalised discounted cumulative gain at k.

    DCG@k  = sum_{i <= k} gain(g_i) / log2(i + 1)
    NDCG@k = DCG@k / IDCG@k

g_i is the grade of the item at rank i when it is relevant (grade >= ``min_grade``) and this is
its first occurrence in the list, else 0. ``gain`` is ``exp`` (2^g - 1, the default; ranx
``ndcg_burges``) or ``linear`` (g; trec_eval ``ndcg_cut``, ranx ``ndcg``). IDCG@k is the DCG of
the grades of all relevant items -- unshown ones included when ``unshown_items = "count"`` --
best first, cut at k. With no relevant item NDCG is undefined (None).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

GAINS = ("exp", "linear")


def gain(grade: float, kind: str) -> float:
    """The gain of one grade."""
    return 2.0**grade - 1.0 if kind == "exp" else float(grade)


@functools.cache  # a table: ranks are few, and every change of every query reads them
def discount(rank: int) -> float:
    """1 / log2(rank + 1)."""
    return 1.0 / math.log2(rank + 1)


def ideal_dcg(grades_ascending: Sequence[float], k: int, kind: str) -> float:
    """IDCG@k from the relevant grades sorted ascending (best last). O(k)."""
    total = 0.0
    n = len(grades_ascending)
    for i in range(min(k, n)):
        total += gain(grades_ascending[n - 1 - i], kind) * discount(i + 1)
    return total


def ndcg(ranked: Sequence[str], relevant: Mapping[str, float], k: int, kind: str = "exp") -> float | None:
    """NDCG@k from scratch. ``relevant`` is G (item -> grade)."""
    if not relevant:
        return None
    seen: set[str] = set()
    dcg = 0.0
    for rank, item in enumerate(ranked[:k], start=1):
        if item in relevant and item not in seen:
            dcg += gain(relevant[item], kind) * discount(rank)
        seen.add(item)
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(gain(g, kind) * discount(i) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0
