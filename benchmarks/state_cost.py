"""Figures 3 and 4: the pipeline's cost per record at a given state size, and memory per open query.

Runs the daemon's pipeline (provisional sums and windows on, no Kafka) in this process over a
synthetic steady stream: ``density`` impressions per second of event time, each followed by a
click 5 s later (half of them) and a purchase 20 s later (a tenth). With the 30 min horizon,
``--open N`` sets the density to N / 1800 s, so N queries are open at any time once the stream
has run a horizon. Every record goes through decoding, as in the daemon, and the collector runs
as in the daemon (no automatic full collections: ``streameval/collector.py``).

- default: warm up for two horizons (open queries at N, settling and windows in steady state),
  then time ``--measure`` more records in three chunks; prints the median cost per record.
- ``--memory``: run one horizon (N open queries, none settled yet) and print the growth of the
  resident set per open query (after a full garbage collection).

Prints one JSON object. Used by ``python -m benchmarks``; runs alone too:

    python benchmarks/state_cost.py --open 1000000 --memory
"""

from __future__ import annotations

import argparse
import gc
import heapq
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.collector import FullCollections  # noqa: E402
from streameval.config import load_settings  # noqa: E402
from streameval.pipeline import Pipeline  # noqa: E402

HORIZON_S = 1800.0
CATALOG = [f"sku-{i:06d}" for i in range(200_000)]


def stream(density: float, list_len: int, seed: int = 1) -> Iterator[tuple[bytes, str, bool]]:
    """(raw, topic, is_impression) in event-time order, forever."""
    rng = random.Random(seed)
    t0 = 1_767_225_600.0
    pending: list[tuple[float, int, bytes]] = []  # events waiting for their time
    seq = 0
    q = 0
    while True:
        ts = t0 + q / density
        while pending and pending[0][0] <= ts:
            yield heapq.heappop(pending)[2], "events", False
        query_id = f"q{q:09d}"
        items = rng.sample(CATALOG, list_len)
        imp = {"query_id": query_id, "ts": ts, "items": items, "model": f"m{q % 3}", "surface": "home"}
        yield orjson.dumps(imp), "impressions", True
        if rng.random() < 0.5:
            ev = {"query_id": query_id, "item": items[rng.randrange(list_len)], "type": "click", "ts": ts + 5}
            heapq.heappush(pending, (ts + 5, seq, orjson.dumps(ev)))
            seq += 1
        if rng.random() < 0.1:
            ev = {"query_id": query_id, "item": items[rng.randrange(3)], "type": "purchase", "ts": ts + 20}
            heapq.heappush(pending, (ts + 20, seq, orjson.dumps(ev)))
            seq += 1
        q += 1


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--open", type=int, default=1000, help="open queries in steady state")
    parser.add_argument("--k", type=int, default=10, help="cut-off of every metric")
    parser.add_argument("--windows", default="5m,1h,24h", help="sliding windows (comma-separated)")
    parser.add_argument("--list-len", type=int, default=20, help="items per impression")
    parser.add_argument("--measure", type=int, default=150_000, help="records timed")
    parser.add_argument("--memory", action="store_true", help="measure memory per open query instead")
    args = parser.parse_args()
    k = args.k
    settings = load_settings(
        None,
        {},
        {
            "metrics": [f"map@{k}", f"ndcg@{k}", f"recall@{k}", f"mrr@{k}"],
            "windows": args.windows.split(","),
            "horizon": f"{HORIZON_S:.0f}s",
        },
    )
    # for the whole process: the daemon's full collections; its young generations after each round
    # of its loop are not modelled (no rounds here), they run every 700 allocations
    FullCollections()
    density = args.open / HORIZON_S
    records = stream(density, args.list_len)
    pipeline = Pipeline(settings)

    def ingest(raw: bytes, topic: str, is_imp: bool) -> None:
        record = pipeline.decode_impression(raw) if is_imp else pipeline.decode_event(raw, topic)
        pipeline.handle(topic, record)

    if args.memory:
        gc.collect()
        before = rss_bytes()
        n = 0
        for raw, topic, is_imp in records:
            ingest(raw, topic, is_imp)
            n += is_imp
            if n >= args.open:
                break
        del records
        gc.collect()
        grown = rss_bytes() - before
        open_now = len(pipeline.joiner.open)
        print(orjson.dumps({"open_queries": open_now, "bytes_per_open_query": grown / open_now}).decode())
        return

    warm_until = 2 * args.open  # impressions: two horizons of event time
    n = 0
    for raw, topic, is_imp in records:
        ingest(raw, topic, is_imp)
        n += is_imp
        if n >= warm_until:
            break
    batch = [next(records) for _ in range(args.measure)]
    third = len(batch) // 3
    chunks = [batch[i * third : (i + 1) * third] for i in range(3)]  # in order
    del batch
    costs = []
    for chunk in chunks:
        start = time.perf_counter()
        for raw, topic, is_imp in chunk:
            ingest(raw, topic, is_imp)
        costs.append((time.perf_counter() - start) / len(chunk))
    print(
        orjson.dumps(
            {
                "us_per_record": statistics.median(costs) * 1e6,
                "open_queries": len(pipeline.joiner.open),
                "tombstones": len(pipeline.joiner.tombstones),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
