"""The native core's rows of ``replay``'s kept queries (``streameval.native.score_rows``) against
``Scorer.values_once``, which the pure-Python core uses: the same rows, to the bit, for every
shown list and set of best grades a query can hold, and Python's own answer where the core
leaves a query to it. And ``replay``'s report with and without it.

Skipped where the extension is not installed, except under ``NATIVE_CORE_REQUIRED=1`` (set by
``.ci/run``), where its absence fails.
"""

from __future__ import annotations

import array
import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streameval import native
from streameval.config import load_settings
from streameval.pipeline import Pipeline
from streameval.replay.batch import join_in_batch, score
from streameval.scoring import Scorer, ScoringParams, Sums
from streameval.scoring.query import SEP, compact
from tests import native_core
from tests.test_scoring import METRICS

native_core.require()

NOT_SCORED = (0, None)
# item ids: plain, empty, outside ASCII, a prefix or suffix of another (a substring search must
# not match them), and one holding the separator (the list then stays a list)
_items = st.sampled_from(["a", "b", "ab", "ba", "", "é", "\U0001f600", "b\x1fa", "i10", "i1", "0"])
_grade = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 1e-300, 7.25])
_best = st.none() | st.dictionaries(_items | st.just("x" + SEP), _grade, max_size=6)
_params = st.builds(
    ScoringParams,
    metrics=st.just(METRICS),
    ap_denominator=st.sampled_from(["min_g_k", "g", "hits"]),
    ndcg_gain=st.sampled_from(["exp", "linear"]),
    min_grade=st.sampled_from([0.0, 1.0, 2.0]),
    unshown_items=st.sampled_from(["count", "ignore"]),
)


@st.composite
def _entries(draw) -> list[list[Any]]:
    entries = []
    for _ in range(draw(st.integers(0, 30))):
        shown = draw(st.lists(_items | st.just("x" + SEP), max_size=12))
        items = compact(shown) if draw(st.booleans()) else tuple(shown)
        entries.append([1.0, ("m",), items, draw(_best)])
    return entries


def _python_rows(scorer: Scorer, entries: list[list[Any]]) -> list[Any]:
    return [NOT_SCORED if e[3] is None else scorer.values_once(e[2], e[3].items()) for e in entries]


@given(_params, _entries())
@example(ScoringParams(METRICS), [[1.0, ("m",), compact(["a", "b"]), {"b": 1.0, "c": 2.0, "ab": 3.0}]])
def test_the_cores_rows_are_values_once_to_the_bit(params, entries) -> None:
    scorer = Scorer(params)
    got = native.score_rows(scorer, entries, NOT_SCORED)
    assert got is not None
    assert repr(got) == repr(_python_rows(Scorer(params), entries))


@given(_params, st.sampled_from([1, 2, 3, True, float("nan")]))
def test_a_grade_the_core_does_not_read_is_left_to_python(params, grade) -> None:
    """An int (or bool) grade, or NaN: Python compares and sorts them as it always did."""
    entries = [[1.0, ("m",), compact(["a", "b"]), {"a": 2.0, "b": grade}]] * 2
    got = native.score_rows(Scorer(params), entries, NOT_SCORED)
    assert repr(got) == repr(_python_rows(Scorer(params), entries))


def test_a_signature_met_again_takes_the_values_computed_the_first_time() -> None:
    scorer = Scorer(ScoringParams(METRICS))
    entries = [[1.0, ("m",), compact([f"i{n}" for n in range(10)]), {"i3": 1.0}] for _ in range(3)]

    class Counting:  # the scorer, counting what it computes (a compiled Scorer takes no patch)
        params, values_once = scorer.params, scorer.values_once
        computed: list[Any] = []

        def values_of_signature(self, hits: Any, unshown: Any) -> Any:
            self.computed.append((hits, unshown))
            return scorer.values_of_signature(hits, unshown)

    counting = Counting()
    rows = native.score_rows(counting, entries, NOT_SCORED)  # type: ignore[arg-type]
    assert counting.computed == [([(4, 1.0)], [])]
    assert rows is not None and rows[0] is rows[1] is rows[2]


