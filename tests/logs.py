"""Random impression/event logs for tests: valid records plus labelled bad ones."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson


@dataclass
class Log:
    impressions: list[bytes] = field(default_factory=list)
    events: list[bytes] = field(default_factory=list)
    valid_impressions: list[dict[str, Any]] = field(default_factory=list)
    valid_events: list[dict[str, Any]] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)

    def write(self, directory: Path) -> tuple[Path, Path]:
        imps, evs = directory / "impressions.jsonl", directory / "events.jsonl"
        imps.write_bytes(b"\n".join(self.impressions) + b"\n")
        evs.write_bytes(b"\n".join(self.events) + b"\n")
        return imps, evs


BAD_IMPRESSIONS = [
    (b"{not json", "not_json"),
    (b"[1, 2, 3]", "not_object"),
    (b'"just a string"', "not_object"),
    (orjson.dumps({"ts": 5, "items": ["a"]}), "missing_field"),
    (orjson.dumps({"query_id": "x", "items": ["a"]}), "missing_field"),
    (orjson.dumps({"query_id": "x", "ts": 5}), "missing_field"),
    (orjson.dumps({"query_id": 7, "ts": 5, "items": ["a"]}), "wrong_type"),
    (orjson.dumps({"query_id": "x", "ts": "yesterday", "items": ["a"]}), "wrong_type"),
    (orjson.dumps({"query_id": "x", "ts": 5, "items": "a,b"}), "wrong_type"),
    (orjson.dumps({"query_id": "x", "ts": 5, "items": ["a", 1.5]}), "wrong_type"),
    (orjson.dumps({"query_id": "x", "ts": 5, "items": ["a"], "model": [3]}), "wrong_type"),
    (orjson.dumps({"query_id": "x", "ts": 5, "items": []}), "empty_items"),
]
BAD_EVENTS = [
    (b"\xff\xfe garbage", "not_json"),
    (b"null", "not_object"),
    (orjson.dumps({"query_id": "q", "type": "click", "ts": 1}), "missing_field"),
    (orjson.dumps({"query_id": "q", "item": "a", "ts": 1}), "missing_field"),
    (orjson.dumps({"query_id": "q", "item": "a", "type": "click"}), "missing_field"),
    (orjson.dumps({"query_id": "q", "item": True, "type": "click", "ts": 1}), "wrong_type"),
    (orjson.dumps({"query_id": "q", "item": "a", "type": 2, "ts": 1}), "wrong_type"),
    (orjson.dumps({"query_id": "q", "item": "a", "type": "click", "ts": [1]}), "wrong_type"),
    (
        orjson.dumps({"query_id": "q", "item": "a", "type": "click", "ts": 1, "event_id": 9}),
        "wrong_type",
    ),
    (orjson.dumps({"query_id": "q", "item": "a", "type": "hover", "ts": 1}), "unknown_event_type"),
]


def _shown(rng: random.Random, n: int, catalogue: int, duplicates: bool) -> list[str]:
    if duplicates:
        return [f"i{rng.randrange(catalogue)}" for _ in range(n)]
    return [f"i{x}" for x in rng.sample(range(catalogue), min(n, catalogue))]


def _event_time(rng: random.Random, ts: float, horizon: float) -> float:
    """Inside the horizon (80%), before the impression (10%) or after the horizon (10%)."""
    where = rng.random()
    if where < 0.8:
        return ts + rng.uniform(0, horizon)
    if where < 0.9:
        return ts - rng.uniform(1, 900)
    return ts + horizon + rng.uniform(1, 4 * 3600)


def random_log(
    rng: random.Random,
    n_queries: int = 40,
    *,
    t0: float = 1_700_000_000.0,
    span: float = 7200.0,
    catalogue: int = 30,
    list_len: tuple[int, int] = (1, 12),
    duplicates_in_lists: bool = True,
    bad: bool = True,
    models: tuple[str, ...] = ("a", "b"),
    horizon: float = 1800.0,
) -> Log:
    """A log with impressions, engagements (inside and outside the horizon), orphans, duplicates."""
    log = Log()
    for q in range(n_queries):
        qid = f"q{q}"
        ts = round(t0 + rng.uniform(0, span), 3)
        n = rng.randint(*list_len)
        items = _shown(rng, n, catalogue, duplicates_in_lists)
        imp: dict[str, Any] = {"query_id": qid, "ts": ts, "items": items}
        if rng.random() < 0.9:
            imp["model"] = rng.choice(models)
        if rng.random() < 0.5:
            imp["surface"] = rng.choice(["home", "search"])
        log.valid_impressions.append(imp)
        log.impressions.append(orjson.dumps(imp))
        if rng.random() < 0.05:  # a duplicate impression, later, with another list
            later = dict(imp, ts=ts + rng.uniform(0, 60), items=list(reversed(items)))
            log.valid_impressions.append(later)
            log.impressions.append(orjson.dumps(later))
        for _ in range(rng.randint(0, 6)):
            shown = rng.random() < 0.8
            item = rng.choice(items) if shown else f"i{rng.randrange(catalogue)}"
            ev_ts = _event_time(rng, ts, horizon)
            ev: dict[str, Any] = {
                "query_id": qid,
                "item": item,
                "type": rng.choice(["click", "click", "purchase"]),
                "ts": round(ev_ts, 3),
            }
            if rng.random() < 0.3:
                ev["event_id"] = f"e{q}-{rng.randrange(10**9)}"
            log.valid_events.append(ev)
            log.events.append(orjson.dumps(ev))
            if rng.random() < 0.1:  # exact duplicate
                log.valid_events.append(ev)
                log.events.append(orjson.dumps(ev))
    for _ in range(max(1, n_queries // 10)):  # events of queries never served
        ev = {
            "query_id": f"ghost{rng.randrange(10**6)}",
            "item": "i1",
            "type": "click",
            "ts": round(t0 + rng.uniform(0, span), 3),
        }
        log.valid_events.append(ev)
        log.events.append(orjson.dumps(ev))
    if bad:
        for raw, reason in BAD_IMPRESSIONS:
            log.impressions.insert(rng.randrange(len(log.impressions) + 1), raw)
            log.rejected[reason] += 1
        for raw, reason in BAD_EVENTS:
            log.events.insert(rng.randrange(len(log.events) + 1), raw)
            log.rejected[reason] += 1
    rng.shuffle(log.events)
    return log
