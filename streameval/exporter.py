"""A prometheus-client Collector that turns the published :class:`~streameval.view.View` into
metric families on every scrape. Register it in a registry you construct (:func:`registry`).

Metric families (group labels are the ``group_by`` fields, e.g. ``model``, ``surface``):

- ``streameval_<metric>{k,window,...}`` for each configured metric family (``map``, ``wmap``,
  ``ndcg``, ``recall``, ``precision``, ``mrr``): the mean over the settled queries of the
  window. No sample while no query counts.
- ``streameval_metric_values`` / ``streameval_metric_squares{metric,k,window,...}``: sum and
  sum of squares of the per-query values (for ``wmap``: of |G|·AP) of those queries;
  ``streameval_queries``, ``streameval_queries_with_relevant``,
  ``streameval_relevant_items{window,...}``: their counts and Σ|G|.
- ``streameval_settled_metric_values_total``, ``..._squares_total``, ``streameval_settled_queries_total``,
  ``streameval_settled_queries_with_relevant_total``, ``streameval_settled_relevant_items_total``:
  the same parts, cumulative over everything that settled.
- ``streameval_provisional_<metric>{k,...}``, ``streameval_provisional_queries{...}``,
  ``streameval_provisional_queries_with_relevant{...}``: the same over open (unsettled) queries.
- Operations: see :meth:`StreamevalCollector._operations`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from streameval.scoring import Sums
from streameval.view import View

METRIC_HELP = {
    "map": "Mean average precision at k (AP denominator per ap_denominator)",
    "wmap": "Weighted MAP at k: sum |G| AP / sum |G|",
    "ndcg": "Mean NDCG at k",
    "recall": "Mean recall at k",
    "precision": "Mean precision at k",
    "mrr": "Mean reciprocal rank at k",
}


class StreamevalCollector(Collector):
    """Yields fresh families from ``view_source()`` on every collect()."""

    def __init__(self, view_source: Callable[[], View]) -> None:
        self.view_source = view_source

    def collect(self) -> Iterator[Metric]:
        view = self.view_source()
        yield from self._windows(view)
        yield from self._settled(view)
        yield from self._provisional(view)
        yield from self._operations(view)

    # --- labels --------------------------------------------------------------------------------

    @staticmethod
    def _group_values(group: tuple[str, ...]) -> list[str]:
        return list(group) if isinstance(group, tuple) else [str(group)]

    def _means(self, view: View, sums: Sums) -> list[float | None]:
        return sums.means(view.settings.metrics, view.settings.no_relevant)

    # --- families ------------------------------------------------------------------------------

    def _windows(self, view: View) -> Iterator[Metric]:
        s = view.settings
        groups = list(s.group_by)
        headline = {
            name: GaugeMetricFamily(
                f"streameval_{name}",
                f"{METRIC_HELP[name]}, settled queries in the window",
                labels=["k", "window", *groups],
            )
            for name in dict.fromkeys(m.name for m in s.metrics)
        }
        part_labels = ["metric", "k", "window", *groups]
        metric_sum = GaugeMetricFamily(
            "streameval_metric_values",
            "Sum of per-query values of settled queries in the window",
            labels=part_labels,
        )
        metric_sq = GaugeMetricFamily(
            "streameval_metric_squares",
            "Sum of squared per-query values of settled queries in the window",
            labels=part_labels,
        )
        count_labels = ["window", *groups]
        queries = GaugeMetricFamily(
            "streameval_queries", "Settled queries in the window", labels=count_labels
        )
        with_rel = GaugeMetricFamily(
            "streameval_queries_with_relevant",
            "Settled queries with |G| > 0 in the window",
            labels=count_labels,
        )
        rel_items = GaugeMetricFamily(
            "streameval_relevant_items",
            "Sum of |G| over settled queries in the window (wmap denominator)",
            labels=count_labels,
        )
        for window in s.windows:
            for group, sums in sorted(view.snapshot.windows.get(window.name, {}).items(), key=_key):
                gv = self._group_values(group)
                for metric, mean, total, squares in zip(
                    s.metrics, self._means(view, sums), sums.sums, sums.squares, strict=True
                ):
                    k = str(metric.k)
                    if mean is not None:
                        headline[metric.name].add_metric([k, window.name, *gv], mean)
                    metric_sum.add_metric([metric.name, k, window.name, *gv], total)
                    metric_sq.add_metric([metric.name, k, window.name, *gv], squares)
                queries.add_metric([window.name, *gv], sums.queries)
                with_rel.add_metric([window.name, *gv], sums.with_relevant)
                rel_items.add_metric([window.name, *gv], sums.relevant_items)
        yield from headline.values()
        yield from (metric_sum, metric_sq, queries, with_rel, rel_items)

    def _settled(self, view: View) -> Iterator[Metric]:
        groups = list(view.settings.group_by)
        labels = ["metric", "k", *groups]
        total = CounterMetricFamily(
            "streameval_settled_metric_values",
            "Sum of per-query values of every settled query",
            labels=labels,
        )
        squares = CounterMetricFamily(
            "streameval_settled_metric_squares",
            "Sum of squared per-query values of every settled query",
            labels=labels,
        )
        queries = CounterMetricFamily("streameval_settled_queries", "Settled queries", labels=groups)
        with_rel = CounterMetricFamily(
            "streameval_settled_queries_with_relevant", "Settled queries with |G| > 0", labels=groups
        )
        rel_items = CounterMetricFamily(
            "streameval_settled_relevant_items", "Sum of |G| over settled queries", labels=groups
        )
        for group, sums in sorted(view.snapshot.settled.items(), key=_key):
            gv = self._group_values(group)
            for metric, value, sq in zip(view.settings.metrics, sums.sums, sums.squares, strict=True):
                total.add_metric([metric.name, str(metric.k), *gv], value)
                squares.add_metric([metric.name, str(metric.k), *gv], sq)
            queries.add_metric(gv, sums.queries)
            with_rel.add_metric(gv, sums.with_relevant)
            rel_items.add_metric(gv, sums.relevant_items)
        yield from (total, squares, queries, with_rel, rel_items)

    def _provisional(self, view: View) -> Iterator[Metric]:
        s = view.settings
        groups = list(s.group_by)
        families = {
            name: GaugeMetricFamily(
                f"streameval_provisional_{name}",
                f"{METRIC_HELP[name]}, open (unsettled) queries",
                labels=["k", *groups],
            )
            for name in dict.fromkeys(m.name for m in s.metrics)
        }
        queries = GaugeMetricFamily(
            "streameval_provisional_queries", "Open (unsettled) queries", labels=groups
        )
        with_rel = GaugeMetricFamily(
            "streameval_provisional_queries_with_relevant", "Open queries with |G| > 0", labels=groups
        )
        for group, sums in sorted(view.snapshot.provisional.items(), key=_key):
            gv = self._group_values(group)
            for metric, mean in zip(s.metrics, self._means(view, sums), strict=True):
                if mean is not None:
                    families[metric.name].add_metric([str(metric.k), *gv], mean)
            queries.add_metric(gv, sums.queries)
            with_rel.add_metric(gv, sums.with_relevant)
        yield from families.values()
        yield from (queries, with_rel)

    def _operations(self, view: View) -> Iterator[Metric]:
        snap, counters = view.snapshot, view.snapshot.counters
        yield _counter(
            "streameval_records_consumed",
            "Records read, per topic",
            ["topic"],
            {(t,): n for t, n in counters.consumed.items()},
        )
        yield _counter(
            "streameval_records_rejected",
            "Records rejected, per topic and reason",
            ["topic", "reason"],
            dict(counters.rejected),
        )
        yield _counter(
            "streameval_dead_letter_records",
            "Rejected records sent to the dead-letter topic",
            ["topic", "reason"],
            dict(view.dead_lettered),
        )
        yield _counter(
            "streameval_events_unattributed",
            "Events not attributed to a query, per reason",
            ["reason"],
            {(r,): n for r, n in counters.unattributed.items()},
        )
        yield _counter(
            "streameval_events_attributed", "Events attributed to a query", [], {(): counters.attributed}
        )
        yield _counter(
            "streameval_duplicates",
            "Duplicate records dropped (impressions, events)",
            ["kind"],
            {(k,): n for k, n in counters.duplicates.items()},
        )
        yield _counter(
            "streameval_groups_folded",
            "Impressions whose group was folded into __other__ (max_groups)",
            [],
            {(): counters.groups_folded},
        )
        yield _counter(
            "streameval_impressions_late",
            "Impressions dropped because they arrived after their settling time",
            [],
            {(): counters.late_impressions},
        )
        yield _gauge("streameval_open_queries", "Queries not settled yet", [], {(): snap.open_queries})
        yield _gauge(
            "streameval_orphans_held", "Events held waiting for their impression", [], {(): snap.orphans_held}
        )
        finite = {(str(p),): w for p, w in view.partition_watermarks.items() if math.isfinite(w)}
        yield _gauge(
            "streameval_watermark_timestamp_seconds",
            "Event-time watermark (Unix seconds), per partition",
            ["partition"],
            finite,
        )
        yield _gauge(
            "streameval_watermark_lag_seconds",
            "Wall clock minus the watermark, per partition",
            ["partition"],
            {p: view.wall_time - w for p, w in finite.items()},
        )
        yield _gauge(
            "streameval_consumer_lag",
            "Records not processed yet, per topic and partition",
            ["topic", "partition"],
            {(t, str(p)): n for (t, p), n in view.consumer_lag.items()},
        )
        if view.last_commit is not None:
            yield _gauge(
                "streameval_checkpoint_age_seconds",
                "Seconds since offsets were last committed",
                [],
                {(): view.wall_time - view.last_commit},
            )
        yield _gauge(
            "streameval_ready",
            "1 once partitions are assigned and state is restored",
            [],
            {(): 1.0 if view.ready else 0.0},
        )
        latency = HistogramMetricFamily(
            "streameval_processing_latency_seconds",
            "Seconds from a record's Kafka timestamp to its processing",
        )
        latency.add_metric([], list(view.latency_buckets), view.latency_sum)
        yield latency


def _key(item: tuple[tuple[str, ...], Sums]) -> str:
    return str(item[0])


def _counter(name: str, help_text: str, labels: Sequence[str], values: Mapping[Any, float]) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=list(labels))
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family


def _gauge(name: str, help_text: str, labels: Sequence[str], values: Mapping[Any, float]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=list(labels))
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family


def registry(view_source: Callable[[], View]) -> CollectorRegistry:
    """A fresh registry holding only streameval's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StreamevalCollector(view_source))
    return reg
