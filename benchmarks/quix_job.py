"""Figure 7's peer: the daemon's job written with Quix Streams, as a team would write it.

One Quix application reads the impressions and events topics (concatenated: Quix aligns them
by time, and a key's state is shared by both), with exactly-once processing and the state in
RocksDB with its changelog topic, committing every 5 s like the daemon. Its work per record is
the core of the daemon's: an impression stores its top 10; an event is dropped when its
``event_id`` was seen (a state key per event), otherwise its grade joins the query's and the
query's AP@10 is computed again; a model's sum of AP over its queries is kept in memory. It
does less than the daemon (no horizon, no windows, no late or misrouted records, no metrics,
no dead-letter topic), so it is a generous peer. Values are read as bytes and decoded with
orjson, the tuned way (Quix' own JSON deserializer is slower, and a malformed record stops it).

Exits once it has processed ``--expect`` records and prints the models' MAP@10 over the queries
with an event, so a run can be checked against another.

    python benchmarks/quix_job.py --bootstrap-servers HOST:PORT --group G \\
        --impressions-topic I --events-topic E --expect N --state-dir DIR
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from quixstreams import Application
from quixstreams.state import State

K = 10
GRADES = {"click": 1.0, "purchase": 3.0}


def ap_at_k(shown: list[str], grades: dict[str, float]) -> float:
    """AP@K with binary relevance (an item with any grade), normalised by min(relevant, K)."""
    hits = 0
    total = 0.0
    for rank, item in enumerate(shown[:K], start=1):
        if item in grades:
            hits += 1
            total += hits / rank
    relevant = min(len(grades), K)
    return total / relevant if relevant else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--impressions-topic", required=True)
    parser.add_argument("--events-topic", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()
    app = Application(
        broker_address=args.bootstrap_servers,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=5.0,
        state_dir=args.state_dir,
        loglevel="WARNING",
    )
    impressions = app.topic(args.impressions_topic, key_deserializer="bytes", value_deserializer="bytes")
    events = app.topic(args.events_topic, key_deserializer="bytes", value_deserializer="bytes")
    ap_sum: dict[str, float] = {}
    scored: dict[str, int] = {}

    def step(value: bytes, state: State) -> Any:
        try:
            record = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict):
            return None
        if "items" in record:  # an impression
            if state.get("shown") is None and isinstance(record.get("items"), list):
                state.set("shown", [record["items"][:K], str(record.get("model"))])
            return None
        grade = GRADES.get(record.get("type"))
        event_id = record.get("event_id")
        shown = state.get("shown")
        if grade is None or shown is None or not isinstance(event_id, str):
            return None
        if state.get("e:" + event_id) is not None:
            return None  # a duplicate
        state.set("e:" + event_id, 1)
        items, model = shown
        grades = state.get("grades") or {}
        item = record.get("item")
        if grade <= grades.get(item, 0.0):
            return None
        before = ap_at_k(items, grades) if grades else None
        grades[item] = grade
        state.set("grades", grades)
        after = ap_at_k(items, grades)
        ap_sum[model] = ap_sum.get(model, 0.0) + after - (before or 0.0)
        if before is None:
            scored[model] = scored.get(model, 0) + 1
        return None

    sdf = app.dataframe(impressions).concat(app.dataframe(events))
    sdf = sdf.update(step, stateful=True)
    app.run(count=args.expect, collect=False)
    for model in sorted(ap_sum):
        print(f"{model} MAP@{K} {ap_sum[model] / scored[model]:.6f} over {scored[model]} queries")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
