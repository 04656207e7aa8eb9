"""kafka-python's fetcher with the native core's ``ConsumerRecord`` s (``batches.unpack_records``)
against its own ``PartitionRecords._unpack_records``, on generated fetches: data, transactional,
aborted and control batches, compacted batches, compressed, log-append-time and legacy
(message format v1) batches, damaged ones, a fetch offset inside a batch, both isolation levels,
read in polls of any size. No broker.

Skipped without the native core, except under ``NATIVE_CORE_REQUIRED=1`` (set by ``.ci/run``).
"""

from __future__ import annotations

import os
import struct
from collections import namedtuple

import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

from streameval.kafka import batches

if not batches.install():
    if os.environ.get("NATIVE_CORE_REQUIRED") == "1":
        pytest.fail("NATIVE_CORE_REQUIRED=1 but the fetcher does not read through the core", pytrace=False)
    pytest.skip("the native core (pip install ./native) is not installed", allow_module_level=True)

TP = TopicPartition("queries.impressions", 3)
Aborted = namedtuple("Aborted", "producer_id first_offset")  # a fetch response's aborted transaction


def _kafka_python_unpack():
    current = Fetcher.PartitionRecords._unpack_records
    return batches._kafka_python_unpack if current is batches.unpack_records else current


class _KafkaPython(Fetcher.PartitionRecords):
    """kafka-python's own: its unpacking, its batches read a record at a time."""


_KafkaPython._unpack_records = _kafka_python_unpack()  # type: ignore[method-assign]


def _own_iter(batch):  # DefaultRecordBatch.__iter__ of kafka-python 3.0
    batch._maybe_uncompress()
    return batch


_record = st.tuples(
    st.integers(0, 2**41),  # timestamp
    st.none() | st.binary(max_size=12),
    st.none() | st.binary(max_size=30),
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=5)), max_size=2),
    st.booleans(),  # kept by compaction
)
_batch = st.tuples(
    st.sampled_from(["data", "txn", "commit", "abort", "legacy"]),
    st.sampled_from([7, 8]),  # producer id
    st.lists(_record, min_size=1, max_size=12),
    st.sampled_from([0, 1]),  # no compression, gzip
    st.booleans(),  # log append time
    st.integers(0, 5),  # leader epoch
)


_ABORT_THEN_COMMIT = ("txn", "data", "abort", "txn", "commit", "txn")


def _build(specs) -> tuple[bytes, list, int]:
    """A fetch's records from batch specs, the aborted transactions a broker would send with
    them, and the offset after the last batch."""
    out, aborted, offset, open_txn = bytearray(), [], 0, {}
    for kind, pid, records, compression, append_time, epoch in specs:
        if kind == "legacy":
            legacy = MemoryRecordsBuilder(
                magic=1, compression_type=compression, batch_size=1 << 20, offset=offset
            )
            for ts, key, value, _, _ in records:
                legacy.append(ts, key, value, [])
            legacy.close()
            out += legacy.buffer()
            offset += len(records)
            continue
        control = kind in ("commit", "abort")
        transactional = kind != "data"
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0 if control else compression,
            is_transactional=transactional,
            producer_id=pid if transactional else -1,
            producer_epoch=0 if transactional else -1,
            base_sequence=0 if transactional else -1,
            batch_size=1 << 20,
        )
        if control:
            marker = struct.pack(">hh", 0, 0 if kind == "abort" else 1)
            builder.append(0, timestamp=records[0][0], key=marker, value=struct.pack(">hi", 0, 1), headers=[])
            if kind == "abort" and pid in open_txn:
                aborted.append(Aborted(pid, open_txn[pid]))
            open_txn.pop(pid, None)
            span = 1
        else:
            kept = [(i, r) for i, r in enumerate(records) if r[4]] or [(0, records[0])]
            for i, (ts, key, value, headers, _) in kept:
                builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
            if kind == "txn":
                open_txn.setdefault(pid, offset)
            span = len(records)  # the last offset stays when compaction removed the last record
        buffer = builder.build()
        header = list(DefaultRecordBatch.HEADER_STRUCT.unpack_from(buffer))
        header[0], header[2], header[6] = offset, epoch, span - 1
        if append_time:
            header[5] |= DefaultRecordBatch.TIMESTAMP_TYPE_MASK
        if control:
            header[5] |= DefaultRecordBatch.CONTROL_MASK
        DefaultRecordBatch.HEADER_STRUCT.pack_into(buffer, 0, *header)
        struct.pack_into(
            ">I",
            buffer,
            DefaultRecordBatch.CRC_OFFSET,
            calc_crc32c(buffer[DefaultRecordBatch.ATTRIBUTES_OFFSET :]),
        )
        out += buffer
        offset += span
    return bytes(out), aborted, offset


