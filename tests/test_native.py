"""The native core (``native/``, README, Performance: "The native core") against the pure-Python
core it stands in for: the same fields, the same rejections, the same partitions, for every input.

Skipped where the extension is not installed, except under ``NATIVE_CORE_REQUIRED=1`` (set by
``.ci/run``, which builds and installs it), where its absence fails.
"""

from __future__ import annotations

import json
import os

import orjson
import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from streameval import native
from streameval.kafka.placement import murmur2
from streameval.records import decode_event_fields, decode_impression_fields

if native.core is None:
    if os.environ.get("NATIVE_CORE_REQUIRED") == "1":
        pytest.fail("NATIVE_CORE_REQUIRED=1 but streameval_native is not installed", pytrace=False)
    pytest.skip("the native core (pip install ./native) is not installed", allow_module_level=True)

GRADES = {"click": 1.0, "purchase": 2.0}
GROUP_BY = ("model", "surface")
impression = native.impression_decoder(GROUP_BY)
event = native.event_decoder(GRADES)


def same(got, expected) -> None:
    """Equal, and of the same types (a tuple is not a list; 1.0 is not 1; -0.0 is not 0.0)."""
    assert got == expected
    assert repr(got) == repr(expected)
    assert type(got) is type(expected)
    if isinstance(got, tuple):
        assert [type(v) for v in got] == [type(v) for v in expected]


def check(raw: bytes | str) -> None:
    same(impression(raw), decode_impression_fields(raw, GROUP_BY))
    for default_type in (None, "click", "view"):
        same(event(raw, default_type), decode_event_fields(raw, GRADES, default_type))


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
            "a\x1fb",
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
