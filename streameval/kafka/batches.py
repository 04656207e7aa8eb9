"""kafka-python's record batches read by the native core, where it is installed (README,
Performance: "The native core").

kafka-python reads the records of a batch one at a time in Python (``DefaultRecordBatch``: a
varint at a time), then makes a ``ConsumerRecord`` of each (``PartitionRecords._unpack_records``:
a dozen attribute reads and calls a record), about a fifth of the daemon's main thread on a
backlog. :func:`install` makes the fetcher take each batch's ``ConsumerRecord`` s from the
native core in one call (:func:`unpack_records`), and a batch hand anything else that iterates it
the records the native core read (:func:`records`): the same values, in the same order (a
compressed batch is decompressed by kafka-python first, as before). Anything unusual (a control
batch, a batch already partly read, a record that does not parse, bytes left over, a consumer
with deserializers) is left to kafka-python's own reading, which raises its own errors, so a
damaged batch fails exactly as it does without the native core. ``tests/test_native.py`` and
``tests/test_unpack.py`` hold the two equal on generated batches and fetches (transactional,
aborted, control, compacted and legacy batches included).

It changes two classes of kafka-python's (its batch iteration and its fetcher's unpacking), for
every consumer of the process, and only for the version it was written against: with another,
:func:`install` leaves kafka-python as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kafka
from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch

from streameval import native

#: the kafka-python versions whose ``DefaultRecordBatch`` and fetcher this reads as they do
TESTED = ("3.0.",)


def install() -> bool:
    """Read kafka-python's record batches with the native core; False (and nothing changed)
    without the core or with a kafka-python this was not written against."""
    if _read is None or not kafka.__version__.startswith(TESTED) or ConsumerRecord._fields != _FIELDS:
        return False
    DefaultRecordBatch.__iter__ = records
    unpacking = Fetcher.PartitionRecords
    if _consumer_records is not None and unpacking._unpack_records is not unpack_records:
        global _kafka_python_unpack
        _kafka_python_unpack = unpacking._unpack_records
        unpacking._unpack_records = unpack_records
    return True


def records(batch: Any) -> Iterator[Any]:
    """``DefaultRecordBatch.__iter__`` through the native core: its records in one call, or the
    batch itself (kafka-python's own reading, a record at a time) when the core leaves it."""
    read = _native(batch, _read)
    if read is None:  # damaged: kafka-python's reading raises as it does
        return batch
    return iter(read)


def unpack_records(part: Any, tp: Any, batches: Any, key_deser: Any, value_deser: Any) -> Iterator[Any]:
    """``Fetcher.PartitionRecords._unpack_records`` of kafka-python 3.0, the batch logic as it
    is there (checksums, aborted transactions, control batches, the next fetch offset), with
    the ``ConsumerRecord`` s of a batch made by the native core in one call. ``records_read`` and
    ``bytes_read`` (the fetch metrics) count a batch when it is read, not a record at a time."""
    if key_deser is not None or value_deser is not None:
        yield from _kafka_python_unpack(part, tp, batches, key_deser, value_deser)
        return
    try:
        batch = batches.next_batch()
        last_batch = None
        while batch is not None:
            last_batch = batch
            if part.check_crcs and not batch.validate_crc():
                where = f"partition {part.topic_partition} at offset {batch.base_offset}"
                raise CorruptRecordError(f"Record batch for {where} failed crc check")
            if batch.magic == 2 and _skipped(part, batch):
                part.next_fetch_offset = batch.next_offset
                batch = batches.next_batch()
                continue
            read = None
            if batch.magic == 2:
                head = (tp.topic, tp.partition, part.leader_epoch)
                read = _native(batch, _consumer_records, *head, ConsumerRecord)
            if read is None:  # a legacy or damaged batch: kafka-python's records, one at a time
                read = _consumer_record_list(part, tp, batch, ConsumerRecord)
            else:
                read, size = read
                part.records_read += len(read)
                part.bytes_read += size
            for record in read:
                part.next_fetch_offset = record[3] + 1  # its offset
                yield record
            batch = batches.next_batch()
        # message format v2 keeps a batch's last offset when compaction removed its last record
        if last_batch and last_batch.magic == 2:
            part.next_fetch_offset = last_batch.next_offset
        part.drain()
    except StopIteration:  # as kafka-python: a generator must not end a caller's iteration
        raise RuntimeError("StopIteration raised unpacking messageset") from None


def _skipped(part: Any, batch: Any) -> bool:
    """Whether a batch (message format v2) is not returned: a control batch (a transaction's
    marker), or a batch of an aborted transaction when reading committed records. Keeps the
    partition's leader epoch and aborted producers as kafka-python does."""
    part.leader_epoch = batch.leader_epoch
    if part.isolation_level == IsolationLevel.READ_COMMITTED and batch.has_producer_id():
        part._consume_aborted_transactions_up_to(batch.last_offset)
        if part._contains_abort_marker(batch):
            part.aborted_producer_ids.discard(batch.producer_id)
        elif part._is_batch_aborted(batch):
            return True
    return bool(batch.is_control_batch)


def _consumer_record_list(part: Any, tp: Any, batch: Any, make: Any) -> Iterator[Any]:
    """The records of a batch as kafka-python's fetcher makes them, one at a time."""
    for record in batch:
        if part.check_crcs and not record.validate_crc():
            where = f"partition {part.topic_partition} at offset {record.offset}"
            raise CorruptRecordError(f"Record for {where} failed crc check")
        key, value, headers = record.key, record.value, record.headers
        sizes = (len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers)
        header_size = sum(sizes) if headers else -1
        part.records_read += 1
        part.bytes_read += record.size_in_bytes
        yield make(
            tp.topic, tp.partition, part.leader_epoch, record.offset, record.timestamp, record.timestamp_type,
            key, value, headers, record.checksum,
            len(key) if key is not None else -1, len(value) if value is not None else -1, header_size,
        )  # fmt: skip


def _native(batch: Any, read: Any, *extra: Any) -> Any:
    """``read`` (one of the native core's batch readers) on a batch not yet read and not a
    control batch, which it then marks read; None when it leaves the batch to kafka-python."""
    batch._maybe_uncompress()
    if batch._next_record_index or batch.is_control_batch:
        return None
    kind = batch.timestamp_type
    got = read(
        batch._buffer,
        batch._pos,
        batch._num_records,
        batch.base_offset,
        batch.first_timestamp,
        batch.max_timestamp if kind == _LOG_APPEND_TIME else None,
        kind,
        *extra,
    )
    if got is not None:
        batch._pos = len(batch._buffer)
        batch._next_record_index = batch._num_records
    return got


_read: Any = getattr(native.core, "batch_records", None)
_consumer_records: Any = getattr(native.core, "consumer_records", None)
_kafka_python_unpack: Any = None
_LOG_APPEND_TIME = 1  # a batch's timestamp type: its records take the batch's max timestamp
#: kafka-python's ConsumerRecord, the fields ``consumer_records`` fills in this order
_FIELDS = (
    "topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type", "key", "value", "headers",
    "checksum", "serialized_key_size", "serialized_value_size", "serialized_header_size",
)  # fmt: skip
