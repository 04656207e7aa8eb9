"""The native core's scoring of an attributed event (``streameval.native.grader``, the join's
``add_grade``) against ``Scorer.add_grade``, which the pure-Python core uses: the same answer and
the same state, to the bit (the containers' types included), for every sequence of grades a
query can get, from a new state or one read back from a checkpoint, and Python's own change
where the core leaves a state to it. And the join with and without it.

Skipped where the extension is not installed, except under ``NATIVE_CORE_REQUIRED=1`` (set by
``.ci/run``), where its absence fails.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from streameval import native
from streameval.config import load_settings
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression
from streameval.scoring import Scorer, ScoringParams
from streameval.scoring.query import NO_GRADES, SEP, QueryScore, compact
from tests import native_core
from tests.test_scoring import METRICS

native_core.require()

# item ids as in test_native_score: prefixes and suffixes of one another, outside ASCII, empty,
# one holding the separator (the shown list then stays a tuple)
_items = st.sampled_from(["a", "b", "ab", "ba", "", "é", "\U0001f600", "i10", "i1", "0", "x" + SEP])
# floats (some equal, -0.0, tiny, large enough to overflow 2^g), and ints, which the core leaves
_grade = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, 3.0, 1e-300, 7.25, 1500.0, 1, 2])
_params = st.builds(
    ScoringParams,
    metrics=st.sampled_from([METRICS, METRICS[:3], METRICS[4:6], ()]),
    ap_denominator=st.just("min_g_k"),
    ndcg_gain=st.sampled_from(["exp", "linear"]),
    min_grade=st.sampled_from([0.0, 1.0, 2.0]),
    unshown_items=st.sampled_from(["count", "ignore"]),
)


def _exact(state: QueryScore) -> str:
    """Everything of a state, floats to the bit and containers with their types."""
    parts = [state.items, state.grade, state.hits, state.ideal, state.ap_num, state.dcg]
    return repr([(type(p).__name__, p) for p in parts] + [state.grade is NO_GRADES])


def _twins(scorer: Scorer, shown: list[str], as_string: bool, restored: list[Any] | None) -> list[QueryScore]:
    items: Any = compact(shown) if as_string else tuple(shown)
    if restored is None:
        return [scorer.new(items), scorer.new(items)]
    # read back from a checkpoint, as JSON gives it: lists for tuples, each twin its own
    start = scorer.new(items)
    for item, grade in restored:
        scorer.add_grade(start, item, grade)
    return [scorer.from_row(orjson.loads(orjson.dumps(start.to_row()))) for _ in range(2)]


def _outcome(f: Any, *args: Any) -> str:
    """What a call returns, or the exception it raises (2^1500 is past the floats)."""
    try:
        return repr(f(*args))
    except OverflowError as exc:
        return f"raised {exc!r}"


@given(
    _params,
    st.lists(_items, max_size=12),
    st.booleans(),
    st.none() | st.lists(st.tuples(_items, _grade.filter(lambda g: g < 1024)), max_size=4),
    st.lists(st.tuples(_items, _grade), max_size=10),
)
@example(ScoringParams(METRICS), ["a", "b", "c"], True, None, [("b", 1.0), ("a", 1.0), ("b", 2.0)])
def test_the_cores_change_is_add_grades_to_the_bit(params, shown, as_string, restored, events) -> None:
    scorer = Scorer(params)
    add_grade = native.grader(scorer)
    assert add_grade != scorer.add_grade  # the core's
    python_state, native_state = _twins(scorer, shown, as_string, restored)
    for item, grade in events:
        assert _outcome(add_grade, native_state, item, grade) == _outcome(
            scorer.add_grade, python_state, item, grade
        )
        assert _exact(native_state) == _exact(python_state)
        assert _outcome(scorer.values, native_state) == _outcome(scorer.values, python_state)


def test_without_the_core_the_join_scores_with_the_scorer() -> None:
    scorer = Scorer(ScoringParams(METRICS))
    with native_core.switched(None):
        assert native.grader(scorer) == scorer.add_grade


def test_the_pipeline_gives_the_same_with_and_without_the_core() -> None:
    """Impressions and events through the whole pipeline (join, scoring, sums): the same settled
    totals, to the bit, with the core's scoring and with Python's."""
    settings = load_settings(None, {}, {"metrics": ",".join(map(str, METRICS))})
    totals = []
    for core in (native.core, None):
        with native_core.switched(core):
            pipeline = Pipeline(settings)
            for n in range(60):
                shown = tuple(f"i{k}" for k in range(n % 11 + 1))
                pipeline.handle(settings.impressions_topic, Impression(f"q{n}", 100.0 + n, shown, ("m", "s")))
                for k in range(n % 4):
                    kind = ("click", "purchase")[k % 2]
                    event = Engagement(f"q{n}", f"i{(n + 3 * k) % 13}", kind, 100.5 + n + k, None)
                    pipeline.handle("events", event)
            pipeline.finish()
            totals.append(
                {
                    g: (s.queries, s.with_relevant, s.sums, s.squares)
                    for g, s in pipeline.settled_totals.items()
                }
            )
    assert totals[0] and repr(totals[0]) == repr(totals[1])
