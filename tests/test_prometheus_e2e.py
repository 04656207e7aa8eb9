"""A real Prometheus (Debian's `prometheus`) scrapes a running `streameval demo` with the
project's rules loaded: the recording rules give a MAP and a standard error for every group,
and only the worse models can be below control. (Exactness against `replay` is shown on
`streameval run`: tests/integration/test_prometheus_run.py; the demo's values move while
Prometheus evaluates, so a same-instant comparison is not possible here.)"""

from __future__ import annotations

import time

from tests.demo_process import ROOT, Demo
from tests.integration.conftest import free_port
from tests.promtool import Prometheus


def test_prometheus_scrapes_the_demo_and_evaluates_the_rules(tmp_path, demos) -> None:
    demo = Demo(tmp_path)
    demos.append(demo)
    rules = sorted(str(p) for p in (ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
    prometheus = Prometheus(tmp_path, demo.port, rules, free_port())
    try:
        # the demo's groups fill up as it runs: wait until each has a MAP and a standard error
        # of a few queries' worth (a group of one query has none, one of three a large one)
        deadline = time.monotonic() + 60
        same: list = []
        errors: list = []
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                same = prometheus.query('window_group:streameval_metric:mean{metric="map",window="1h"}')
                errors = prometheus.query('window_group:streameval_metric:stderr{metric="map",window="1h"}')
            except OSError:
                continue
            if len(same) >= 6 and len(errors) >= 6 and all(0 < float(s["value"][1]) < 0.1 for s in errors):
                break
        assert same and len(same) >= 6, prometheus.log.read_text()[-2000:]
        assert all(0.1 < float(series["value"][1]) < 1 for series in same), same
        assert len(errors) >= 6 and all(0 < float(s["value"][1]) < 0.1 for s in errors), errors
        alerts = prometheus.query('ALERTS{alertname="StreamevalVariantBelowControl"}')
        assert {s["metric"]["model"] for s in alerts} <= {"candidate-a", "candidate-b"}
    finally:
        prometheus.stop()
    assert demo.stop() == 0
