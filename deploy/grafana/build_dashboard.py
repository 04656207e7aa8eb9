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

from grafana_foundation_sdk.builders.common import VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import CustomVariable, Dashboard, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, TimeZoneBrowser
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue, VariableRefresh

OUT = Path(__file__).resolve().parent / "dashboards" / "streameval.json"
GROUP = "{{model}} / {{surface}}"


def query(expr: str, legend: str) -> PrometheusQuery:
    return PrometheusQuery().expr(expr).legend_format(legend)


def panel(
    title: str, unit: str, *targets: PrometheusQuery, description: str = "", axis: str = ""
) -> Timeseries:
    """A time series panel with its legend below and, where given, an axis title."""
    built = (
        Timeseries()
        .title(title)
        .unit(unit)
        .height(8)
        .span(12)
        .description(description)
        .axis_label(axis)
        .legend(
            VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.LIST)
            .placement(LegendPlacement.BOTTOM)
        )
    )
    for target in targets:
        built = built.with_target(target)
    return built


def dashed(built: Timeseries, regexp: str) -> Timeseries:
    """Draw the series whose name matches ``regexp`` dashed and thin (bands, provisional values)."""
    style = {"fill": "dash", "dash": [10, 10]}
    return built.override_by_regexp(
        regexp,
        [DynamicConfigValue("custom.lineStyle", style), DynamicConfigValue("custom.lineWidth", 1)],
    )


def mean_axis(built: Timeseries) -> Timeseries:
    """A mean of per-query values in [0, 1] (MAP, NDCG, recall, MRR, precision): the axis is too."""
    return built.min(0).max(1).decimals(3)


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
            dashed(
                mean_axis(
                    panel(
                        "Settled MAP@$k with ±2 standard errors",
                        "none",
                        query(mean, GROUP),
                        query(f"{mean} - 2 * {stderr}", GROUP + " -2 SE"),
                        query(f"{mean} + 2 * {stderr}", GROUP + " +2 SE"),
                        description="Mean over the settled queries of the window, summed over all "
                        "instances (solid), and ±2 standard errors (dashed); a difference of more than "
                        "2-3 combined standard errors is not noise.",
                        axis="MAP@$k",
                    )
                ),
                " [-+]2 SE$",
            )
        )
        .with_panel(
            dashed(
                panel(
                    "Difference from control, MAP@$k, with ±2 standard errors",
                    "none",
                    query(f'window_group:streameval_metric_vs_control:diff{{metric="map", {sel}}}', GROUP),
                    query(
                        f'window_group:streameval_metric_vs_control:diff{{metric="map", {sel}}}'
                        f' - 2 * window_group:streameval_metric_vs_control:stderr{{metric="map", {sel}}}',
                        GROUP + " -2 SE",
                    ),
                    query(
                        f'window_group:streameval_metric_vs_control:diff{{metric="map", {sel}}}'
                        f' + 2 * window_group:streameval_metric_vs_control:stderr{{metric="map", {sel}}}',
                        GROUP + " +2 SE",
                    ),
                    description="Each model's settled MAP minus the control model's on the same surface "
                    "(streameval:control_model:info), with ±2 standard errors of the difference "
                    "(dashed). Below zero with the whole band: worse than control beyond noise; "
                    "StreamevalVariantBelowControl also needs 5% of control's MAP.",
                    axis="MAP@$k minus control",
                ).axis_centered_zero(True),
                " [-+]2 SE$",
            )
        )
        .with_panel(
            panel(
                "Regression detectors: statistic over threshold (1 = alarm)",
                "none",
                query(
                    'group:streameval_detector_statistic:ratio{model=~"$model", surface=~"$surface"}',
                    "{{model}}, {{surface}} vs {{versus}}",
                ),
                description="Per group, each sequential detector's CUSUM statistic C over its threshold "
                "h (README, Regression detectors): 0 quiet, between 0 and 1 watching (some evidence of "
                "a drop of at least detect_min_effect), 1 alarm (StreamevalRegressionVsControl / "
                "VsReference page). It returns to 0 once the evidence is gone.",
                axis="C / h",
            )
            .min(0)
            .max(1)
            .decimals(2)
        )
        .with_panel(
            dashed(
                mean_axis(
                    panel(
                        "Provisional (open queries, dashed) next to settled MAP@$k",
                        "none",
                        query(
                            'streameval_provisional_map{k="$k", model=~"$model", surface=~"$surface"}',
                            GROUP + " provisional ({{instance}})",
                        ),
                        query(mean, GROUP + " settled"),
                        description="Provisional values (dashed) move until the queries settle; per "
                        "instance. Settled values are solid.",
                        axis="MAP@$k",
                    )
                ),
                " provisional ",
            )
        )
        .with_panel(
            mean_axis(
                panel(
                    "Other metrics (NDCG, recall, MRR, precision)",
                    "none",
                    query(
                        f'window_group:streameval_metric:mean{{metric!="map", {sel}}}', "{{metric}} " + GROUP
                    ),
                    axis="mean over queries",
                )
            )
        )
        .with_panel(
            panel(
                "Settled queries in the window",
                "short",
                query(f"window_group:streameval_queries:sum{{{groups}}}", GROUP),
                axis="queries",
            ).min(0)
        )
        .with_panel(
            panel(
                "Share of queries with engagement",
                "percentunit",
                query(f"window_group:streameval_engaged_queries:ratio{{{groups}}}", GROUP),
                axis="share of queries",
            )
            .min(0)
            .max(1)
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
