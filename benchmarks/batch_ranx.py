"""The batch route teams take today: JSONL logs -> pandas (parse, clean, join) -> ranx MAP@10.

Run as its own process by ``python -m benchmarks`` (figure 5) so its time and peak memory are
its own. The definitions are the README's, written the way a notebook would: impressions
deduplicated by query_id (the earliest wins), events attributed when
``imp.ts <= ev.ts <= imp.ts + horizon``, the best grade per item, items with grade >= 1
relevant, AP@10 with |G| as denominator (ranx's ``map@10``; replay's ``--ap-denominator g``),
queries without a relevant item skipped. Prints one JSON object: MAP@10 per model.

    python benchmarks/batch_ranx.py IMPRESSIONS EVENTS [EVENTS ...] [--horizon SECONDS]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
import pandas as pd
from ranx import Qrels, Run, evaluate

GRADES = {"click": 1, "purchase": 2}


def read_jsonl(path: str) -> pd.DataFrame:
    rows = []
    with open(path, "rb") as handle:
        for line in handle:
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return pd.DataFrame.from_records(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("impressions")
    parser.add_argument("events", nargs="+")
    parser.add_argument("--horizon", type=float, default=1800.0)
    args = parser.parse_args()

    imps = read_jsonl(args.impressions)
    imps = imps.dropna(subset=["query_id", "ts", "items"])
    imps = imps[imps["items"].map(lambda x: isinstance(x, list) and len(x) > 0)]
    imps = imps[pd.to_numeric(imps["ts"], errors="coerce").notna()]
    imps["ts"] = imps["ts"].astype(float)
    imps["model"] = imps["model"].fillna("unknown")
    imps = imps.sort_values("ts", kind="stable").drop_duplicates("query_id", keep="first")

    # a record without "type" takes its file's: clicks.jsonl -> click
    typed = [read_jsonl(p).assign(topic_type=Path(p).stem.rstrip("s")) for p in args.events]
    events = pd.concat(typed, ignore_index=True)
    if "type" not in events:
        events["type"] = None
    events["type"] = events["type"].fillna(events["topic_type"])
    events = events.dropna(subset=["query_id", "item", "ts"])
    events = events[events["type"].isin(list(GRADES))]
    events = events[pd.to_numeric(events["ts"], errors="coerce").notna()]
    events["ts"] = events["ts"].astype(float)
    events["item"] = events["item"].astype(str)

    joined = events.merge(imps[["query_id", "ts"]], on="query_id", suffixes=("", "_imp"))
    joined = joined[(joined["ts"] >= joined["ts_imp"]) & (joined["ts"] <= joined["ts_imp"] + args.horizon)]
    joined["grade"] = joined["type"].map(GRADES)
    best = joined.groupby(["query_id", "item"], sort=False)["grade"].max().reset_index()
    best = best[best["grade"] >= 1]

    out = {}
    for model, group in imps.groupby("model"):
        relevant = best[best["query_id"].isin(group["query_id"])]
        qrels_dict: dict[str, dict[str, int]] = {}
        for query_id, item, grade in relevant.itertuples(index=False):
            qrels_dict.setdefault(query_id, {})[item] = int(grade)
        run_dict: dict[str, dict[str, float]] = {}
        for query_id, items in zip(group["query_id"], group["items"], strict=True):
            if query_id not in qrels_dict:
                continue
            scores: dict[str, float] = {}
            for rank, item in enumerate(items, start=1):
                scores.setdefault(str(item), 1.0 / rank)  # the first occurrence ranks
            run_dict[query_id] = scores
        if not qrels_dict:
            continue
        out[str(model)] = float(evaluate(Qrels(qrels_dict), Run(run_dict), "map@10"))
    sys.stdout.write(orjson.dumps(out).decode() + "\n")


if __name__ == "__main__":
    main()
