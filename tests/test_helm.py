"""The Helm chart (deploy/helm/streameval): helm lint, both renderings, strict validation against
Kubernetes' schemas (deploy/helm/check.sh), and what the renderings must hold."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    if shutil.which("go") is None and not os.environ.get("CI"):
        pytest.skip("no Go toolchain to build helm and kubeconform")
    out = tmp_path_factory.mktemp("rendered")
    run = subprocess.run(
        ["bash", str(CHART / "check.sh")],
        env={**os.environ, "RENDER_DIR": str(out)},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "chart OK" in run.stdout
    assert "Invalid: 0, Errors: 0, Skipped: 0" in run.stdout, run.stdout
    return {
        name: [d for d in yaml.safe_load_all((out / f"{name}.yaml").read_text()) if d]
        for name in ("default", "operator", "podmonitor")
    }


def load_settings_text(text: str):
    """The Settings the daemon reads from the rendered ConfigMap (its validation included)."""
    import tempfile

    from streameval.config import load_settings

    with tempfile.NamedTemporaryFile("w", suffix=".toml") as handle:
        handle.write(text)
        handle.flush()
        return load_settings(handle.name, {}, {})


def _one(docs: list[dict], kind: str) -> dict:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def test_the_default_rendering_is_a_statefulset_with_probes_and_a_pod_name_instance_id(rendered) -> None:
    docs = rendered["default"]
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap",
        "PodDisruptionBudget",
        "Service",
        "Service",
        "StatefulSet",
    ]
    sts = _one(docs, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    instance = env["STREAMEVAL_KAFKA_GROUP_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert instance == "metadata.name"
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # restores have time
    config = load_settings_text(_one(docs, "ConfigMap")["data"]["streameval.toml"])
    assert pod["terminationGracePeriodSeconds"] > config.shutdown_timeout
    assert config.metrics_port == container["ports"][0]["containerPort"]
    security = pod["securityContext"]
    assert (
        security["runAsNonRoot"] is True
        and isinstance(security["runAsUser"], int)
        and security["runAsUser"] > 0
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["args"][0] == "run"
    assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
    assert _one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_the_operator_rendering_carries_the_shipped_rules_unchanged(rendered) -> None:
    docs = rendered["operator"]
    kinds = sorted(d["kind"] for d in docs)
    assert "ServiceMonitor" in kinds and "PrometheusRule" in kinds
    shipped = []
    for path in sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml")):
        shipped += yaml.safe_load(path.read_text())["groups"]
    assert _one(docs, "PrometheusRule")["spec"]["groups"] == shipped
    monitor = _one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert "PodMonitor" in [d["kind"] for d in rendered["podmonitor"]]


def test_the_operator_objects_need_the_operators_api(rendered) -> None:
    tools = sorted((Path.home() / ".cache" / "streameval" / "tools").glob("helm-*/helm"))
    run = subprocess.run(
        [str(tools[-1]), "template", "s", str(CHART / "streameval"), "--set", "serviceMonitor.enabled=true"]
        + ["--set", "prometheusRule.enabled=true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "kind: ServiceMonitor" not in run.stdout and "kind: PrometheusRule" not in run.stdout


def test_a_grace_period_shorter_than_the_shutdown_timeout_does_not_render(rendered) -> None:
    [helm] = sorted((Path.home() / ".cache" / "streameval" / "tools").glob("helm-*/helm"))[-1:]
    base = [str(helm), "template", "s", str(CHART / "streameval"), "--set", "config.shutdown_timeout=1m"]
    run = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert (
        "terminationGracePeriodSeconds (40) must be longer than config.shutdown_timeout (60 s)" in run.stderr
    )
    run = subprocess.run(
        [*base, "--set", "terminationGracePeriodSeconds=75"], capture_output=True, timeout=120
    )
    assert run.returncode == 0
