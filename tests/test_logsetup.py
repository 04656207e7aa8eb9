"""kafka-python's repeated warnings are kept to a line a minute."""

from __future__ import annotations

import logging

from streameval.logsetup import Throttle


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
