"""Build deploy/grafana/dashboards/streameval.json with grafana-foundation-sdk.

    pip install -e ".[test]"            # includes grafana-foundation-sdk
    python deploy/grafana/build_dashboard.py

The panels read the recording rules of deploy/prometheus/rules/streameval.yml (README,
Alerting), so they show values summed over every instance of a consumer group. Edit this
file, not the JSON; a test checks that the JSON is this script's output.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import CustomVariable, Dashboard, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import TimeZoneBrowser
from grafana_foundation_sdk.models.dashboard import VariableRefresh

OUT = Path(__file__).resolve().parent / "dashboards" / "streameval.json"
GROUP = "{{model}} / {{surface}}"


def query(expr: str, legend: str) -> PrometheusQuery:
    return PrometheusQuery().expr(expr).legend_format(legend)


def panel(title: str, unit: str, *targets: PrometheusQuery, description: str = "") -> Timeseries:
    built = Timeseries().title(title).unit(unit).height(8).span(12).description(description)
    for target in targets:
        built = built.with_target(target)
    return built


def build() -> Dashboard:
    sel = 'window="$window", k="$k", model=~"$model", surface=~"$surface"'
    groups = 'window="$window", model=~"$model", surface=~"$surface"'
    mean = f'window_group:streameval_metric:mean{{metric="map", {sel}}}'
    stderr = f'window_group:streameval_metric:stderr{{metric="map", {sel}}}'
    dashboard = (
        Dashboard("streameval")
        .uid("streameval")
        .tags(["streameval", "generated"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone(TimeZoneBrowser)
        .with_variable(label_variable("model", "model"))
        .with_variable(label_variable("surface", "surface"))
        # the windows `streameval run` exports by default (config key `windows`)
        .with_variable(CustomVariable("window").label("window").values("1h,5m,24h"))
        .with_variable(label_variable("k", "k", multi=False))
        .with_row(Row("Ranking quality"))
        .with_panel(
            panel(
                "Settled MAP@$k with ±2 standard errors",
                "none",
                query(mean, GROUP),
                query(f"{mean} - 2 * {stderr}", GROUP + " -2 SE"),
                query(f"{mean} + 2 * {stderr}", GROUP + " +2 SE"),
                description="Mean over the settled queries of the window, summed over all instances; "
                "a difference of more than 2-3 combined standard errors is not noise.",
            )
        )
        .with_panel(
            panel(
                "Provisional (open queries) next to settled MAP@$k",
                "none",
                query(
                    'streameval_provisional_map{k="$k", model=~"$model", surface=~"$surface"}',
                    GROUP + " provisional ({{instance}})",
                ),
                query(mean, GROUP + " settled"),
                description="Provisional values move until the queries settle; per instance.",
            )
        )
        .with_panel(
            panel(
                "Other metrics (NDCG, recall, MRR, precision)",
                "none",
                query(f'window_group:streameval_metric:mean{{metric!="map", {sel}}}', "{{metric}} " + GROUP),
            )
        )
        .with_panel(
            panel(
                "Settled queries in the window",
                "short",
                query(f"window_group:streameval_queries:sum{{{groups}}}", GROUP),
            )
        )
        .with_panel(
            panel(
                "Share of queries with engagement",
                "percentunit",
                query(f"window_group:streameval_engaged_queries:ratio{{{groups}}}", GROUP),
            )
        )
        .with_panel(
            panel(
                "Firing alerts",
                "short",
                query(
                    "count by (alertname, model, surface) "
                    '(ALERTS{alertstate="firing", alertname=~"Streameval.*"})',
                    "{{alertname}} {{model}} {{surface}}",
                ),
            )
        )
        .with_row(Row("Pipeline"))
        .with_panel(
            panel(
                "Rejected records by reason, unattributed events by reason (per second)",
                "ops",
                query("sum by (reason) (rate(streameval_records_rejected_total[5m]))", "rejected {{reason}}"),
                query(
                    "sum by (reason) (rate(streameval_events_unattributed_total[5m]))",
                    "unattributed {{reason}}",
                ),
            )
        )
        .with_panel(
            panel(
                "Rejected and unattributed shares",
                "percentunit",
                query("job:streameval_records_rejected:ratio_rate5m", "rejected"),
                query("job:streameval_events_unattributed:ratio_rate5m", "unattributed"),
            )
        )
        .with_panel(
            panel(
                "Watermark lag and consumer lag",
                "s",
                query("max by (instance) (streameval_watermark_lag_seconds)", "watermark lag {{instance}}"),
                query("sum by (topic) (streameval_consumer_lag)", "records behind: {{topic}}"),
            )
        )
        .with_panel(
            panel(
                "Checkpoints and restores",
                "s",
                query("max by (instance) (streameval_checkpoint_age_seconds)", "checkpoint age {{instance}}"),
                query("max by (instance) (streameval_restore_duration_seconds)", "last restore {{instance}}"),
                query(
                    "sum by (instance) (streameval_partitions_restoring)", "partitions restoring {{instance}}"
                ),
            )
        )
    )
    return dashboard


def label_variable(name: str, label: str, multi: bool = True) -> QueryVariable:
    """A variable with the values of one label of the MAP recording rule."""
    variable = (
        QueryVariable(name)
        .label(name)
        .query(f"label_values(window_group:streameval_metric:mean, {label})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(multi)
    )
    return variable.include_all(True).all_value(".*") if multi else variable


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
