"""Recall, precision and reciprocal rank at k.

    Recall@k    = hits / |G|
    Precision@k = hits / k          (k, not min(k, |L|): a short list is not rewarded)
    MRR@k       = 1 / r_1           (0 when no hit is in the first k)

hits counts first occurrences of relevant items among the first k positions. Each is None when
|G| = 0 (undefined); the ``no_relevant`` policy decides what that means for the mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def hit_ranks(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> list[int]:
    """Ranks (1-based) of the first occurrences of relevant items in the first k positions."""
    seen: set[str] = set()
    ranks = []
    for rank, item in enumerate(ranked[:k], start=1):
        if item in relevant and item not in seen:
            ranks.append(rank)
        seen.add(item)
    return ranks


def recall(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float | None:
    """Recall@k from scratch."""
    if not relevant:
        return None
    return len(hit_ranks(ranked, relevant, k)) / len(relevant)


def precision(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float | None:
    """Precision@k from scratch."""
    if not relevant:
        return None
    return len(hit_ranks(ranked, relevant, k)) / k


def reciprocal_rank(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float | None:
    """MRR@k of one query (its reciprocal rank) from scratch."""
    if not relevant:
        return None
    ranks = hit_ranks(ranked, relevant, k)
    return 1.0 / ranks[0] if ranks else 0.0
