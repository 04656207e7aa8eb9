"""The stop flag that SIGTERM and SIGINT set for a loop (``run`` and ``demo``)."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


class Stop:
    """Set by signal handlers, read by the loop."""

    def __init__(self) -> None:
        self.requested = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            log.warning("second SIGINT: exiting now")
            os._exit(130)
        self.requested = True
        log.info("%s received: finishing", signal.Signals(signum).name)


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    """A Stop that SIGTERM and SIGINT set while the block runs; the previous handlers after."""
    stop = Stop()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
