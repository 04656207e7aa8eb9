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
from collections.abc import Callable, Iterator, Mapping

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
        for name, kind, help_text, labels, samples in OPERATIONS:
            values = samples(view)
            if values is None:
                continue
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                name, help_text, labels=list(labels)
            )
            for label_values, value in sorted(values.items()):
                family.add_metric(list(label_values), value)
            yield family
        latency = HistogramMetricFamily(
            "streameval_processing_latency_seconds",
            "Seconds from a record's Kafka timestamp to its processing",
        )
        latency.add_metric([], list(view.latency_buckets), view.latency_sum)
        yield latency


Samples = Callable[[View], Mapping[tuple[str, ...], float] | None]


def _one(read: Callable[[View], float | None]) -> Samples:
    """A family of one unlabelled sample (none while ``read`` gives None)."""

    def samples(view: View) -> Mapping[tuple[str, ...], float] | None:
        value = read(view)
        return None if value is None else {(): value}

    return samples


def _finite_watermarks(view: View) -> dict[tuple[str, ...], float]:
    return {(str(p),): w for p, w in view.partition_watermarks.items() if math.isfinite(w)}


#: The operational families: (name, counter or gauge, help, labels, samples from the view).
#: Counters are named without ``_total``; prometheus-client adds it.
OPERATIONS: tuple[tuple[str, str, str, tuple[str, ...], Samples], ...] = (
    (
        "streameval_records_consumed",
        "counter",
        "Records read, per topic",
        ("topic",),
        lambda v: {(t,): n for t, n in v.snapshot.counters.consumed.items()},
    ),
    (
        "streameval_records_rejected",
        "counter",
        "Records rejected, per topic and reason",
        ("topic", "reason"),
        lambda v: {(t, r): n for (t, r), n in v.snapshot.counters.rejected.items()},
    ),
    (
        "streameval_records_ignored",
        "counter",
        "Events whose type is in ignore_types, per topic and type (neither used nor rejected)",
        ("topic", "type"),
        lambda v: {(t, k): n for (t, k), n in v.snapshot.counters.ignored.items()},
    ),
    (
        "streameval_records_misrouted",
        "counter",
        "Records not in the partition murmur2 of their query_id gives (the default partitioner's)",
        ("topic",),
        lambda v: {(t,): n for t, n in v.snapshot.counters.misrouted.items()},
    ),
    (
        "streameval_dead_letter_records",
        "counter",
        "Rejected records sent to the dead-letter topic (in committed checkpoints)",
        ("topic", "reason"),
        lambda v: {(t, r): n for (t, r), n in v.snapshot.counters.dead_lettered.items()},
    ),
    (
        "streameval_events_unattributed",
        "counter",
        "Events not attributed to a query, per reason",
        ("reason",),
        lambda v: {(r,): n for r, n in v.snapshot.counters.unattributed.items()},
    ),
    (
        "streameval_events_attributed",
        "counter",
        "Events attributed to a query",
        (),
        _one(lambda v: v.snapshot.counters.attributed),
    ),
    (
        "streameval_duplicates",
        "counter",
        "Duplicate records dropped (impressions, events)",
        ("kind",),
        lambda v: {(k,): n for k, n in v.snapshot.counters.duplicates.items()},
    ),
    (
        "streameval_groups_folded",
        "counter",
        "Impressions whose group was folded into __other__ (max_groups)",
        (),
        _one(lambda v: v.snapshot.counters.groups_folded),
    ),
    (
        "streameval_impressions_late",
        "counter",
        "Impressions dropped because they arrived after their settling time",
        (),
        _one(lambda v: v.snapshot.counters.late_impressions),
    ),
    (
        "streameval_open_queries",
        "gauge",
        "Queries not settled yet",
        (),
        _one(lambda v: v.snapshot.open_queries),
    ),
    (
        "streameval_orphans_held",
        "gauge",
        "Events held waiting for their impression",
        (),
        _one(lambda v: v.snapshot.orphans_held),
    ),
    (
        "streameval_watermark_timestamp_seconds",
        "gauge",
        "Event-time watermark (Unix seconds), per partition",
        ("partition",),
        _finite_watermarks,
    ),
    (
        "streameval_watermark_lag_seconds",
        "gauge",
        "Wall clock minus the watermark, per partition",
        ("partition",),
        lambda v: {p: v.wall_time - w for p, w in _finite_watermarks(v).items()},
    ),
    (
        "streameval_consumer_lag",
        "gauge",
        "Records not processed yet, per topic and partition",
        ("topic", "partition"),
        lambda v: {(t, str(p)): n for (t, p), n in v.consumer_lag.items()},
    ),
    (
        "streameval_checkpoint_age_seconds",
        "gauge",
        "Seconds since the last committed checkpoint (state, dead-letter records and offsets)",
        (),
        _one(lambda v: None if v.ops.last_checkpoint is None else v.wall_time - v.ops.last_checkpoint),
    ),
    (
        "streameval_checkpoints",
        "counter",
        "Checkpoints committed",
        (),
        _one(lambda v: v.ops.checkpoints),
    ),
    (
        "streameval_checkpoint_failures",
        "counter",
        "Checkpoints or dead-letter sends that failed (each rewinds to the last committed checkpoint)",
        (),
        _one(lambda v: v.ops.checkpoint_failures),
    ),
    (
        "streameval_checkpoint_duration_seconds",
        "gauge",
        "Duration of the last committed checkpoint",
        (),
        _one(lambda v: v.ops.checkpoint_seconds),
    ),
    (
        "streameval_checkpoint_size_bytes",
        "gauge",
        "Changelog bytes written by the last committed checkpoint",
        (),
        _one(lambda v: v.ops.checkpoint_bytes),
    ),
    (
        "streameval_changelog_written_bytes",
        "counter",
        "Changelog bytes written by committed checkpoints (divide by records consumed for bytes per record)",
        (),
        _one(lambda v: v.ops.changelog_bytes),
    ),
    (
        "streameval_restores",
        "counter",
        "Partition restores from the changelog completed",
        (),
        _one(lambda v: v.ops.restores),
    ),
    (
        "streameval_restore_records",
        "counter",
        "Changelog records read by restores",
        (),
        _one(lambda v: v.ops.restore_records),
    ),
    (
        "streameval_restore_duration_seconds",
        "gauge",
        "Duration of the last partition restore",
        (),
        _one(lambda v: v.ops.restore_seconds),
    ),
    (
        "streameval_partitions_restoring",
        "gauge",
        "Assigned partitions whose state is being restored",
        (),
        _one(lambda v: v.ops.partitions_restoring),
    ),
    (
        "streameval_ready",
        "gauge",
        "1 once partitions are assigned and their state is restored",
        (),
        _one(lambda v: 1.0 if v.ready else 0.0),
    ),
)


def _key(item: tuple[tuple[str, ...], Sums]) -> str:
    return str(item[0])


def registry(view_source: Callable[[], View]) -> CollectorRegistry:
    """A fresh registry holding only streameval's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StreamevalCollector(view_source))
    return reg
