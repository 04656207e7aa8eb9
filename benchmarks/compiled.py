"""A compiled build of the hot modules with mypyc, for figures 1' (replay) and 2' (the daemon).

Not shipped: ``pip install`` stays pure Python and needs no compiler. This copies the package
to a scratch directory and compiles there (a C compiler and mypyc, from ``pip install -e
".[bench]"``); a process started in that directory imports the compiled modules, since an
extension module is preferred to a ``.py`` file of the same name. Everything else (config,
CLI, the Kafka clients and loop, the exporter) stays interpreted.

    python benchmarks/compiled.py DIR    # builds into DIR/streameval; prints DIR
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the per-record and per-query work: decoding, scoring, sums; replay's batch join; the daemon's
#: join, pipeline, windows, deadlines, watermark, aligner, checkpoint encoding and view
MODULES = [
    "streameval/records.py",
    "streameval/replay.py",
    "streameval/scoring/query.py",
    "streameval/scoring/sums.py",
    "streameval/scoring/ap.py",
    "streameval/scoring/ndcg.py",
    "streameval/scoring/rates.py",
    "streameval/join.py",
    "streameval/pipeline.py",
    "streameval/windows.py",
    "streameval/deadlines.py",
    "streameval/clock.py",
    "streameval/state.py",
    "streameval/kafka/align.py",
    "streameval/view.py",
]


def build(where: Path, log: object = None) -> Path:
    """Compile a copy of the package under ``where``; returns the directory to run from.
    Raises RuntimeError naming what is missing when it cannot be built."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        raise RuntimeError("no C compiler (cc) on PATH")
    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise RuntimeError('mypyc missing: pip install -e ".[bench]"') from None
    where.mkdir(parents=True, exist_ok=True)
    package = where / "streameval"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(ROOT / "streameval", package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")  # mypy's settings
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *MODULES],
        cwd=where,
        stdout=log if log is not None else subprocess.DEVNULL,  # type: ignore[arg-type]
        stderr=log if log is not None else subprocess.DEVNULL,  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        raise RuntimeError(f"mypyc exited with {done.returncode} (see the log)")
    return where


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.stderr))
