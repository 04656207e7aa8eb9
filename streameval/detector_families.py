"""The regression detectors' metric families (README, Metric families and Regression
detectors): exported by the instance that holds them (the owner of partition 0 in the daemon),
one series per detector, labelled ``versus`` (``control`` or ``reference``), ``reference`` (what
it is compared with: the control's labels, or how far back) and the group's labels."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streameval.detect import control_lookup
from streameval.validate import format_duration
from streameval.view import View

FAMILIES = (
    ("streameval_detector_statistic", "CUSUM statistic C of a regression detector (0: quiet)"),
    ("streameval_detector_threshold", "Threshold h of a regression detector: it alarms when C reaches h"),
    ("streameval_detector_alarm", "1 while a regression detector is alarmed, else 0"),
    ("streameval_detector_difference", "Last minute's difference of the group's mean from the comparison"),
    ("streameval_detector_difference_stderr", "Standard error of streameval_detector_difference"),
)


def families(view: View) -> Iterator[Metric]:
    s = view.settings
    labels = ["versus", "reference", *s.group_by]
    gauges = {name: GaugeMetricFamily(name, text, labels=labels) for name, text in FAMILIES}
    alarms = CounterMetricFamily(
        "streameval_detector_alarms", "Alarms a regression detector raised", labels=labels
    )
    control_of = control_lookup(s.group_by, s.control)
    back = f"{format_duration(s.detect_reference)} earlier"
    for row in view.snapshot.detectors:
        if row.versus == "control":
            control = control_of(row.group) or ()
            reference = ",".join(
                f"{k}={v}" for k, v in zip(s.group_by, control, strict=False) if k in s.control
            )
        else:
            reference = back
        values = [row.versus, reference, *row.group]
        gauges["streameval_detector_statistic"].add_metric(values, row.statistic)
        gauges["streameval_detector_threshold"].add_metric(values, row.threshold)
        gauges["streameval_detector_alarm"].add_metric(values, 1.0 if row.state == "alarm" else 0.0)
        if row.difference is not None and row.stderr is not None:
            gauges["streameval_detector_difference"].add_metric(values, row.difference)
            gauges["streameval_detector_difference_stderr"].add_metric(values, row.stderr)
        alarms.add_metric(values, row.alarms)
    yield from gauges.values()
    yield alarms
