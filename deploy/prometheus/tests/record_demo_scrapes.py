"""Record what streameval itself exports while its simulator injects a regression, as a
promtool rule test (recorded_regression_test.yml beside this file).

It runs `streameval demo` (the simulator and the pipeline in one process, event time at 60x:
one simulated minute per wall-clock second) with `--regress candidate-a:0.4@10m`, scrapes
/metrics once a wall-clock second, and writes each scrape as one sample a minute of promtool
input -- so the test sees the same minute-by-minute series a Prometheus would have scraped
from a live daemon. The expectations: before the regression no variant is below control; at
the end its MAP is well below where it was and it is below control on both surfaces, and the
regression detectors' alert against control fires for it (not before the regression).

    python deploy/prometheus/tests/record_demo_scrapes.py     # about 100 s
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
OUT = HERE / "recorded_regression_test.yml"
SCRAPES = 90  # simulated minutes
FAMILIES = {
    "streameval_metric_values",
    "streameval_metric_squares",
    "streameval_queries",
    "streameval_queries_with_relevant",
}
#: the regression detectors' families (no window label)
DETECTOR_FAMILIES = {
    "streameval_detector_alarm",
    "streameval_detector_statistic",
    "streameval_detector_threshold",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = sample.name in FAMILIES and sample.labels.get("window") == "1h"
            if wanted or sample.name in DETECTOR_FAMILIES:
                labels = {"job": "streameval", "instance": "demo:9464", **sample.labels}
                body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                out[f"{sample.name}{{{body}}}"] = sample.value
    return out


def main() -> int:
    port = free_port()
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streameval",
            "demo",
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(port),
        ]
        + ["--seed", "7", "--regress", "candidate-a:0.4@10m"],
        stderr=subprocess.DEVNULL,
    )
    scrapes: list[dict[str, float]] = []
    try:
        time.sleep(1.5)
        started = time.monotonic()
        for i in range(SCRAPES):
            time.sleep(max(0.0, started + i - time.monotonic()))
            scrapes.append(scrape(port))
            print(f"scrape {i + 1}/{SCRAPES}", file=sys.stderr, end="\r")
    finally:
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=20)
    names = sorted(set().union(*scrapes))
    lines = [
        "# Recorded by record_demo_scrapes.py from `streameval demo --seed 7 --regress candidate-a:0.4@10m`:",
        "# one /metrics scrape a simulated minute (window 1h and detector families). Do not edit by hand.",
        "rule_files:",
        "  - ../rules/streameval.yml",
        "  - ../rules/alerts.yml",
        "evaluation_interval: 1m",
        "tests:",
        "  - name: recorded from streameval itself while candidate-a regressed at 10 simulated minutes",
        "    interval: 1m",
        "    input_series:",
    ]
    for name in names:
        values = " ".join(repr(s[name]) if name in s else "_" for s in scrapes)
        lines += [f"      - series: '{name}'", f"        values: '{values}'"]
    firing = 'ALERTS{alertname="StreamevalVariantBelowControl", alertstate="firing"'
    mean = 'window_group:streameval_metric:mean{metric="map", model="candidate-a"}'
    labels = 'job="streameval", metric="map", k="10", window="1h", model="candidate-a"'
    lines += [
        "    promql_expr_test:",
        "      # before the regression candidate-a (the best model) is not below control",
        f"      - expr: '{firing}, model=\"candidate-a\"}}'",
        "        eval_time: 9m",
        "        exp_samples: []",
        "      # at the end its 1h MAP is below 0.75 of what it was at 14 minutes, on both surfaces",
        f"      - expr: '{mean} < bool 0.75 * ({mean} offset {SCRAPES - 15}m)'",
        f"        eval_time: {SCRAPES - 1}m",
        "        exp_samples:",
        f"          - labels: '{{{labels}, surface=\"home\"}}'",
        "            value: 1",
        f"          - labels: '{{{labels}, surface=\"search\"}}'",
        "            value: 1",
        "      # and it is below control on both surfaces -- as candidate-b, the worse model, is all along",
        f"      - expr: 'count by (model, surface) ({firing}}})'",
        f"        eval_time: {SCRAPES - 1}m",
        "        exp_samples:",
    ]
    for model in ("candidate-a", "candidate-b"):
        for surface in ("home", "search"):
            lines += [
                f'          - labels: \'{{model="{model}", surface="{surface}"}}\'',
                "            value: 1",
            ]
    detector = 'ALERTS{alertname="StreamevalRegressionVsControl", alertstate="firing"'
    lines += [
        "      # the detector against control: quiet for candidate-a before the regression, then firing",
        f"      - expr: '{detector}, model=\"candidate-a\"}}'",
        "        eval_time: 9m",
        "        exp_samples: []",
        f"      - expr: 'count by (model, surface) ({detector}, model=\"candidate-a\"}})'",
        f"        eval_time: {SCRAPES - 1}m",
        "        exp_samples:",
    ]
    for surface in ("home", "search"):
        lines += [
            f'          - labels: \'{{model="candidate-a", surface="{surface}"}}\'',
            "            value: 1",
        ]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"\nwrote {OUT} ({len(names)} series x {SCRAPES} scrapes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
