"""Progress lines of a long replay, on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

PROGRESS_AFTER_S = 2.0


class Progress:
    """Prints a line to stderr every couple of seconds, but only once work has taken that long."""

    def __init__(self, stream: TextIO | None = None, every: float = PROGRESS_AFTER_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        #: callers look at the clock only every mask + 1 records (-1: never)
        self.mask = 4095 if every > 0 else 0
        self.start = time.monotonic()
        self.next_at = self.start + every
        self.printed = False

    @classmethod
    def silent(cls) -> Progress:
        """Progress that never prints nor looks at the clock (a worker: the main process prints)."""
        progress = cls(every=float("inf"))
        progress.mask = -1
        return progress

    def update(self, what: str, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        rate = done / max(now - self.start, 1e-9)
        of = f"/{total}" if total else ""
        self.stream.write(f"streameval replay: {what} {done}{of} records ({rate:,.0f}/s)\n")
        self.stream.flush()
        self.printed = True

    def stage(self, what: str) -> None:
        """Say what a long run does next (a run shorter than the interval says nothing)."""
        if time.monotonic() - self.start >= self.every:
            self.stream.write(f"streameval replay: {what}\n")
            self.stream.flush()
            self.printed = True