def _read(kind, data: bytes, fetch_offset, committed, aborted, check_crcs, polls) -> list:
    """Every poll's records, the partition's next fetch offset and leader epoch after it, the
    error that ended the reading, and the fetch metrics at the end."""
    part = kind(
        fetch_offset,
        TP,
        MemoryRecords(data),
        check_crcs=check_crcs,
        isolation_level=IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED,
        aborted_transactions=aborted,
    )
    out: list = []
    for i in range(10_000):
        try:
            records = part.take(polls[i % len(polls)])
        except Exception as exc:  # noqa: BLE001 - the same error either way is the point
            out.append((type(exc), str(exc)))
            continue
        assert all(type(r) is ConsumerRecord for r in records)
        out.append((records, part.next_fetch_offset, part.leader_epoch))
        if not records:
            break
    return [*out, bool(part), part.records_read, part.bytes_read]


@hypothesis_settings(max_examples=400, deadline=None)
@given(
    st.lists(_batch, min_size=1, max_size=6),
    st.integers(0, 80),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
    st.none() | st.tuples(st.integers(0, 10**4), st.integers(1, 255)),
)
@example(  # read committed: an aborted transaction, then the same producer's committed one
    [(kind, 7, [(1767225600000, b"q", b"{}", [], True)] * 2, 0, False, 1) for kind in _ABORT_THEN_COMMIT],
    0,
    True,
    True,
    [3],
    None,
)
def test_a_fetch_unpacks_as_in_kafka_python(
    specs, fetch_offset, committed, check_crcs, polls, damage
) -> None:
    data, aborted, end = _build(specs)
    if damage is not None:  # one byte changed: a checksum that fails, or a record that does not parse
        at = damage[0] % len(data)
        data = data[:at] + bytes([data[at] ^ damage[1]]) + data[at + 1 :]
    ours = _read(
        Fetcher.PartitionRecords, data, fetch_offset % (end + 1), committed, aborted, check_crcs, polls
    )
    patched = DefaultRecordBatch.__iter__
    DefaultRecordBatch.__iter__ = _own_iter  # type: ignore[method-assign]
    try:
        theirs = _read(_KafkaPython, data, fetch_offset % (end + 1), committed, aborted, check_crcs, polls)
    finally:
        DefaultRecordBatch.__iter__ = patched  # type: ignore[method-assign]
    assert ours == theirs


def test_the_fetcher_takes_the_native_path() -> None:
    assert Fetcher.PartitionRecords._unpack_records is batches.unpack_records
    data, _, _ = _build([("data", 7, [(1767225600000, b"q1", b"{}", [("h", b"v")], True)] * 3, 0, False, 2)])
    batch = MemoryRecords(data).next_batch()
    assert batch is not None
    records, size = batches._native(
        batch, batches._consumer_records, TP.topic, TP.partition, 2, ConsumerRecord
    )
    assert [r.offset for r in records] == [0, 1, 2] and size > 0
    assert records[0] == ConsumerRecord(
        TP.topic, 3, 2, 0, 1767225600000, 0, b"q1", b"{}", [("h", b"v")], None, 2, 2, 2
    )
