"""The native core (``native/``, README, Performance: "The native core") against the pure-Python
core it stands in for: the same fields, the same rejections, the same partitions, for every input.

Skipped where the extension is not installed, except under ``NATIVE_CORE_REQUIRED=1`` (set by
``.ci/run``, which builds and installs it), where its absence fails.
"""

from __future__ import annotations

import json
import math
import struct

import orjson
import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from streameval import native
from streameval.kafka import batches
from streameval.kafka.placement import murmur2
from streameval.records import decode_event_fields, decode_impression_fields
from streameval.scoring.query import compact
from tests import native_core

native_core.require()

GRADES = {"click": 1.0, "purchase": 2.0}
GROUP_BY = ("model", "surface")
impression = native.impression_decoder(GROUP_BY)
compacted = native.impression_decoder(GROUP_BY, compacted=True)
event = native.event_decoder(GRADES)
VALUES = native.core.Impressions(GROUP_BY)


def same(got, expected) -> None:
    """Equal, and of the same types (a tuple is not a list; 1.0 is not 1; -0.0 is not 0.0)."""
    assert got == expected
    assert repr(got) == repr(expected)
    assert type(got) is type(expected)
    if isinstance(got, tuple):
        assert [type(v) for v in got] == [type(v) for v in expected]


def check(raw: bytes | str) -> None:
    expected = decode_impression_fields(raw, GROUP_BY)
    same(impression(raw), expected)
    # the shown list joined by the core, as replay's join holds it
    if isinstance(expected, tuple):
        expected = (*expected[:2], compact(expected[2]), expected[3])
    same(compacted(raw), expected)
    # the daemon's reading of a list of values: the same, or the value left to Python
    if isinstance(raw, bytes):
        (got,), slow = VALUES.decode_values([raw], math.inf, {})
        if slow:
            assert got is raw
        else:
            same(got, expected)
    for default_type in (None, "click", "view"):
        expected = decode_event_fields(raw, GRADES, default_type)
        same(event(raw, default_type), expected)
        if isinstance(raw, bytes):
            (got,), slow = native.core.event_values([raw], GRADES, default_type, math.inf)
            if slow:
                assert got is raw
            else:
                same(got, expected)


# fields of every type and form, present or absent, as test_records' fast-path test draws them,
# with the forms of time and ids logs use, and values that orjson reads in its own way
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-(2**70), 2**70),  # past 64 bits orjson reads a float
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "",
            "q1",
            "click",
            "purchase",
            "view",
            "m",
            "x",
            "é\u2028\U0001f600",
            "a\x7fb",
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123+00:00",
            "2026-01-01T00:00:00",
            " 2026-01-01T00:00:00Z",
            "1767225600",
            "2026-13-01T00:00:00Z",
        ]
    ),
    st.text(max_size=6),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_fields = ["query_id", "ts", "items", "model", "surface", "item", "type", "event_id", "other"]


def _texts(obj: dict) -> list[bytes | str]:
    """The same object written as producers write it: compact, spaced, ASCII-escaped, as str."""
    return [
        json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(),
        json.dumps(obj, ensure_ascii=True).encode(),
        " \n" + json.dumps(obj, indent=1, ensure_ascii=False) + "\t",
    ]


@hypothesis_settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(_fields), _values))
@example({"query_id": "q", "ts": 1767225600.25, "items": ["a", 5, "c"], "model": "m"})
@example({"query_id": "q", "ts": 2**64 - 1, "items": [2**63, -(2**63)], "model": None, "surface": "s"})
@example({"query_id": "q", "item": 7, "type": None, "ts": "2026-01-01T00:00:00Z", "event_id": "e"})
def test_every_object_decodes_as_in_python(obj) -> None:
    for raw in _texts(obj):
        check(raw)


_good = orjson.dumps(
    {"query_id": "q1", "ts": 1767225600.5, "items": ["a", "b"], "model": "m", "item": "a", "type": "click"}
)


