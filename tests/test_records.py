from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streameval.config import load_settings
from streameval.pipeline import Pipeline
from streameval.records import (
    REJECT_REASONS,
    Engagement,
    Impression,
    Rejection,
    decode_impression_fields,
    parse_ts,
)
from streameval.scoring.query import compact
from tests.logs import BAD_EVENTS, BAD_IMPRESSIONS
from tests.pipelines import decode_event, decode_impression, ingest

GRADES = {"click": 1.0, "purchase": 2.0}


def test_impression_normalises_ints_and_fills_unknown_groups() -> None:
    got = decode_impression(
        b'{"query_id":"q","ts":10.5,"items":[5,"5","x"],"model":"m","surface":null}',
        ["model", "surface"],
    )
    assert got == Impression("q", 10.5, ("5", "5", "x"), ("m", "unknown"))


@pytest.mark.parametrize(
    "ts,expected",
    [
        ("2024-01-01T00:00:00Z", 1704067200.0),
        ("2024-01-01T01:00:00+01:00", 1704067200.0),
        ("2024-01-01T00:00:00.250Z", 1704067200.25),
        ("2024-01-01T00:00:00", 1704067200.0),  # no offset: read as UTC
        (1704067200, 1704067200.0),
    ],
)
def test_timestamps(ts, expected) -> None:
    got = decode_event(
        {"query_id": "q", "item": 1, "type": "click", "ts": ts}
        and ('{"query_id":"q","item":1,"type":"click","ts":%s}' % (f'"{ts}"' if isinstance(ts, str) else ts)),
        GRADES,
    )
    assert isinstance(got, Engagement) and got.ts == expected and got.item == "1"


def test_topic_type_fills_a_missing_type() -> None:
    got = decode_event(b'{"query_id":"q","item":"a","ts":1}', GRADES, default_type="purchase")
    assert isinstance(got, Engagement) and got.type == "purchase"


@pytest.mark.parametrize("raw,reason", BAD_IMPRESSIONS)
def test_bad_impressions(raw, reason) -> None:
    got = decode_impression(raw, ["model"])
    assert isinstance(got, Rejection) and got.reason == reason and got.detail


@pytest.mark.parametrize("raw,reason", BAD_EVENTS)
def test_bad_events(raw, reason) -> None:
    got = decode_event(raw, GRADES)
    assert isinstance(got, Rejection) and got.reason == reason and got.detail


@pytest.mark.parametrize(
    "raw",
    [
        b'{"query_id":"q","item":"a","type":"click","ts":1e999}',
        b'{"query_id":"q","item":"a","type":"click","ts":"2024-13-01T00:00:00Z"}',
        b'{"query_id":"q","item":"a","type":"click","ts":false}',
    ],
)
def test_impossible_timestamps_are_rejected(raw) -> None:
    assert isinstance(decode_event(raw, GRADES), Rejection)


@given(st.binary(max_size=200))
def test_garbage_bytes_never_raise(raw) -> None:
    pipeline = Pipeline(load_settings(None, {}, {}))
    ingest(pipeline, raw, "impressions", is_impression=True)
    ingest(pipeline, raw, "clicks", is_impression=False)
    pipeline.tick()
    assert sum(pipeline.counters.consumed.values()) == 2


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "query_id": json_values,
            "ts": json_values,
            "items": json_values,
            "item": json_values,
            "type": json_values | st.sampled_from(["click", "purchase"]),
            "event_id": json_values,
            "model": json_values,
        },
    )
)
def test_arbitrary_json_objects_never_raise(obj) -> None:
    import orjson

    raw = orjson.dumps(obj)
    pipeline = Pipeline(load_settings(None, {}, {}))
    for is_impression in (True, False):
        rejection = ingest(pipeline, raw, "t", is_impression=is_impression)
        assert rejection is None or rejection.reason in REJECT_REASONS
    pipeline.finish()


def test_the_reason_vocabulary_is_the_documented_one() -> None:
    # the README's table of reasons; dashboards and alerts match on these label values
    assert REJECT_REASONS == (
        "not_json",
        "not_object",
        "missing_field",
        "wrong_type",
        "unknown_event_type",
        "empty_items",
        "ts_out_of_range",
    )


# The decoders' fast path (exact types, no exceptions) must decide every input exactly as the
# checked path does: records built from fields of every type, present or absent.
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "q1", "click", "purchase", "view", "m", "2024-01-01T00:00:00Z", "x"]),
    st.lists(st.one_of(st.sampled_from(["a", "b", ""]), st.integers(0, 9), st.none()), max_size=4),
    # item lists as integer ids take their own fast route (orjson writes them, the text is split)
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**64 - 1),
            st.booleans(),
            st.floats(allow_nan=False, allow_infinity=False),
            st.sampled_from(["7", "a,b"]),
            st.lists(st.integers(0, 9), max_size=2),
        ),
        min_size=1,
        max_size=4,
    ),
    st.dictionaries(st.sampled_from(["a"]), st.integers(-(2**63), 2**63 - 1), max_size=1),
)
_fields = ["query_id", "ts", "items", "model", "surface", "item", "type", "event_id"]


@given(st.dictionaries(st.sampled_from(_fields), _values), st.sampled_from([None, "click", "view"]))
def test_fast_and_checked_paths_agree(obj, default_type) -> None:
    import orjson

    from streameval.records import _decode_event_checked, _decode_impression_checked

    raw = orjson.dumps(obj)
    group_by = ["model", "surface"]
    assert decode_impression(raw, group_by) == _decode_impression_checked(raw, group_by)
    assert decode_event(raw, GRADES, default_type) == _decode_event_checked(raw, GRADES, default_type)


