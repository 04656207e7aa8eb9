"""What the native core's tests share: a module of them needs the extension (skipped without it,
failed under ``NATIVE_CORE_REQUIRED=1``, which ``.ci/run`` sets), and switches it off to compare."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from streameval import native


def require() -> None:
    """Skip the calling test module where the extension is not installed, except under
    ``NATIVE_CORE_REQUIRED=1``, where its absence fails."""
    if native.core is None:
        if os.environ.get("NATIVE_CORE_REQUIRED") == "1":
            pytest.fail("NATIVE_CORE_REQUIRED=1 but streameval_native is not installed", pytrace=False)
        pytest.skip("the native core (pip install ./native) is not installed", allow_module_level=True)


@contextlib.contextmanager
def switched(core: Any) -> Iterator[None]:
    """``native.core`` set to ``core`` (None: the pure-Python path) inside the block."""
    saved, native.core = native.core, core
    try:
        yield
    finally:
        native.core = saved
