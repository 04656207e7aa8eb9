"""setuptools' build backend, with the optional compiled build switched on here.

``STREAMEVAL_MYPYC=1 pip install .`` compiles the per-record modules with mypyc (setup.py; README,
Performance: "A compiled install"). pip builds in an isolated environment holding what the
backend asks for: mypy (which ships mypyc) is asked for only then, so a plain install needs
neither mypy nor a compiler. An editable install (``pip install -e``) is never compiled: it
runs the source tree, where compiled modules would shadow every later edit of the .py files.
"""

import os
import sys

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403  (the rest of the PEP 517/660 interface)

#: what setup.py reads: set only while this backend builds a (non-editable) wheel
BUILD_FLAG = "_STREAMEVAL_BUILD_MYPYC"


def _mypyc_wanted() -> bool:
    return os.environ.get("STREAMEVAL_MYPYC", "0") not in ("", "0")


def get_requires_for_build_wheel(config_settings=None):
    extra = ["mypy>=1.10"] if _mypyc_wanted() else []
    return build_meta.get_requires_for_build_wheel(config_settings) + extra


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if not _mypyc_wanted():
        return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
    os.environ[BUILD_FLAG] = "1"
    try:
        return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
    finally:
        del os.environ[BUILD_FLAG]


def get_requires_for_build_editable(config_settings=None):
    if _mypyc_wanted():
        print("STREAMEVAL_MYPYC is ignored by an editable install: it stays pure Python", file=sys.stderr)
    return build_meta.get_requires_for_build_editable(config_settings)
