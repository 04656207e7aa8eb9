"""The dead-letter copy of a rejected record always fits, and says what was cut."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from streameval.kafka.deadletter import dead_letter_record


def kafka_size(key, value, headers) -> int:
    """What kafka-python's producer counts for one record in a batch (its own estimate)."""
    return DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)


def test_a_record_that_fits_is_copied_unchanged_with_its_origin() -> None:
    key, value, headers = dead_letter_record(
        b"q1", b"{oops", "not_json", "not JSON: x", "imps", 2, 17, 1_000_000
    )
    assert (key, value) == (b"q1", b"{oops")
    assert dict(headers) == {
        "reason": b"not_json",
        "detail": b"not JSON: x",
        "topic": b"imps",
        "partition": b"2",
        "offset": b"17",
    }


@pytest.mark.parametrize("limit", [300, 1024, 1_048_576])
@pytest.mark.parametrize("size", [1_000, 1_048_450, 5_000_000])
def test_a_record_too_large_is_cut_to_fit_and_says_so(limit: int, size: int) -> None:
    raw = b"x" * size
    key, value, headers = dead_letter_record(b"k" * 40, raw, "not_json", "d" * 2000, "imps", 0, 5, limit)
    assert kafka_size(key, value, headers) <= limit
    if size + 40 > limit:
        assert b"value %d bytes" % size in dict(headers)["truncated"]
        assert raw.startswith(value or b"")
    assert dict(headers)["offset"] == b"5"


def test_no_key_and_no_value_becomes_an_empty_value_with_a_header() -> None:
    key, value, headers = dead_letter_record(None, None, "not_json", "empty", "imps", 0, 9, 1_000_000)
    assert key is None and value == b"" and dict(headers)["null_value"] == b"true"
