"""Average precision at k.

For a shown list L, cut-off k, relevant set G and hit ranks r_1 < r_2 < ... among the first k
positions (a hit is the first occurrence of a relevant item; a repeated copy never hits)::

    AP@k = (1/D) * sum_j ( j / r_j )

The denominator D is a convention (config ``ap_denominator``):

- ``min_g_k`` (default): min(|G|, k) -- ml_metrics/Kaggle ``apk``, Spark, recommenders, RecBole;
- ``g``: |G| -- trec_eval ``map_cut``, ranx, ir_measures;
- ``hits``: the number of hits in the first k -- torchmetrics, whylogs (0 when there are none).

With |G| = 0 AP is undefined (None); the ``no_relevant`` policy decides what that means for MAP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

DENOMINATORS = ("min_g_k", "g", "hits")


def denominator(convention: str, n_relevant: int, k: int, hits: int) -> int:
    """D of the given convention."""
    if convention == "min_g_k":
        return min(n_relevant, k)
    if convention == "g":
        return n_relevant
    if convention == "hits":
        return hits
    raise ValueError(f"unknown AP denominator {convention!r}")


def average_precision(
    ranked: Sequence[str], relevant: Mapping[str, float], k: int, convention: str = "min_g_k"
) -> float | None:
    """AP@k from scratch. ``relevant`` is G (item -> grade); its size is |G|."""
    if not relevant:
        return None
    seen: set[str] = set()
    hits = 0
    total = 0.0
    for rank, item in enumerate(ranked[:k], start=1):
        if item in relevant and item not in seen:
            hits += 1
            total += hits / rank
        seen.add(item)
    d = denominator(convention, len(relevant), k, hits)
    return total / d if d else 0.0


def add_hit(hits: list[int], position: int, rank: int, k: int) -> float:
    """The change of AP@k's numerator when a hit at ``rank`` is inserted at ``hits[position]``.

    ``hits`` already holds the new rank at ``position``. The new hit adds its own term j/r, and
    every later hit within k moves one place down the hit list, gaining 1/r_m. O(k).
    """
    if rank > k:
        return 0.0
    delta = (position + 1) / rank
    for later in hits[position + 1 :]:
        if later > k:
            break
        delta += 1.0 / later
    return delta
