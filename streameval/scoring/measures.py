"""One description per metric family: its name, its help, its mean's denominator, how its value
is read from a query's incremental state, and its from-scratch definition. The scorer, the sums,
the history, the exporter and the CLI help all read :data:`MEASURES`; adding a metric is adding
an entry here (and its formula in a module of its own, as ap.py, ndcg.py and rates.py).

The incremental read gets the query's state at one cut-off k: ``hits`` (the ranks of the shown
relevant items, ascending), ``hits_k`` (how many are at or above k), ``ideal`` (the relevant
grades, ascending, not empty) and ``numerator`` (the query's AP numerator at k for ``state =
"ap"``, its DCG at k for ``state = "dcg"``, else 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streameval.scoring import ap, ndcg, rates


@dataclass(frozen=True)
class Params:
    """What the definitions depend on besides the query (from the configuration)."""

    ap_denominator: str = "min_g_k"
    ndcg_gain: str = "exp"


#: (params, k, hits, hits_k, ideal, numerator) -> the value
Read = Callable[[Params, int, Sequence[int], int, Sequence[float], float], float]
#: (params, shown items, relevant item -> grade (not empty), k) -> the value
FromScratch = Callable[[Params, Sequence[str], Mapping[str, float], int], float]


@dataclass(frozen=True)
class Measure:
    name: str
    help: str  # a line, for Prometheus' HELP and the CLI
    #: the mean divides by the relevant items (sum of |G|) instead of by the queries counted
    weighted: bool
    #: the per-query numerator it reads: "ap", "dcg" or "" (none)
    state: str
    read: Read
    from_scratch: FromScratch


def _ap(p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float) -> float:
    d = ap.denominator(p.ap_denominator, len(ideal), k, hits_k)
    return num / d if d else 0.0


def _wap(p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float) -> float:
    return _ap(p, k, hits, hits_k, ideal, num) * len(ideal)


def _ndcg(p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float) -> float:
    idcg = ndcg.ideal_dcg(ideal, k, p.ndcg_gain)
    return num / idcg if idcg > 0 else 0.0


def _recall(p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float) -> float:
    return hits_k / len(ideal)


def _precision(
    p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float
) -> float:
    return hits_k / k


def _mrr(p: Params, k: int, hits: Sequence[int], hits_k: int, ideal: Sequence[float], num: float) -> float:
    return 1.0 / hits[0] if hits_k else 0.0


# relevant is not empty, so none of the definitions below returns None
MEASURES: dict[str, Measure] = {
    m.name: m
    for m in (
        Measure(
            "map",
            "Mean average precision at k (AP denominator per ap_denominator)",
            False,
            "ap",
            _ap,
            lambda p, items, rel, k: ap.average_precision(items, rel, k, p.ap_denominator) or 0.0,
        ),
        Measure(
            "wmap",
            "Weighted MAP at k: sum |G| AP / sum |G|",
            True,
            "ap",
            _wap,
            lambda p, items, rel, k: (
                (ap.average_precision(items, rel, k, p.ap_denominator) or 0.0) * len(rel)
            ),
        ),
        Measure(
            "ndcg",
            "Mean NDCG at k",
            False,
            "dcg",
            _ndcg,
            lambda p, items, rel, k: ndcg.ndcg(items, rel, k, p.ndcg_gain) or 0.0,
        ),
        Measure(
            "recall",
            "Mean recall at k",
            False,
            "",
            _recall,
            lambda p, i, rel, k: rates.recall(i, rel, k) or 0.0,
        ),
        Measure(
            "precision",
            "Mean precision at k",
            False,
            "",
            _precision,
            lambda p, i, rel, k: rates.precision(i, rel, k) or 0.0,
        ),
        Measure(
            "mrr",
            "Mean reciprocal rank at k",
            False,
            "",
            _mrr,
            lambda p, i, rel, k: rates.reciprocal_rank(i, rel, k) or 0.0,
        ),
    )
}
