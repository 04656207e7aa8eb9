"""Figure 1m's input: the simulated files rewritten in another team's shape (the shape of
``examples/foreign/``), and the mapping that reads them (README, Your logs)."""

from __future__ import annotations

import random
from pathlib import Path

import orjson

MAPPING = """
[input.impressions]
query_id = "request.id"
ts = "timestamp_ms"
ts_unit = "ms"
items = "results"
item_id = "sku"
item_rank = "pos"
labels = { model = "ranker.name", surface = "page" }

[input.events]
query_id = "rid"
item = "product.id"
type = "kind"
types = { CLICK = "click", ORDER = "purchase" }
ignore_types = ["VIEW"]
ts = "time_ms"
ts_unit = "ms"
event_id = "eid"
"""
_KINDS = {"click": "CLICK", "purchase": "ORDER"}


def _ms(ts: object) -> object:
    return round(ts * 1000) if isinstance(ts, int | float) and not isinstance(ts, bool) else ts


def _impression(o: dict, rng: random.Random) -> dict:
    out: dict = {"request": {"id": o.get("query_id")}, "timestamp_ms": _ms(o.get("ts"))}
    out["ranker"] = {"name": o.get("model")}
    out["page"] = o.get("surface")
    items = o.get("items")
    if isinstance(items, list):
        results = [{"pos": rank, "sku": item} for rank, item in enumerate(items, start=1)]
        rng.shuffle(results)
        items = results
    out["results"] = items
    return out


def _event(o: dict) -> dict:
    out: dict = {"rid": o.get("query_id"), "product": {"id": o.get("item")}}
    out["kind"] = _KINDS.get(o.get("type"), o.get("type"))  # type: ignore[arg-type]
    out["time_ms"] = _ms(o.get("ts"))
    if "event_id" in o:
        out["eid"] = o["event_id"]
    return out


def rewrite(files: list[Path], out: Path) -> tuple[list[Path], Path]:
    """``files`` (impressions first) in the foreign shape under ``out``, and the configuration."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    written = []
    for i, path in enumerate(files):
        target = out / path.name
        with path.open("rb") as source, target.open("wb") as sink:
            for line in source:
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    sink.write(line)
                    continue
                if not isinstance(obj, dict):
                    sink.write(line)
                    continue
                sink.write(orjson.dumps(_impression(obj, rng) if i == 0 else _event(obj)) + b"\n")
        written.append(target)
    config = out / "streameval.toml"
    config.write_text(MAPPING)
    return written, config
