"""The event-time watermark.

watermark = (largest event timestamp processed) - ``allowed_lateness``. When input goes quiet
it advances with the wall clock, at wall-clock speed, from the moment the last record was
processed (Bytewax's event clock), so gauges keep moving in quiet periods. It never moves
backwards. The wall clock is injected: ``None`` (as in ``replay``) means pure event time.
"""

from __future__ import annotations

import math
from collections.abc import Callable


class Watermark:
    """A monotone event-time watermark with an optional wall-clock idle advance."""

    def __init__(self, allowed_lateness: float, wall_clock: Callable[[], float] | None = None):
        self.allowed_lateness = allowed_lateness
        self.wall_clock = wall_clock
        self.max_event_ts = -math.inf
        self.value = -math.inf
        self._last_record_wall: float | None = None

    def observe(self, ts: float) -> float:
        """Note one processed record's event time; returns the watermark."""
        if ts > self.max_event_ts:
            self.max_event_ts = ts
        self.value = max(self.value, self.max_event_ts - self.allowed_lateness)
        if self.wall_clock is not None:
            self._last_record_wall = self.wall_clock()
        return self.value

    def mark_active(self) -> None:
        """Count quiet time from now (as if a record had just been processed)."""
        if self.wall_clock is not None:
            self._last_record_wall = self.wall_clock()

    def idle(self) -> float:
        """Advance with the wall clock since the last record (no-op without a wall clock)."""
        if self.wall_clock is not None and self._last_record_wall is not None:
            quiet = max(0.0, self.wall_clock() - self._last_record_wall)
            self.value = max(self.value, self.max_event_ts - self.allowed_lateness + quiet)
        return self.value

    def finish(self) -> float:
        """End of input (``replay``): the watermark passes every time, so everything settles."""
        self.value = math.inf
        return self.value
