"""Throughput of the pure core against the floor of parsing the same JSON lines."""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.config import load_settings  # noqa: E402
from streameval.pipeline import Pipeline  # noqa: E402


def make_lines(queries: int, seed: int = 1) -> list[tuple[bool, bytes]]:
    """A time-ordered log: impressions of 20 items, ~1.5 engagements each."""
    rng = random.Random(seed)
    out: list[tuple[float, bool, bytes]] = []
    t0 = 1_767_225_600.0
    for q in range(queries):
        ts = t0 + q * 0.05
        items = [f"sku-{rng.randrange(100_000)}" for _ in range(20)]
        imp = {"query_id": f"q{q}", "ts": ts, "items": items, "model": f"m{q % 3}", "surface": "home"}
        out.append((ts, True, orjson.dumps(imp)))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            ev = {
                "query_id": f"q{q}",
                "item": rng.choice(items),
                "type": rng.choice(("click", "purchase")),
                "ts": ts + rng.uniform(0, 600),
            }
            out.append((ev["ts"], False, orjson.dumps(ev)))
    out.sort(key=lambda r: r[0])
    return [(is_imp, raw) for _, is_imp, raw in out]


def best_of(runs: int, fn) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    lines = make_lines(args.queries)
    settings = load_settings(None, {}, {"metrics": ["map@10", "map@5", "ndcg@10", "recall@10", "mrr@10"]})

    def floor() -> None:
        for _, raw in lines:
            orjson.loads(raw)

    def decode() -> None:
        p = Pipeline(settings)
        for is_imp, raw in lines:
            if is_imp:
                p.decode_impression(raw)
            else:
                p.decode_event(raw, "events")

    def pipeline() -> None:
        p = Pipeline(settings)
        for is_imp, raw in lines:
            p.ingest(raw, "impressions" if is_imp else "events", is_imp)
        p.finish()

    n = len(lines)
    t_floor = best_of(args.runs, floor)
    t_decode = best_of(args.runs, decode)
    t_pipe = best_of(args.runs, pipeline)
    print(f"records: {n} ({args.queries} queries), best of {args.runs}")
    print(f"floor  orjson.loads      {n / t_floor:12,.0f} rec/s  1.00x")
    print(f"decode + validate        {n / t_decode:12,.0f} rec/s  {t_decode / t_floor:5.2f}x floor")
    print(f"whole pipeline           {n / t_pipe:12,.0f} rec/s  {t_pipe / t_floor:5.2f}x floor")


if __name__ == "__main__":
    main()