@pytest.mark.parametrize("unshown_items", ["count", "ignore"])
def test_replay_scores_the_same_with_and_without_the_core(unshown_items) -> None:
    """The whole batch join on a log with engaged, unengaged and unknown queries, unshown items
    and grades below min_grade: the same totals with and without the core."""
    settings = load_settings(
        None, {}, {"unshown_items": unshown_items, "metrics": ",".join(map(str, METRICS))}
    )
    impressions = [
        (f"q{n}", 100.0 + n, compact([f"i{k}" for k in range(n % 7 + 1)]), ("m", "s")) for n in range(60)
    ]
    events = [(f"q{n}", f"i{n % 9}", ("click", "purchase")[n % 2], 101.0 + n, None) for n in range(0, 80, 1)]
    totals = []
    for core in (native.core, None):
        with native_core.switched(core):
            pipeline = Pipeline(settings)
            join_in_batch(pipeline, impressions, events)
            totals.append(
                {
                    g: (s.queries, s.with_relevant, s.sums, s.squares)
                    for g, s in pipeline.settled_totals.items()
                }
            )
    assert repr(totals[0]) == repr(totals[1])


def test_score_uses_the_core_where_it_is_installed() -> None:
    scorer = Scorer(ScoringParams(METRICS))
    kept = {"q": [1.0, ("m",), compact(["a", "b"]), {"b": 1.0}]}
    calls = []
    real = native.core

    class Spy:
        @staticmethod
        def score_rows(*args: Any) -> Any:
            calls.append(len(args[0]))
            return real.score_rows(*args)

        exact_partials = staticmethod(real.exact_partials)

    with native_core.switched(Spy()):
        groups = score(scorer, kept)
    assert calls == [1] and groups[("m",)].with_relevant == 1
    assert groups[("m",)].partials is not None and groups[("m",)].columns == []


# a metric's values: any finite float (a square or sum may leave the floats), and the corners
_column = st.lists(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, -0.0, 1.0, 0.1, 1 / 3, 1e308, -1e308, 5e-324, 1e-300, 1e154, 1e16, -1.0]),
    max_size=40,
)


def _outcome(add: Any) -> Any:
    """What adding gives: the sums and squares as their repr, or the error it raised."""
    sums = Sums(1)
    try:
        add(sums)
    except (OverflowError, ValueError) as exc:
        return type(exc).__name__
    return repr((sums.sums, sums.squares))


@given(st.lists(_column, min_size=1, max_size=4))
@example([[0.1] * 10, [0.2, 1e16, -1e16]])
def test_partials_add_up_to_what_the_values_add_up_to(shards) -> None:
    """A shard's values sent as the core's partials add up, with the other shards', to the same
    correctly rounded sums (and sums of squares) as the values themselves."""
    got = [native.core.exact_partials(column) for column in shards]
    values = _outcome(lambda s: s.add_exact(0, 0, 0, [[array.array("d", c) for c in shards]]))
    if any(partials is None for partials in got):  # left to Python: a square or sum past the floats
        assert any(not math.isfinite(x * x) for c in shards for x in c) or not values.startswith("(")
        return
    assert _outcome(lambda s: s.add_exact(0, 0, 0, [[]], [got])) == values
    mixed = _outcome(lambda s: s.add_exact(0, 0, 0, [[array.array("d", shards[0])]], [got[1:]]))
    assert mixed == values  # one shard's values and the others' partials


def test_a_value_that_is_not_a_float_is_left_to_python() -> None:
    assert native.core.exact_partials((1.0, 2)) is None
    assert native.core.exact_partials((1.0, float("inf"))) is None
    assert native.core.exact_partials((1e200,)) is None  # its square is past the floats
    assert native.core.exact_partials(()) == ([], [])
