"""kafka-python's record batches read by the native core, where it is installed (README,
Performance: "The native core").

kafka-python reads the records of a batch one at a time in Python (``DefaultRecordBatch``: a
varint at a time), about a fifth of the daemon's main thread on a backlog. :func:`install` makes
a batch hand its fetcher the records the native core read in one call, as objects with the
attributes the fetcher reads (offset, timestamp, key, value, headers, ...): the same values, in
the same order (a compressed batch is decompressed by kafka-python first, as before). Anything
unusual (a control batch, a batch already partly read, a record that does not parse, bytes left
over) is left to kafka-python's own reading, which raises its own errors, so a damaged batch
fails exactly as it does without the native core. ``tests/test_native.py`` holds the two equal
on generated batches.

It changes a class of kafka-python's (its batch iteration), for every consumer of the process,
and only for the version it was written against: with another, :func:`install` leaves
kafka-python as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streameval import native

#: the kafka-python versions whose ``DefaultRecordBatch`` this reads as they do
TESTED = ("3.0.",)


def install() -> bool:
    """Read kafka-python's record batches with the native core; False (and nothing changed)
    without the core or with a kafka-python this was not written against."""
    import kafka
    from kafka.record.default_records import DefaultRecordBatch

    if _read is None or not kafka.__version__.startswith(TESTED):
        return False
    DefaultRecordBatch.__iter__ = records
    return True


def records(batch: Any) -> Iterator[Any]:
    """``DefaultRecordBatch.__iter__`` through the native core: its records in one call, or the
    batch itself (kafka-python's own reading, a record at a time) when the core leaves it."""
    batch._maybe_uncompress()
    if batch._next_record_index or batch.is_control_batch:
        return batch
    kind = batch.timestamp_type
    read = _read(
        batch._buffer,
        batch._pos,
        batch._num_records,
        batch.base_offset,
        batch.first_timestamp,
        batch.max_timestamp if kind == _LOG_APPEND_TIME else None,
        kind,
    )
    if read is None:  # damaged: kafka-python's reading raises as it does
        return batch
    batch._pos = len(batch._buffer)
    batch._next_record_index = batch._num_records
    return iter(read)


_read: Any = getattr(native.core, "batch_records", None)
_LOG_APPEND_TIME = 1  # a batch's timestamp type: its records take the batch's max timestamp
