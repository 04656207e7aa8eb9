"""The deploy files: docker-compose.yml is valid and everything it references exists; the
Prometheus config passes promtool. (No container engine here: the stack itself is not run.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.promtool import promtool, tool

ROOT = Path(__file__).resolve().parents[1]


def test_compose_file_is_valid() -> None:
    out = subprocess.run(
        [tool("docker-compose", "docker-compose"), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def test_everything_compose_and_the_dockerfile_reference_exists() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    paths = re.findall(r"(\./[\w./-]+)", compose)
    assert "./deploy/prometheus" in paths and "./deploy/grafana/dashboards" in paths
    for path in paths:
        assert (ROOT / path).exists(), path
    assert "build: ." in compose and (ROOT / "Dockerfile").is_file()
    dockerfile = (ROOT / "Dockerfile").read_text()
    # a base pinned to a patch version, a numeric user, `run` by default, a health check
    assert re.search(r"^FROM python:3\.1[1-9]\.[0-9]+-slim-\w+$", dockerfile, flags=re.M)
    assert re.search(r"^USER [0-9]+:[0-9]+$", dockerfile, flags=re.M)
    assert re.search(r'^CMD \["run"\]$', dockerfile, flags=re.M)
    assert "HEALTHCHECK" in dockerfile and "-c constraints.txt" in dockerfile
    assert "'.[confluent]'" in dockerfile  # kafka_client = "confluent-kafka" works in the image
    for line in re.findall(r"^COPY (.+) \S+$", dockerfile, flags=re.M):
        for source in line.split():
            assert (ROOT / source).exists(), source
    for dashboard in (ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"):
        assert json.loads(dashboard.read_text())["panels"]


def test_prometheus_config_passes_promtool() -> None:
    out = subprocess.run(
        [promtool(), "check", "config", "deploy/prometheus/prometheus.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_prometheus_rules_pass_check_and_their_unit_tests() -> None:
    rules = sorted(str(p) for p in (ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
    assert rules
    out = subprocess.run([promtool(), "check", "rules", *rules], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    tests = sorted(p.name for p in (ROOT / "deploy" / "prometheus" / "tests").glob("*.yml"))
    out = subprocess.run(
        [promtool(), "test", "rules", *tests],
        cwd=ROOT / "deploy" / "prometheus" / "tests",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_alertmanager_config_passes_amtool() -> None:
    exe = tool("amtool", "prometheus-alertmanager")
    out = subprocess.run(
        [exe, "check-config", "deploy/alertmanager/alertmanager.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_grafana_dashboard_is_the_builders_output() -> None:
    """The committed JSON is what deploy/grafana/build_dashboard.py (grafana-foundation-sdk) makes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_dashboard", ROOT / "deploy" / "grafana" / "build_dashboard.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = (ROOT / "deploy" / "grafana" / "dashboards" / "streameval.json").read_text()
    assert module.render() == committed, "run python deploy/grafana/build_dashboard.py"
    dashboard = json.loads(committed)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = (ROOT / "deploy" / "prometheus" / "rules" / "streameval.yml").read_text()
    for name in re.findall(r"[a-z_]+:[a-z_]+:[a-z_0-9]+", " ".join(exprs)):
        assert f"record: {name}" in rules, name
