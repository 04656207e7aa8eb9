"""Whole random logs through `replay` against the batch oracle and against trec_eval."""

from __future__ import annotations

import random

import pytest
import pytrec_eval

from streameval.config import load_settings
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression
from tests import oracle
from tests.logs import random_log
from tests.pipelines import remembering

CONFIGS = [
    {},
    {
        "ap_denominator": "g",
        "ndcg_gain": "linear",
        "metrics": ["map@5", "wmap@5", "ndcg@5", "precision@3"],
    },
    {"ap_denominator": "hits", "no_relevant": "zero", "metrics": ["map@10", "recall@10", "mrr@10"]},
    {"unshown_items": "ignore", "min_grade": 2, "metrics": ["map@3", "ndcg@20", "wmap@20"]},
    {"horizon": "10m", "horizons": {"purchase": "24h"}, "metrics": ["map@10", "ndcg@10"]},
    {"grades": {"click": 1, "purchase": 3}, "group_by": ["model"], "metrics": ["map@2", "mrr@1"]},
]


def oracle_config(settings) -> oracle.Config:
    return oracle.Config(
        metrics=[str(m) for m in settings.metrics],
        ap_denominator=settings.ap_denominator,
        no_relevant=settings.no_relevant,
        grades=dict(settings.grades),
        min_grade=settings.min_grade,
        ndcg_gain=settings.ndcg_gain,
        horizon=settings.horizon,
        horizons=dict(settings.horizons),
        unshown_items=settings.unshown_items,
        group_by=list(settings.group_by),
    )


def normalised(records):
    out = []
    for r in records:
        r = dict(r)
        if "items" in r:
            r["items"] = [str(i) for i in r["items"]]
        else:
            r["item"] = str(r["item"])
        out.append(r)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults"
)
def test_replay_equals_batch_oracle(replay, seed, config) -> None:
    rng = random.Random(seed)
    log = random_log(rng, n_queries=60)
    report = replay(log.impressions, log.events, **config)
    settings = load_settings(None, {}, config)
    expected = oracle.evaluate(
        normalised(log.valid_impressions), normalised(log.valid_events), oracle_config(settings)
    )
    for key, value in expected["overall"].items():
        assert report["overall"][key] == pytest.approx(value, abs=1e-9), key
    got_groups = {tuple(g["labels"].values()): g for g in report["groups"]}
    assert set(got_groups) == set(expected["groups"])
    for labels, block in expected["groups"].items():
        for key, value in block.items():
            assert got_groups[labels][key] == pytest.approx(value, abs=1e-9), (labels, key)
    assert report["inputs"]["rejected"] == dict(log.rejected)
    assert report["inputs"]["unattributed"] == expected["unattributed"]
    assert report["inputs"]["duplicates"] == expected["duplicates"]
    assert report["inputs"]["records"] == len(log.impressions) + len(log.events)


@pytest.mark.parametrize("seed", range(5))
def test_per_query_values_equal_trec_eval(seed) -> None:
    """For the |G| denominator and linear gain, trec_eval (pytrec_eval) is the reference."""
    rng = random.Random(100 + seed)
    k = rng.choice([3, 5, 10])
    settings = load_settings(
        None,
        {},
        {
            "ap_denominator": "g",
            "ndcg_gain": "linear",
            "metrics": [f"map@{k}", f"ndcg@{k}", f"recall@{k}", f"precision@{k}", "mrr@1000"],
            "grades": {"click": 1, "purchase": 2, "cart": 3},
        },
    )
    log = random_log(rng, n_queries=80, duplicates_in_lists=False, bad=False, list_len=(1, 15))
    pipeline = Pipeline(remembering(settings))
    values: dict[str, tuple[float, ...]] = {}

    class Recording:
        """The pipeline as the join's sink, noting each settled query's values on the way (a
        wrapper, not a patched method: a compiled Pipeline's methods cannot be replaced)."""

        def __getattr__(self, name):
            return getattr(pipeline, name)

        def settled(self, query):
            if query.values is not None:
                values[query.query_id] = query.values
            pipeline.settled(query)

    pipeline.joiner.sink = Recording()
    records = [Impression(r["query_id"], r["ts"], tuple(r["items"]), ()) for r in log.valid_impressions]
    records += [
        Engagement(r["query_id"], r["item"], r["type"], r["ts"], r.get("event_id")) for r in log.valid_events
    ]
    for r in sorted(records, key=lambda r: r.ts):
        pipeline.process(r)
    pipeline.finish()

    expected = oracle.evaluate(
        normalised(log.valid_impressions), normalised(log.valid_events), oracle_config(settings)
    )
    assert expected  # the oracle and the pipeline see the same log
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    first_imp: dict[str, dict] = {}
    for imp in sorted(log.valid_impressions, key=lambda r: r["ts"]):
        first_imp.setdefault(imp["query_id"], imp)
    for qid, imp in first_imp.items():
        run[qid] = {item: float(len(imp["items"]) - i) for i, item in enumerate(imp["items"])}
    seen = set()
    for ev in sorted(log.valid_events, key=lambda r: r["ts"]):
        key = ev.get("event_id") or (ev["query_id"], ev["item"], ev["type"], ev["ts"])
        imp = first_imp.get(ev["query_id"])
        if key in seen or imp is None or not imp["ts"] <= ev["ts"] <= imp["ts"] + settings.horizon:
            seen.add(key)
            continue
        seen.add(key)
        grades = qrels.setdefault(ev["query_id"], {})
        grades[ev["item"]] = max(grades.get(ev["item"], 0), int(settings.grades[ev["type"]]))
    qrels = {q: g for q, g in qrels.items() if g}
    measures = {f"map_cut.{k}", f"ndcg_cut.{k}", f"recall.{k}", f"P.{k}", "recip_rank"}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate({q: run[q] for q in qrels})
    assert set(values) == set(trec)
    for qid, m in trec.items():
        want = (
            m[f"map_cut_{k}"],
            m[f"ndcg_cut_{k}"],
            m[f"recall_{k}"],
            m[f"P_{k}"],
            m["recip_rank"],
        )
        assert values[qid] == pytest.approx(want, abs=1e-9), qid
