"""The optional compiled install (README, Performance: "A compiled install"), built as a user
builds it -- ``STREAMEVAL_MYPYC=1 pip install .`` into a fresh environment -- loads its compiled
modules, prints the same replay report as the interpreted package, and passes the pure core's
tests. Slow (~1 min: mypyc compiles 15 modules); needs a C compiler and pip's index or cache
for the build's own requirements (setuptools, mypy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: the tests of the compiled modules' work (decoding, join, scoring, sums, state, deadlines,
#: aligner, view, replay), run against the compiled install
CORE_TESTS = [
    "test_records.py",
    "test_join.py",
    "test_scoring.py",
    "test_crosscheck.py",
    "test_state.py",
    "test_deadlines.py",
    "test_align.py",
    "test_exporter.py",
    "test_replay_workers.py",
    "test_reference_cases.py",
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment (seeing this one's packages) with streameval installed compiled;
    returns its python."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc): the compiled install needs one")
    where = tmp_path_factory.mktemp("compiled")
    venv.create(where / "env", system_site_packages=True, with_pip=True)
    python = where / "env" / "bin" / "python"
    env = {**os.environ, "STREAMEVAL_MYPYC": "1"}
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run([*cmd, str(ROOT)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def run_in(python: Path, cwd: Path, *args: str) -> str:
    """Run with the compiled environment's python, away from the source tree (whose .py files
    would otherwise be imported first)."""
    done = subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_per_record_modules_are_compiled(compiled: Path, tmp_path: Path) -> None:
    out = run_in(compiled, tmp_path, "-m", "streameval", "--version")
    assert "compiled with mypyc" in out
    source = run_in(compiled, tmp_path, "-c", "import streameval.cli as c; print(c.__file__)")
    assert not source.startswith(str(ROOT))  # the installed package, not this checkout
    assert (
        "pure Python"
        in subprocess.run(
            [sys.executable, "-m", "streameval", "--version"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def test_replay_reports_the_same(compiled: Path, tmp_path: Path) -> None:
    args = ["replay", "--impressions", str(EXAMPLES / "impressions.jsonl"), "--events"]
    args += [str(EXAMPLES / "clicks.jsonl"), str(EXAMPLES / "purchases.jsonl"), "--format", "json"]
    interpreted = subprocess.run(
        [sys.executable, "-m", "streameval", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert run_in(compiled, tmp_path, "-m", "streameval", *args) == interpreted


def test_the_core_tests_pass_compiled(compiled: Path, tmp_path: Path) -> None:
    # a copy of the tests, so that pytest puts the copy's directory first on sys.path, not the
    # source tree
    shutil.copytree(
        ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("integration", "__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    tests = [f"tests/{name}" for name in CORE_TESTS]
    out = run_in(compiled, tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert " passed" in out and " failed" not in out
