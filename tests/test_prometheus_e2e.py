"""A real Prometheus (Debian's `prometheus`) scrapes a running `streameval demo` with the
project's rules loaded: the recording rules give a MAP and a standard error for every group,
and only the worse models can be below control. (Exactness against `replay` is shown on
`streameval run`: tests/integration/test_prometheus_run.py; the demo's values move while
Prometheus evaluates, so a same-instant comparison is not possible here.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.demo_process import ROOT, Demo
from tests.integration.conftest import free_port


def _prometheus() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        message = "prometheus not found: apt-get install prometheus (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return exe


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]["result"]


def test_prometheus_scrapes_the_demo_and_evaluates_the_rules(tmp_path, demos) -> None:
    demo = Demo(tmp_path)
    demos.append(demo)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    rules = sorted(str(p) for p in (ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: {json.dumps(rules)}\n"
        "scrape_configs:\n  - job_name: streameval\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{demo.port}']\n"
    )
    prometheus = subprocess.Popen(
        [_prometheus(), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}"]
        + [f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )
    try:
        deadline = time.monotonic() + 60
        same = None
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                same = _query(port, 'window_group:streameval_metric:mean{metric="map",window="1h"}')
            except OSError:
                continue
            if len(same) >= 6:
                break
        assert same and len(same) >= 6, (tmp_path / "prometheus.log").read_text()[-2000:]
        assert all(0.1 < float(series["value"][1]) < 1 for series in same), same
        errors = _query(port, "window_group:streameval_metric:stderr")
        assert errors and all(0 < float(s["value"][1]) < 0.1 for s in errors)
        alerts = _query(port, 'ALERTS{alertname="StreamevalVariantBelowControl"}')
        assert {s["metric"]["model"] for s in alerts} <= {"candidate-a", "candidate-b"}
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=20)
    assert demo.stop() == 0
