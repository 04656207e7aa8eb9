"""The one logging set-up, and a filter that keeps a client library's repeated complaints short.

While a broker is away, kafka-python logs the same warning (e.g. "No node available for
metadata refresh") every ~100 ms; under load its network thread warns that a task "ran for
0.1xx s" every few seconds (it waited for the interpreter lock while a batch was processed).
:class:`Throttle` lets the first record of each message template through, then at most one a
minute, and says how many it held back.

kafka-python 3.0's network loop also logs, with a traceback, a task that was waiting to read a
socket the client closed under it, on shutdown or when a connection is dropped: either
``ValueError: Invalid file descriptor: -1`` (the wait), ``AttributeError: 'NoneType' object
has no attribute 'recv'`` or ``'send'`` (the read or write after the wait; the transport had set
its socket to None) or ``... attribute 'data_received'`` (the hand-over after a read; it had set
its protocol to None).
:func:`closed_socket_race` keeps that to one line at DEBUG.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable

#: At most one record of the same template and logger per this many seconds.
THROTTLE_INTERVAL_S = 60.0
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")
_CLOSED_UNDER_IT = {
    ValueError: re.compile(r"file descriptor: -1"),
    AttributeError: re.compile(r"'NoneType' object has no attribute '(?:recv|send|data_received)'"),
}


class Throttle(logging.Filter):
    """Passes the first record of each (logger, message template), then one per interval, with
    the number held back appended to its message."""

    def __init__(self, interval: float = THROTTLE_INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval = interval
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # Some messages come formatted already (kafka-python's "Task <... at 0x7f..> ran for
        # 0.137s"): numbers and addresses are not part of the template.
        key = (record.name, _NUMBERS.sub("#", str(record.msg)))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {self.interval:.0f} s)"
        return True


def closed_socket_race(record: logging.LogRecord) -> bool:
    """Whether the record is kafka-python's traceback of a task reading a socket already closed;
    if so, the traceback is dropped and the record demoted to DEBUG."""
    if not record.name.startswith("kafka.net") or not record.exc_info:
        return False
    exc = record.exc_info[1]
    closed = _CLOSED_UNDER_IT.get(type(exc))
    if closed is None or not closed.search(str(exc)):
        return False
    record.msg = f"{record.getMessage()} a socket closed under it (harmless: the client closed it)"
    record.args = None
    record.exc_info = record.exc_text = None
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    return True


def _kafka_filter(throttle: Throttle, verbose: bool) -> Callable[[logging.LogRecord], bool]:
    def keep(record: logging.LogRecord) -> bool:
        if not record.name.startswith("kafka"):
            return True
        if closed_socket_race(record):
            return verbose
        return throttle.filter(record)

    return keep


def configure(verbose: bool) -> None:
    """Log to stderr; kafka-python only from WARNING, and throttled."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    throttle = Throttle()
    for handler in logging.getLogger().handlers:
        handler.addFilter(_kafka_filter(throttle, verbose))
    # kafka-python is chatty at INFO and may echo client settings at DEBUG; keep it to warnings
    logging.getLogger("kafka").setLevel(logging.WARNING)
