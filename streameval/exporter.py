"""A prometheus-client Collector that turns the published :class:`~streameval.view.View` into
metric families on every scrape. Register it in a registry you construct (:func:`registry`).

The families are declared in two tables: :data:`SCOPES` (the quality families: the means, sums
and counts of the settled queries of each window, of every settled query, and of the open
queries) and :data:`OPERATIONS` (the daemon's own). Their names, labels and meaning: README,
"Metric families".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from streameval import detector_families
from streameval.scoring import Sums
from streameval.scoring.measures import MEASURES
from streameval.view import View

#: the sums of a scope: (label values before the group's, group, sums), in label order
GroupSums = Callable[[View], Iterator[tuple[tuple[str, ...], tuple[str, ...], Sums]]]


class Scope(NamedTuple):
    """One set of queries whose sums are exported: their families' name prefix, counter or
    gauge, the labels before the group's, what they are (for the help), the families exported
    ("mean": one family per configured metric family; "values" and "squares": one each, with a
    ``metric`` label; the counts), and its sums."""

    prefix: str
    counter: bool
    labels: tuple[str, ...]
    what: str
    parts: tuple[str, ...]
    sums: GroupSums


def _windows(view: View) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], Sums]]:
    for window in view.settings.windows:
        for group, sums in sorted(view.snapshot.windows.get(window.name, {}).items(), key=_key):
            yield (window.name,), group, sums


def _table(read: Callable[[View], Mapping[tuple[str, ...], Sums]]) -> GroupSums:
    def sums(view: View) -> Iterator[tuple[tuple[str, ...], tuple[str, ...], Sums]]:
        for group, group_sums in sorted(read(view).items(), key=_key):
            yield (), group, group_sums

    return sums


_ALL = ("mean", "values", "squares", "queries", "queries_with_relevant", "relevant_items")
#: The quality families (README, Metric families); counters are named without ``_total``.
SCOPES = (
    Scope("streameval_", False, ("window",), "settled queries in the window", _ALL, _windows),
    Scope(
        "streameval_settled_", True, (), "every settled query", _ALL[1:], _table(lambda v: v.snapshot.settled)
    ),
    Scope(
        "streameval_provisional_",
        False,
        (),
        "open (unsettled) queries",
        ("mean", "queries", "queries_with_relevant"),
        _table(lambda v: v.snapshot.provisional),
    ),
)
_PART_HELP = {
    "values": "Sum of per-query values of {what}",
    "squares": "Sum of squared per-query values of {what}",
    "queries": "Queries counted: {what}",
    "queries_with_relevant": "Queries with |G| > 0 of {what}",
    "relevant_items": "Sum of |G| over {what} (the wmap denominator)",
}


def _quality(view: View, scope: Scope) -> Iterator[Metric]:
    """The families of one scope, from its sums."""
    s = view.settings
    family = CounterMetricFamily if scope.counter else GaugeMetricFamily
    groups = [*scope.labels, *s.group_by]
    names = dict.fromkeys(m.name for m in s.metrics) if "mean" in scope.parts else {}
    means = {
        name: family(f"{scope.prefix}{name}", f"{MEASURES[name].help}, {scope.what}", labels=["k", *groups])
        for name in names
    }
    parts = {
        part: family(
            f"{scope.prefix}{'metric_' if part in ('values', 'squares') else ''}{part}",
            _PART_HELP[part].format(what=scope.what),
            labels=(["metric", "k"] if part in ("values", "squares") else []) + groups,
        )
        for part in scope.parts
        if part != "mean"
    }
    per_metric = "values" in parts
    for extra, group, sums in scope.sums(view):
        gv = [*extra, *group]
        means_of = sums.means(s.metrics, s.no_relevant)
        for metric, mean, total, squares in zip(s.metrics, means_of, sums.sums, sums.squares, strict=True):
            k = str(metric.k)
            if mean is not None and means:
                means[metric.name].add_metric([k, *gv], mean)
            if per_metric:
                parts["values"].add_metric([metric.name, k, *gv], total)
                parts["squares"].add_metric([metric.name, k, *gv], squares)
        counts = (("queries", sums.queries), ("queries_with_relevant", sums.with_relevant))
        for part, value in (*counts, ("relevant_items", sums.relevant_items)):
            if part in parts:
                parts[part].add_metric(gv, value)
    yield from means.values()
    yield from parts.values()


class StreamevalCollector(Collector):
    """Yields fresh families from ``view_source()`` on every collect()."""

    def __init__(self, view_source: Callable[[], View]) -> None:
        self.view_source = view_source

    def collect(self) -> Iterator[Metric]:
        view = self.view_source()
        for scope in SCOPES:
            yield from _quality(view, scope)
        yield from detector_families.families(view)
        yield from self._operations(view)

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