@hypothesis_settings(max_examples=500, deadline=None)
@given(st.integers(0, len(_good)), st.integers(0, 3), st.binary(min_size=0, max_size=3))
def test_damaged_records_decode_as_in_python(at, cut, insert) -> None:
    check(_good[:at] + insert + _good[at + cut :])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"query_id":"q","ts":1,"items":["a"],"other":"\\ud800"}',  # a lone surrogate
        b'{"query_id":"q","ts":1,"items":["a"],"other":"\xff"}',  # not UTF-8
        b'{"query_id":"q","ts":1,"items":["a"],"other":"\x01"}',  # a control character
        b'\xef\xbb\xbf{"query_id":"q","ts":1,"items":["a"]}',  # a byte order mark
        b'{"query_id":"q","ts":1,"items":["a"]} x',
        b'{"query_id":"q","ts":1,"items":["a"]}{}',
        b'{"query_id":"q","ts":1,"items":["a"],"other":1e400}',
        b'{"query_id":"q","ts":1e400,"items":["a"]}',
        b'{"query_id":"q","ts":01,"items":["a"]}',
        b'{"query_id":"q","ts":-0,"items":[-0, 0]}',
        b'{"query_id":"q","ts":1,"items":["a"],"other":' + b"[" * 200 + b"]" * 200 + b"}",
        b'{"query_id":"q","ts":1,"items":["a"],"other":' + b"[" * 1100 + b"]" * 1100 + b"}",
        b'{"query_id":"q","query_id":"r","ts":1,"items":["a"]}',  # the last copy counts
        b'{"query_id":"q","ts":1,"items":["a"],"model":"m","model":3}',
        b'{"query_id":"q","ts":1,"items":["a"],"other":1,"other":2}',
        b'{"query_id":"q","ts":1,"items":["a"],"item":"a","type":"click","type":"view"}',
        b'{"query_id":"q","ts":1,"items":[]}',
        b'{"query_id":"q","ts":1,"items":["a\\u007fb","c"]}',  # an item holding SEP: a list
        b'{"query_id":"q","ts":1,"items":[7,"\\u00e9",18446744073709551615]}',
        b'{"query_id":"q","ts":true,"items":["a"]}',
        b'{"query_id":"q","ts":1,"items":["a",true]}',
        b'{"query_id":"q","ts":1,"items":["a",1.0]}',
        b'{"query_id":"q","ts":1,"items":[["a"]]}',
        b'{"query_id":"q\\u0000\\"","ts":1,"items":["\\u00e9"],"model":"\\ud83d\\ude00"}',
        b'{"qu\\u0065ry_id":"q","ts":1,"items":["a"]}',  # an escaped key
        b'[{"query_id":"q","ts":1,"items":["a"]}]',
        b'"query_id"',
        b"",
        b"null",
        '{"query_id":"q","ts":1,"items":["a"],"model":"\udc80"}',  # str, not UTF-8-able
    ],
)
def test_edge_cases_decode_as_in_python(raw) -> None:
    check(raw)


def test_group_fields_may_share_a_name_with_other_fields() -> None:
    for group_by in (("query_id",), ("ts", "model"), ("items",), ("model", "model"), ()):
        decode = native.impression_decoder(group_by)
        for raw in (_good, b'{"query_id":"q","ts":1,"items":["a"]}'):
            same(decode(raw), decode_impression_fields(raw, group_by))


def test_a_record_takes_the_native_path() -> None:
    # the common record must not fall back to the Python code, or the core saves nothing
    assert native.core.Impressions(GROUP_BY).decode(_good) is not None
    assert native.core.Impressions(GROUP_BY).decode_compact(_good) is not None
    assert native.core.event(_good, GRADES, None) is not None


@pytest.mark.parametrize(
    "key, partition",
    # Kafka's Java producer: Utils.toPositive(Utils.murmur2(key)) % 1000
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_murmur2_is_the_java_clients(key: bytes, partition: int) -> None:
    assert (native.core.murmur2(key) & 0x7FFFFFFF) % 1000 == partition


@hypothesis_settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=400), st.text(max_size=40), st.integers(1, 1000))
def test_murmur2_and_placement_equal_pythons(key: bytes, query_id: str, partitions: int) -> None:
    assert native.core.murmur2(key) == murmur2(key)
    try:
        expected: int | None = (murmur2(query_id.encode()) & 0x7FFFFFFF) % partitions
    except UnicodeEncodeError:
        expected = None
    if expected is None:
        with pytest.raises(UnicodeEncodeError):
            native.core.Placement(partitions).partition_of(query_id)
    else:
        assert native.core.Placement(partitions).partition_of(query_id) == expected


