"""The compiled install (README, Performance: "A compiled install") in a directory of its own,
for figures 1' (replay) and 2' (the daemon).

Built as a user builds it, ``STREAMEVAL_MYPYC=1 pip install``, but with ``--target DIR``: a
process started in DIR imports that package (the modules setup.py lists compiled by mypyc, the
rest interpreted), not this checkout's. Needs a C compiler; pip fetches mypy for the build.

A build is kept under ``~/.cache/streameval/compiled``, named by a hash of what it is built from
(the package's and the build's files, the Python version): a later build of the same sources
(the benchmark after ``tests/test_compiled.py`` in CI, or a rerun) copies it instead of
compiling again. Delete the directory to build afresh.

    python benchmarks/compiled.py DIR    # builds into DIR (or copies the kept build); prints DIR
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path.home() / ".cache" / "streameval" / "compiled"
#: what a build is made from: a change to any of these builds anew
SOURCES = ("streameval", "build_backend", "setup.py", "pyproject.toml")
KEEP = 3  # builds kept


def have_compiler() -> bool:
    """A C compiler on PATH, which mypyc's build needs."""
    return shutil.which("cc") is not None or shutil.which("gcc") is not None


def source_key() -> str:
    """A hash of the files a build is made from and of the Python that runs it."""
    digest = hashlib.sha256(f"{sys.version}\0{sys.platform}".encode())
    for name in SOURCES:
        top = ROOT / name
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def build(where: Path, log: object = None, cache: Path | None = CACHE) -> Path:
    """Install streameval compiled into ``where`` (a copy of the kept build of these sources
    when ``cache`` holds one); returns the directory to run from. Raises RuntimeError naming
    what is missing when it cannot be built."""
    if where.exists():
        shutil.rmtree(where)
    try:
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = None  # nowhere to keep it: built where asked, as without a cache
    if cache is None:
        return _build(where, log)
    kept = cache / source_key()
    # one build at a time (pip builds in the source tree, whose build/ two builds would share):
    # a process that waited here finds the other's build kept
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.is_dir():
            scratch = Path(tempfile.mkdtemp(prefix="building-", dir=cache))
            try:
                _build(scratch / "install", log).rename(kept)  # in one step: never half a build
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            _prune(cache, kept)
    shutil.copytree(kept, where, symlinks=True)
    return where


def _prune(cache: Path, kept: Path) -> None:
    """Keeps the newest KEEP builds (a few MB each): those of the sources worked on lately."""
    builds = [p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("building-")]
    builds.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[KEEP:]:
        if old != kept:
            shutil.rmtree(old, ignore_errors=True)


def _build(where: Path, log: object) -> Path:
    if not have_compiler():
        raise RuntimeError("no C compiler (cc) on PATH")
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
