"""The native core's JSON of a checkpoint's query entries (``streameval.native.pack_entries``)
against orjson's of the entries the pure-Python core builds: the same bytes, for every state a
query can hold, and the Python path where the core leaves them.

Skipped where the extension is not installed, except under ``NATIVE_CORE_REQUIRED=1`` (set by
``.ci/run``), where its absence fails.
"""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from streameval import native, packs, state
from streameval.join import OpenQuery
from streameval.pipeline import Pipeline
from streameval.scoring.query import NO_GRADES, SEP, QueryScore
from tests import native_core
from tests.test_state import SETTINGS, feed, raw_records

native_core.require()

# strings with what JSON escapes (quotes, backslashes, control characters), the separator of a
# shown list, and text outside ASCII; no lone surrogates (orjson refuses them, as the core does)
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", '"', "\\", "\x00", "\x1f", "\x7f", "é", "\U0001f600", "a" * 70 + '"']
)
_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308, 0.1 + 0.2]
)
_numbers = _floats | st.integers(-(2**63), 2**64 - 1)


@st.composite
def _scores(draw) -> QueryScore:
    items = draw(st.lists(_text | st.none(), max_size=12))
    score = QueryScore(items, draw(st.lists(_floats, max_size=3)), draw(st.lists(_floats, max_size=3)))
    if draw(st.booleans()):  # changed by an event: the rest of the state is written too
        score.grade = draw(st.dictionaries(_text, _numbers, min_size=1, max_size=4))
        score.hits = draw(st.lists(st.integers(1, 100), max_size=4))
        score.ideal = draw(st.lists(_numbers, max_size=4))
        score.ap_num = tuple(draw(st.lists(_floats, max_size=3)))
    return score


_queries = st.dictionaries(
    _text,
    st.tuples(_floats, st.tuples(_text, _text) | st.tuples(_text), _scores()),
    max_size=8,
)


def _python(changed, open_queries, tombstones) -> tuple[dict, dict]:
    with native_core.switched(None):
        pipeline = Pipeline(SETTINGS)
        pipeline.joiner.open, pipeline.joiner.tombstones = open_queries, tombstones
        return state._packed_entries(pipeline)(changed)


# settling times are floats, as the join makes them (the compiled install holds them as floats)
@hypothesis_settings(max_examples=400, deadline=None)
@given(_queries, st.dictionaries(_text, _floats, max_size=5), st.lists(_text, max_size=4))
@example({"q": (1767225600.25, ("m", "web"), QueryScore(["a", "b"], (0.0,), (0.0,)))}, {"t": 5.0}, ["gone"])
def test_the_entries_are_orjsons_of_the_python_entries(queries, tombstones, gone) -> None:
    open_queries = {q: OpenQuery(q, ts, group, score) for q, (ts, group, score) in queries.items()}
    tombstones = {q: t for q, t in tombstones.items() if q not in open_queries}
    changed = [("q", q) for q in [*open_queries, *tombstones, *gone]]
    got = native.pack_entries(changed, open_queries, tombstones)
    assert got is not None
    keys, values = _python(changed, open_queries, tombstones)
    assert got[0] == keys
    assert got[1] == {kind: [orjson.dumps(v) for v in entries] for kind, entries in values.items()}


def test_a_shown_list_the_core_joined_is_written_as_one_string() -> None:
    score = QueryScore(["a", "b", "c"], (0.0,), (0.0,))
    assert score.items == f"{SEP}a{SEP}b{SEP}c{SEP}" and score.grade is NO_GRADES
    got = native.pack_entries([("q", "q")], {"q": OpenQuery("q", 1.5, ("m",), score)}, {})
    assert got is not None
    assert got[1]["q"] == [orjson.dumps(["q", 1.5, ["m"], [score.items]])]


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(type("Grade", (float,), {})(1.0), id="a float of a subclass"),
        pytest.param({1: 2.0}, id="a key that is not a string"),
        pytest.param(2**64, id="an integer past 64 bits"),
        pytest.param({"a", "b"}, id="a set"),
    ],
)
def test_a_value_the_core_does_not_write_is_left_to_python(odd) -> None:
    """The core returns None, and the checkpoint is what the Python path makes of it: its pack,
    or orjson's refusal."""
    score = QueryScore(["a"], (0.0,), (0.0,))
    score.grade, score.ideal = {"a": 1.0}, [odd]
    open_queries = {"q": OpenQuery("q", 1.0, ("m",), score)}
    assert native.pack_entries([("q", "q")], open_queries, {}) is None
    outcomes = []
    for core in (native.core, None):
        with native_core.switched(core):
            pipeline = Pipeline(SETTINGS)
            pipeline.joiner.open = open_queries
            entries = state._packed_entries(pipeline)
            try:
                outcomes.append(packs.Packs().write([("q", "q")], entries, state.FORMAT_VERSION))
            except TypeError as exc:  # orjson.JSONEncodeError
                outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_checkpoint_writes_the_same_bytes_with_and_without_the_core(seed) -> None:
    """A whole partition's state, from a random log with late and duplicate records, and the
    checkpoint after more of it: the same changelog records, byte for byte."""
    records = raw_records(seed, n_queries=400)
    cut = random.Random(seed).randrange(len(records))
    written = []
    for core in (native.core, None):
        with native_core.switched(core):
            pipeline = Pipeline(SETTINGS)
            pipeline.record_changes()
            feed(pipeline, records[:cut])
            first = state.checkpoint_entries(pipeline)
            feed(pipeline, records[cut:])
            written.append((first, state.checkpoint_entries(pipeline), state.all_entries(pipeline)))
    assert written[0] == written[1]
    assert any(key.startswith(b"p:") and value for key, value in written[0][2])
