"""The optional compiled build: the per-record modules compiled with mypyc.

Everything about the package is in pyproject.toml; this file only adds the extension modules,
when the build backend (build_backend/streameval_build.py) asks for them, i.e. for::

    STREAMEVAL_MYPYC=1 pip install .    # needs a C compiler; the build fetches mypy (mypyc)

(README, Performance: "A compiled install"). Otherwise -- the default, and always for
``pip install -e .`` -- the install is pure Python and needs no compiler.
"""

import os
import sys

from setuptools import setup

#: the per-record and per-query work: decoding, scoring, sums; replay's batch join; the daemon's
#: join, pipeline, windows, deadlines, watermark, aligner, checkpoint encoding and view. The
#: rest (configuration, CLI, the Kafka clients and loop, the exporter) stays interpreted.
MYPYC_MODULES = [
    "streameval/records.py",
    "streameval/decoding.py",
    "streameval/groups.py",
    "streameval/replay/files.py",
    "streameval/replay/batch.py",
    "streameval/replay/shards.py",
    "streameval/replay/pipes.py",
    "streameval/scoring/query.py",
    "streameval/scoring/measures.py",
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


def _extensions() -> list:
    if os.environ.get("_STREAMEVAL_BUILD_MYPYC") != "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit(
            "STREAMEVAL_MYPYC=1 needs mypyc, which comes with mypy: pip asks for it unless "
            "--no-build-isolation is given; then pip install mypy first"
        )
    return mypycify(MYPYC_MODULES)


if __name__ == "__main__":
    setup(ext_modules=_extensions())
