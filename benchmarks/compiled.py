"""The compiled install (README, Performance: "A compiled install") in a directory of its own,
for figures 1' (replay) and 2' (the daemon).

Built as a user builds it, ``STREAMEVAL_MYPYC=1 pip install``, but with ``--target DIR``: a
process started in DIR imports that package (the modules setup.py lists compiled by mypyc, the
rest interpreted), not this checkout's. Needs a C compiler; pip fetches mypy for the build.

    python benchmarks/compiled.py DIR    # builds into DIR; prints DIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def have_compiler() -> bool:
    """A C compiler on PATH, which mypyc's build needs."""
    return shutil.which("cc") is not None or shutil.which("gcc") is not None


def build(where: Path, log: object = None) -> Path:
    """Install streameval compiled into ``where``; returns the directory to run from.
    Raises RuntimeError naming what is missing when it cannot be built."""
    if not have_compiler():
        raise RuntimeError("no C compiler (cc) on PATH")
    if where.exists():
        shutil.rmtree(where)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run(
        [*cmd, "--target", str(where), str(ROOT)],
        env={**os.environ, "STREAMEVAL_MYPYC": "1"},
        stdout=subprocess.PIPE if log is None else log,  # type: ignore[arg-type]
        stderr=subprocess.STDOUT if log is None else log,  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        # without a log, the end of pip's output (mypy's errors, when mypyc rejects the code)
        said = done.stdout.decode(errors="replace").strip()[-3000:] if done.stdout else "see the log"
        raise RuntimeError(f"STREAMEVAL_MYPYC=1 pip install exited with {done.returncode}: {said}")
    version = subprocess.run(
        [sys.executable, "-m", "streameval", "--version"], cwd=where, capture_output=True, text=True
    ).stdout
    if "compiled" not in version:
        raise RuntimeError(f"the build in {where} runs interpreted: {version.strip()}")
    return where


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.stderr))
