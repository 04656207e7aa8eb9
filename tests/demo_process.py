"""`streameval demo` in a subprocess, as a user starts it (shared by the demo and Prometheus tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.integration.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


class Demo:
    def __init__(self, tmp_path: Path, *flags: str) -> None:
        self.port = free_port()
        self.log = (tmp_path / "demo.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streameval", "demo", "--metrics-host", "127.0.0.1"]
            + ["--metrics-port", str(self.port), *flags],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return response.read().decode()

    def wait(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, Path(self.log.name).read_text()
            try:
                value = predicate()
            except OSError:
                value = None
            if value:
                return value
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}: {Path(self.log.name).read_text()}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self.log.close()
        return code
