"""kafka-python's repeated warnings are kept to a line a minute."""

from __future__ import annotations

import logging
import sys

import pytest

from streameval.logsetup import Throttle, closed_socket_race


def record(msg: str, name: str = "kafka.cluster") -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)


def test_the_same_warning_passes_once_a_minute_and_says_how_many_were_held() -> None:
    now = [0.0]
    throttle = Throttle(interval=60.0, clock=lambda: now[0])
    passed = []
    for i in range(600):  # ten a second for a minute, as while a broker is away
        now[0] = i * 0.1
        r = record("No node available for metadata refresh - backoff/retry")
        if throttle.filter(r):
            passed.append(r.getMessage())
    now[0] = 60.0
    last = record("No node available for metadata refresh - backoff/retry")
    assert throttle.filter(last)
    assert len(passed) == 1 and "599 more like this" in last.getMessage()


def test_other_messages_are_not_held_back() -> None:
    throttle = Throttle(clock=lambda: 0.0)
    assert (
        throttle.filter(record("a"))
        and throttle.filter(record("b"))
        and throttle.filter(record("a", "kafka.net"))
    )


def test_messages_that_differ_only_in_numbers_are_one_template() -> None:
    # kafka-python formats this one itself, with an object address and a duration
    throttle = Throttle(clock=lambda: 0.0)
    slow = "Task <kafka.net.selector.Task object at {}> ran for {}s (>0.100s threshold)."
    assert throttle.filter(record(slow.format("0x7f39f04bd150", "0.137"), "kafka.net.selector"))
    assert not throttle.filter(record(slow.format("0x7f39ebfec790", "0.209"), "kafka.net.selector"))
    assert throttle.filter(record("Task left RUNNING after step", "kafka.net.selector"))


_FD_GONE = ValueError("Invalid file descriptor: -1")


def _closed_socket_record(name: str, exc: Exception = _FD_GONE) -> logging.LogRecord:
    try:
        raise exc
    except Exception:
        exc_info = sys.exc_info()
    message = "Unhandled exception in task %s:"
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, ("t",), exc_info)


@pytest.mark.parametrize(
    "exc",
    [
        _FD_GONE,  # the task waiting on the socket
        AttributeError("'NoneType' object has no attribute 'recv'"),  # the read after the wait
        AttributeError("'NoneType' object has no attribute 'send'"),  # a write after the wait
        AttributeError("'NoneType' object has no attribute 'data_received'"),  # the hand-over after a read
    ],
)
def test_kafka_pythons_closed_socket_traceback_becomes_one_debug_line(exc: Exception) -> None:
    record = _closed_socket_record("kafka.net.transport", exc)
    assert closed_socket_race(record)
    assert record.levelno == logging.DEBUG and record.exc_info is None
    assert "Traceback" not in logging.Formatter().format(record)
    assert "Unhandled exception in task t:" in record.getMessage()


def test_other_tracebacks_are_left_alone() -> None:
    assert not closed_socket_race(_closed_socket_record("streameval.kafka.loop"))
    other = logging.LogRecord("kafka.net.selector", logging.ERROR, __file__, 1, "x", None, None)
    assert not closed_socket_race(other)
    for exc in (AttributeError("'NoneType' object has no attribute 'items'"), ValueError("bad")):
        assert not closed_socket_race(_closed_socket_record("kafka.net.transport", exc))
