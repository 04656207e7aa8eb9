"""Prometheus' own tools (Debian's `prometheus` package, installed by .ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def promtool() -> str:
    """The promtool executable; skips locally when it is missing, fails under CI."""
    exe = shutil.which("promtool")
    if exe is None:
        message = "promtool not found: apt-get install prometheus (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return exe


def check_metrics(exposition: str) -> str:
    """`promtool check metrics` on a scrape; returns its findings ("" when there are none)."""
    out = subprocess.run(
        [promtool(), "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    findings = (out.stdout + out.stderr).strip()
    if out.returncode != 0 and not findings:
        findings = f"promtool exited with {out.returncode}"
    return findings