def _general_route(text: str) -> float | None:
    """parse_ts without its shortcut for times with an offset: the reference the shortcut must equal."""
    from datetime import UTC, datetime

    value = text.strip()
    if value[-1:] in ("z", "Z"):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


_heads = st.one_of(
    st.datetimes().map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S")),
    st.sampled_from(
        ["2026-W01-1T00:00:00", "2026-02-30T00:00:00", "2026-01-01T24:00:00", "0001-01-01T00:00:00"]
    ),
    st.text(alphabet="0123456789-:TW+. ", min_size=19, max_size=19),
)
_tails = st.one_of(
    st.sampled_from(["Z", "z", "+00:00", "", " Z"]),
    st.integers(0, 999).map(lambda ms: f".{ms:03d}Z"),
    st.integers(0, 999_999).map(lambda us: f".{us:06d}Z"),
    st.integers(0, 999).map(lambda ms: f".{ms:03d}+00:00"),
    st.integers(0, 999_999).map(lambda us: f".{us:06d}+00:00"),
    st.text(alphabet="0123456789.Z", max_size=9),
)


@given(_heads, _tails)
def test_the_offset_shortcut_gives_what_the_general_route_gives(head, tail) -> None:
    from streameval.records import _Bad, _iso_with_offset

    text = head + tail
    expected = _general_route(text)
    fast = _iso_with_offset(text)
    if fast is not None:
        assert fast == expected, text
    try:
        got: float | None = parse_ts(text)
    except _Bad:
        got = None
    assert got == expected, text


def test_the_offset_shortcut_takes_the_common_forms() -> None:
    from streameval.records import _iso_with_offset

    assert _iso_with_offset("2026-01-01T00:00:00Z") == 1767225600.0
    assert _iso_with_offset("2026-01-01T00:00:00.001Z") == 1767225600.001
    assert _iso_with_offset("2026-01-01T00:00:00.000123Z") == 1767225600.000123
    assert _iso_with_offset("2026-01-01T00:00:00+00:00") == 1767225600.0
    assert _iso_with_offset("2026-01-01T00:00:00.001+00:00") == 1767225600.001
    assert _iso_with_offset("2026-01-01T00:00:00+01:00") == 1767222000.0
    assert _iso_with_offset("2026-01-01T00:00:00") is None  # no offset: the general route's (UTC)


@pytest.mark.parametrize("core", ["installed", "absent"])
def test_a_compacted_impression_is_compact_of_its_list(monkeypatch, core) -> None:
    """Replay's decoder gives the shown list as ``compact`` makes it, with the native core (which
    joins it itself) and without it."""
    from streameval import native
    from streameval.scoring.query import compact

    if core == "absent":
        monkeypatch.setattr(native, "core", None)
    decode = native.impression_decoder(("model",), compacted=True)
    for raw in (
        b'{"query_id":"q","ts":1,"items":["a",5,"b"],"model":"m"}',
        b'{"query_id":"q","ts":"2026-01-01T00:00:00Z","items":["a\\u007fb","c"]}',
        b'{"query_id":"q","ts":1,"items":[]}',
    ):
        expected = decode_impression_fields(raw, ("model",))
        if isinstance(expected, tuple):
            expected = (*expected[:2], compact(expected[2]), expected[3])
        assert decode(raw) == expected


# Kafka records' values as the daemon gets them: good ones, each kind of rejection, and the ones
# the native core leaves to Python (None, not UTF-8, a ts as text, past max_future, SEP in an id)
_KAFKA_VALUES = [
    None,
    b"",
    b"\xff\xfe",
    orjson.dumps({"query_id": "q1", "ts": 1767225600.5, "items": ["a", "b", 3], "model": "m"}),
    orjson.dumps({"query_id": "q2", "ts": "2026-01-01T00:00:00Z", "items": ["a"], "item": "a"}),
    orjson.dumps({"query_id": "q3", "ts": 4102444800, "items": ["a"], "item": "a", "type": "click"}),
    orjson.dumps({"query_id": "q4", "ts": 1767225600, "items": ["a\x7fb", "c"], "item": "c"}),
    orjson.dumps({"query_id": "q5", "item": "a", "type": "purchase", "ts": 1767225601, "event_id": "e"}),
    orjson.dumps({"query_id": "q6", "item": 7, "ts": 1767225602}),
    orjson.dumps({"query_id": "q7", "item": "a", "type": "view", "ts": 1767225603}),
    *(raw for raw, _ in BAD_IMPRESSIONS),
    *(raw for raw, _ in BAD_EVENTS),
]


def _as_compacted(record: object) -> object:
    """``record`` with an impression's shown list as the join holds it (one string, or a list)."""
    if type(record) is not Impression:
        return record
    items = compact(record.items)  # type: ignore[attr-defined]
    return Impression(record.query_id, record.ts, items if type(items) is str else list(items), record.group)  # type: ignore[attr-defined]


@given(st.lists(st.sampled_from(_KAFKA_VALUES), max_size=40))
def test_kafka_values_decode_as_one_at_a_time(values) -> None:
    """The daemon decodes a poll's values of a partition in one call (into the native core,
    where it is installed): the same records, rejections and reasons as one at a time."""
    settings = load_settings(None, {}, {"events_topics": {"clicks": "click"}})
    pipeline = Pipeline(settings, wall_clock=lambda: 1767225600.0)  # the guard's clock
    for topic in (settings.impressions_topic, "clicks", "events"):
        got = [_as_compacted(r) for r in pipeline.decode_values(topic, list(values))]
        expected = [_as_compacted(pipeline.decode(topic, b"" if v is None else v)) for v in values]
        assert got == expected
