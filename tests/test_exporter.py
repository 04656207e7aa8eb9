"""The Prometheus collector and the HTTP router, on a fresh registry, without a broker."""

from __future__ import annotations

import io
import math

import orjson
from prometheus_client import generate_latest

from streameval.config import load_settings
from streameval.exporter import registry
from streameval.history import History
from streameval.http import Health, make_app
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression
from streameval.view import LATENCY_BUCKETS, Latency, Operations, View, merge_snapshots
from tests.pipelines import ingest
from tests.promtool import check_metrics

T0 = 1_700_000_000.0


def view_of(*pipelines: Pipeline, ready: bool = True) -> View:
    snaps = [p.snapshot() for p in pipelines]
    return View(
        settings=pipelines[0].settings,
        snapshot=merge_snapshots(snaps),
        partition_watermarks={i: s.watermark for i, s in enumerate(snaps)},
        consumer_lag={("imps", 0): 3},
        latency_buckets=(("1.0", 2), ("+Inf", 3)),
        latency_sum=4.5,
        wall_time=T0 + 10_000,
        ops=Operations(last_checkpoint=T0 + 9_990, checkpoints=3, restores=1, restore_records=40),
        ready=ready,
    )


def fed_pipeline(model: str, hits: list[str], qid: str) -> Pipeline:
    settings = load_settings(
        None, {}, {"metrics": ["map@3", "ndcg@3"], "windows": ["1h"], "group_by": ["model"]}
    )
    p = Pipeline(settings)
    p.process(Impression(qid, T0, ("a", "b", "c"), (model,)))
    for item in hits:
        p.process(Engagement(qid, item, "click", T0 + 1, None))
    p.process(Impression(qid + "-flush", T0 + 1900, ("a",), (model,)))  # settles the first query
    ingest(p, b"{oops", "imps", is_impression=True)
    return p


def test_headline_gauges_and_parts_from_two_partitions() -> None:
    a = fed_pipeline("m", ["b"], "q1")  # AP@3 = (1/2)/1 = 0.5
    b = fed_pipeline("m", ["a", "c"], "q2")  # AP@3 = (1 + 2/3)/2
    reg = registry(lambda: view_of(a, b))
    expected_map = (0.5 + (1 + 2 / 3) / 2) / 2
    get = reg.get_sample_value
    assert get("streameval_map", {"k": "3", "window": "1h", "model": "m"}) == expected_map
    assert (
        get("streameval_metric_values", {"metric": "map", "k": "3", "window": "1h", "model": "m"})
        == 0.5 + (1 + 2 / 3) / 2
    )
    assert get("streameval_queries", {"window": "1h", "model": "m"}) == 2
    assert get("streameval_queries_with_relevant", {"window": "1h", "model": "m"}) == 2
    assert get("streameval_settled_queries_total", {"model": "m"}) == 2
    assert (
        get("streameval_settled_metric_values_total", {"metric": "map", "k": "3", "model": "m"})
        == 0.5 + (1 + 2 / 3) / 2
    )
    assert get("streameval_provisional_queries", {"model": "m"}) == 2  # the two flush impressions
    assert get("streameval_records_rejected_total", {"topic": "imps", "reason": "not_json"}) == 2
    assert get("streameval_records_consumed_total", {"topic": "imps"}) == 2
    assert get("streameval_open_queries") == 2
    assert get("streameval_consumer_lag", {"topic": "imps", "partition": "0"}) == 3
    assert get("streameval_processing_latency_seconds_count") == 3
    assert get("streameval_checkpoint_age_seconds") == 10
    assert get("streameval_ready") == 1


def test_scrape_passes_promtool_check_metrics() -> None:
    """Prometheus' own linter: no _sum/_count/_bucket outside histograms, _total only on
    counters, HELP everywhere, base units."""
    view = view_of(fed_pipeline("m", ["b"], "q1"), fed_pipeline("m", ["a", "c"], "q2"))
    text = generate_latest(registry(lambda: view)).decode()
    assert "streameval_provisional_map" in text and "streameval_watermark_timestamp_seconds" in text
    assert check_metrics(text) == ""


def test_every_family_has_help_text() -> None:
    reg = registry(lambda: view_of(fed_pipeline("m", ["b"], "q")))
    for family in reg.collect():
        assert family.documentation, family.name


def call(app, path: str) -> tuple[str, str]:
    status: list[str] = []
    body = b"".join(
        app(
            {
                "PATH_INFO": path,
                "REQUEST_METHOD": "GET",
                "wsgi.input": io.BytesIO(),
                "SERVER_NAME": "x",
                "SERVER_PORT": "1",
                "wsgi.url_scheme": "http",
                "QUERY_STRING": "",
            },
            lambda s, h: status.append(s),
        )
    )
    return status[0], body.decode()


def test_router() -> None:
    now = [0.0]
    view = view_of(fed_pipeline("m", ["b"], "q"), ready=False)
    health = Health(clock=lambda: now[0])
    history = History(every=0.0)
    history.record(view)
    app = make_app(registry(lambda: view), health, lambda: view, lambda: history.summary(view, "wall"))
    assert call(app, "/metrics")[1].count("# HELP streameval_map ") == 1
    status, body = call(app, "/healthz")
    assert status.startswith("200") and "last checkpoint: " in body and "partitions restoring: 0" in body
    assert "records consumed: 1" in body  # what the view counted (streameval_records_consumed_total)
    assert call(app, "/readyz")[0].startswith("503")
    status, page = call(app, "/")
    assert status.startswith("200") and "/api/summary" in page and "<svg" in page
    status, summary = call(app, "/api/summary")
    data = orjson.loads(summary)
    assert status.startswith("200") and data["metric"] == "map@3"
    assert data["table"][0]["group"] == "model=m" and data["points"]
    assert call(app, "/nope")[0].startswith("404")
    now[0] = 100.0
    assert call(app, "/healthz")[0].startswith("503")


def test_latency_histogram_counts_each_observation_in_the_first_bucket_that_holds_it() -> None:
    latency = Latency()
    observed = [-1.0, 0.0, *LATENCY_BUCKETS[:-1], *(b * 1.01 for b in LATENCY_BUCKETS[:-1]), 1e9]
    for seconds in observed:
        latency.observe_all([seconds])
    expected = [0] * len(LATENCY_BUCKETS)
    for seconds in observed:  # the bucket ``le`` its bound, by definition; negative counts as 0
        expected[next(i for i, b in enumerate(LATENCY_BUCKETS) if max(seconds, 0.0) <= b)] += 1
    assert latency.counts == expected
    assert latency.cumulative()[-1] == ("+Inf", len(observed))
    at_once = Latency()  # the daemon observes each drain's records at once
    at_once.observe_all(observed[:7])
    at_once.observe_all(list(reversed(observed[7:])))
    at_once.observe_all([])
    assert at_once.counts == expected
    assert math.isclose(at_once.total, latency.total, rel_tol=1e-12)
