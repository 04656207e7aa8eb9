"""Prometheus' own tools and server (Debian's `prometheus` and `prometheus-alertmanager`
packages, installed by .ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest


def tool(name: str, package: str) -> str:
    """An executable from a Debian package; skips locally when it is missing, fails under CI."""
    exe = shutil.which(name)
    if exe is None:
        message = f"{name} not found: apt-get install {package} (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return exe


def promtool() -> str:
    return tool("promtool", "prometheus")


class Prometheus:
    """A real Prometheus server on a spare loopback port with its own storage, scraping one
    target every second and evaluating ``rules`` every second."""

    def __init__(self, tmp_path: Path, target_port: int, rules: list[str], port: int) -> None:
        self.port = port
        self.log = tmp_path / "prometheus.log"
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: {json.dumps(rules)}\n"
            "scrape_configs:\n  - job_name: streameval\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.proc = subprocess.Popen(
            [tool("prometheus", "prometheus"), f"--config.file={config}"]
            + [f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )

    def query(self, expr: str) -> list[dict]:
        """An instant query through the HTTP API (OSError while the server is not up yet)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def check_metrics(exposition: str) -> str:
    """`promtool check metrics` on a scrape; returns its findings ("" when there are none)."""
    out = subprocess.run(
        [promtool(), "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    findings = (out.stdout + out.stderr).strip()
    if out.returncode != 0 and not findings:
        findings = f"promtool exited with {out.returncode}"
    return findings