def test_a_topic_has_partitions() -> None:
    with pytest.raises(ValueError):
        native.core.Placement(0)


# --- kafka-python's record batches (streameval.kafka.batches) --------------------------------


def _fields(record) -> tuple:
    return (
        record.offset,
        record.timestamp,
        record.timestamp_type,
        record.key,
        record.value,
        record.headers,
        record.size_in_bytes,
        record.checksum,
        record.validate_crc(),
    )


def _read(buffer: bytes, through_core: bool) -> list:
    """The records of a batch as the fetcher reads them, then the error that ended them."""
    batch = DefaultRecordBatch(buffer)
    out: list = []
    try:
        if through_core:
            for record in batches.records(batch):
                out.append(_fields(record))
        else:  # kafka-python's own reading, a record at a time
            batch._maybe_uncompress()
            while True:
                try:
                    out.append(_fields(batch.__next__()))
                except StopIteration:
                    break
    except Exception as exc:  # noqa: BLE001 - the same error either way is the point
        out.append((type(exc), str(exc)))
    return out


def _batch(records, compression: int = 0, base_offset: int = 0) -> bytearray:
    """A batch of (timestamp, key, value, headers) records, as kafka-python's producer builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    buffer = builder.build()
    struct.pack_into(">q", buffer, 0, base_offset)  # the batch's first offset
    return buffer


_maybe_bytes = st.none() | st.binary(max_size=40)
_record = st.tuples(
    st.integers(-(2**40), 2**45),
    _maybe_bytes,
    _maybe_bytes,
    st.lists(st.tuples(st.text(max_size=5), _maybe_bytes), max_size=3),
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=30), st.sampled_from([0, 1]), st.booleans())
def test_record_batches_read_as_kafka_python_reads_them(records, compression, log_append_time) -> None:
    buffer = _batch(records, compression, base_offset=2**40)
    if log_append_time:  # the timestamp type is an attribute bit (the checksum is not read here)
        buffer[DefaultRecordBatch.ATTRIBUTES_OFFSET + 1] |= DefaultRecordBatch.TIMESTAMP_TYPE_MASK
    expected = _read(bytes(buffer), through_core=False)
    assert _read(bytes(buffer), through_core=True) == expected
    assert len(expected) == len(records) and all(len(r) == 9 for r in expected)


_HEADER = DefaultRecordBatch.HEADER_STRUCT.size  # the batch's header, before its records
_sample = bytes(_batch([(1767225600000 + i, b"q%d" % i, b'{"a":1}', [("h", b"v")]) for i in range(3)]))


@hypothesis_settings(max_examples=1000, deadline=None)
@given(st.integers(_HEADER, len(_sample)), st.integers(0, 3), st.binary(max_size=3))
@example(len(_sample), 0, b"\x00")  # a byte left over after the last record
@example(_HEADER, 1, b"\xff" * 3)  # a varint past 64 bits
def test_damaged_record_batches_fail_as_in_kafka_python(at, cut, insert) -> None:
    damaged = _sample[:at] + insert + _sample[at + cut :]
    assert _read(damaged, through_core=True) == _read(damaged, through_core=False)


def test_a_record_batch_takes_the_native_path(monkeypatch) -> None:
    batch = DefaultRecordBatch(_sample)
    assert batches.records(batch) is not batch  # not left to kafka-python's reading
    control = bytearray(_sample)
    control[DefaultRecordBatch.ATTRIBUTES_OFFSET + 1] |= DefaultRecordBatch.CONTROL_MASK
    batch = DefaultRecordBatch(bytes(control))
    assert batches.records(batch) is batch  # a control batch: kafka-python's ControlRecord
    monkeypatch.setattr(DefaultRecordBatch, "__iter__", DefaultRecordBatch.__iter__)
    assert batches.install()
    assert [r.offset for r in DefaultRecordBatch(_sample)] == [0, 1, 2]


def test_the_core_joins_shown_lists_as_the_python_core_does() -> None:
    from streameval.scoring.query import SEP

    assert native.core.SEP == SEP  # else streameval.native leaves the core unused
