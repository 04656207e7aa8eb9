"""The optional compiled install (README, Performance: "A compiled install"), built as a user
builds it -- ``STREAMEVAL_MYPYC=1 pip install``, here into a directory of its own with the
benchmark's ``benchmarks/compiled.py`` -- loads its compiled modules, prints the same replay
report as the interpreted package, and passes the pure core's tests. Slow (~30 s: mypyc
compiles 21 modules, unless a build of the same sources is kept in ``~/.cache``); needs a C
compiler and pip's index or cache for the build's own requirements (setuptools, mypy)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import compiled as compiled_install

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: the tests of the compiled modules' work (decoding, join, scoring, sums, state, deadlines,
#: aligner, view, replay; the native core's checkpoint entries and scoring of an event on the
#: compiled QueryScore), run against the compiled install
CORE_TESTS = [
    "test_records.py",
    "test_join.py",
    "test_scoring.py",
    "test_crosscheck.py",
    "test_state.py",
    "test_native_packs.py",
    "test_native_score.py",
    "test_native_grade.py",
    "test_deadlines.py",
    "test_align.py",
    "test_exporter.py",
    "test_replay_workers.py",
    "test_reference_cases.py",
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding streameval installed compiled: a python started there imports it,
    not this checkout."""
    if not compiled_install.have_compiler():
        pytest.skip("no C compiler (cc): the compiled install needs one")
    return compiled_install.build(tmp_path_factory.mktemp("compiled") / "install")


def run(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_per_record_modules_are_compiled(compiled: Path) -> None:
    assert "compiled with mypyc" in run(compiled, "-m", "streameval", "--version")
    source = run(compiled, "-c", "import streameval.cli as c; print(c.__file__)")
    assert source.startswith(str(compiled))  # the installed package, not this checkout
    assert "pure Python" in run(ROOT, "-m", "streameval", "--version")


def test_replay_reports_the_same(compiled: Path) -> None:
    args = ["-m", "streameval", "replay", "--impressions", str(EXAMPLES / "impressions.jsonl")]
    args += ["--events", str(EXAMPLES / "clicks.jsonl"), str(EXAMPLES / "purchases.jsonl")]
    args += ["--format", "json"]
    assert run(compiled, *args) == run(ROOT, *args)


def test_the_core_tests_pass_compiled(compiled: Path) -> None:
    # a copy of the tests beside the compiled package: pytest puts their directory first on
    # sys.path, so they import it, not the source tree
    shutil.copytree(
        ROOT / "tests", compiled / "tests", ignore=shutil.ignore_patterns("integration", "__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", compiled / "pyproject.toml")
    tests = [f"tests/{name}" for name in CORE_TESTS]
    # one process (-n 0): it runs beside the integration tests' worker, which the suite's other
    # worker already shares the machine with
    out = run(compiled, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *tests)
    assert " passed" in out and " failed" not in out


def test_the_build_is_kept_and_copied_for_the_same_sources(compiled: Path, tmp_path: Path) -> None:
    kept = compiled_install.CACHE / compiled_install.source_key()
    assert kept.is_dir()  # the fixture's build, kept (or the one an earlier run kept)
    again = compiled_install.build(tmp_path / "again")
    assert "compiled with mypyc" in run(again, "-m", "streameval", "--version")
    assert not (kept / "tests").exists()  # what a test writes into its copy stays out of the kept one
