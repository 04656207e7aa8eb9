"""An independent batch implementation of the README's Definitions, written from their text.

It imports nothing from streameval: it is the brute force the pipeline is checked against.
Input: decoded, valid records as dicts (items already strings).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Config:
    metrics: list[str] = field(default_factory=lambda: ["map@10", "ndcg@10", "recall@10", "mrr@10"])
    ap_denominator: str = "min_g_k"
    no_relevant: str = "skip"
    grades: dict[str, float] = field(default_factory=lambda: {"click": 1, "purchase": 2})
    min_grade: float = 1
    ndcg_gain: str = "exp"
    horizon: float = 1800.0
    horizons: dict[str, float] = field(default_factory=dict)
    unshown_items: str = "count"
    group_by: list[str] = field(default_factory=lambda: ["model", "surface"])


def query_metric(metric: str, items: list[str], grades: dict[str, float], cfg: Config) -> float | None:
    """One metric of one query, straight from the formulas."""
    name, k = metric.split("@")
    k = int(k)
    shown = set(items)
    rel = {
        i: g for i, g in grades.items() if g >= cfg.min_grade and (cfg.unshown_items == "count" or i in shown)
    }
    if not rel:
        return None
    hit_ranks = []
    first = set()
    for r, item in enumerate(items[:k], 1):
        if item in rel and item not in first:
            hit_ranks.append(r)
        first.add(item)
    if name in ("map", "wmap"):
        num = sum((j + 1) / r for j, r in enumerate(hit_ranks))
        d = {"min_g_k": min(len(rel), k), "g": len(rel), "hits": len(hit_ranks)}[cfg.ap_denominator]
        ap = num / d if d else 0.0
        return ap * len(rel) if name == "wmap" else ap
    if name == "ndcg":

        def gain(g: float) -> float:
            return 2**g - 1 if cfg.ndcg_gain == "exp" else g

        dcg = sum(gain(rel[items[r - 1]]) / math.log2(r + 1) for r in hit_ranks)
        ideal = sorted(rel.values(), reverse=True)[:k]
        idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
        return dcg / idcg if idcg else 0.0
    if name == "recall":
        return len(hit_ranks) / len(rel)
    if name == "precision":
        return len(hit_ranks) / k
    if name == "mrr":
        return 1 / hit_ranks[0] if hit_ranks else 0.0
    raise ValueError(metric)


def evaluate(impressions: list[dict[str, Any]], events: list[dict[str, Any]], cfg: Config) -> dict[str, Any]:
    """The batch answer: overall and per-group means, and unattributed/duplicate counts."""
    imps: dict[str, dict[str, Any]] = {}
    dup_imps = 0
    for imp in sorted(impressions, key=lambda r: r["ts"]):
        if imp["query_id"] in imps:
            dup_imps += 1
        else:
            imps[imp["query_id"]] = imp
    seen: set[Any] = set()
    dup_events = 0
    unattributed: Counter[str] = Counter()
    grades: dict[str, dict[str, float]] = {q: {} for q in imps}
    for ev in sorted(events, key=lambda r: r["ts"]):
        key = ev.get("event_id") or (ev["query_id"], ev["item"], ev["type"], ev["ts"])
        if key in seen:
            dup_events += 1
            continue
        seen.add(key)
        imp = imps.get(ev["query_id"])
        if imp is None:
            unattributed["unknown_query"] += 1
        elif ev["ts"] < imp["ts"]:
            unattributed["before_impression"] += 1
        elif ev["ts"] > imp["ts"] + cfg.horizons.get(ev["type"], cfg.horizon):
            unattributed["after_horizon"] += 1
        else:
            g = grades[ev["query_id"]]
            g[ev["item"]] = max(g.get(ev["item"], 0), cfg.grades[ev["type"]])

    def block(qids: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"queries": len(qids)}
        per_query = {
            q: {m: query_metric(m, imps[q]["items"], grades[q], cfg) for m in cfg.metrics} for q in qids
        }
        with_rel = [q for q in qids if per_query[q][cfg.metrics[0]] is not None]
        out["queries_with_relevant"] = len(with_rel)
        for m in cfg.metrics:
            if m.startswith("wmap@"):
                ap_m = "map@" + m.split("@")[1]
                weights = {
                    q: sum(
                        1
                        for i, g in grades[q].items()
                        if g >= cfg.min_grade and (cfg.unshown_items == "count" or i in imps[q]["items"])
                    )
                    for q in with_rel
                }
                total_w = sum(weights.values())
                num = sum(
                    (query_metric(ap_m, imps[q]["items"], grades[q], cfg) or 0) * weights[q] for q in with_rel
                )
                out[m] = num / total_w if total_w else None
                continue
            values = [per_query[q][m] for q in with_rel]
            n = len(with_rel) if cfg.no_relevant == "skip" else len(qids)
            out[m] = sum(values) / n if n else None
        return out

    groups: dict[tuple[str, ...], list[str]] = {}
    for q, imp in imps.items():
        labels = tuple(imp.get(f) if imp.get(f) is not None else "unknown" for f in cfg.group_by)
        groups.setdefault(labels, []).append(q)
    return {
        "overall": block(list(imps)),
        "groups": {labels: block(qs) for labels, qs in groups.items()},
        "unattributed": dict(unattributed),
        "duplicates": {"impressions": dup_imps, "events": dup_events},
    }
