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

from grafana_foundation_sdk.builders.dashboard import CustomVariable, Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import TimeZoneBrowser

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
    window = 'window="$window"'
    return (
        Dashboard("streameval")
        .uid("streameval")
        .tags(["streameval", "generated"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone(TimeZoneBrowser)
        # the windows `streameval run` exports by default (config key `windows`)
        .with_variable(CustomVariable("window").label("window").values("1h,5m,24h"))
        .with_row(Row("Ranking quality"))
        .with_panel(
            panel(
                "Settled MAP@k per model and surface",
                "none",
                query(f'window_group:streameval_metric:mean{{metric="map",{window}}}', GROUP),
                description="Mean over the settled queries of the window, summed over all instances.",
            )
        )
        .with_panel(
            panel(
                "Standard error of MAP@k",
                "none",
                query(f'window_group:streameval_metric:stderr{{metric="map",{window}}}', GROUP),
                description="A difference of more than 2-3 combined standard errors is not noise.",
            )
        )
        .with_panel(
            panel(
                "Settled queries in the window",
                "short",
                query(f"window_group:streameval_queries:sum{{{window}}}", GROUP),
            )
        )
        .with_panel(
            panel(
                "Share of queries with engagement",
                "percentunit",
                query(f"window_group:streameval_engaged_queries:ratio{{{window}}}", GROUP),
            )
        )
        .with_row(Row("Pipeline"))
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
    )


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
