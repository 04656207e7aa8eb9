"""The incremental scorer against the from-scratch formulas and the batch oracle."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streameval.scoring import MetricSpec, Scorer, ScoringParams
from tests import oracle

METRICS = tuple(
    MetricSpec.parse(m)
    for m in (
        "map@1",
        "map@3",
        "map@10",
        "wmap@5",
        "ndcg@3",
        "ndcg@10",
        "recall@5",
        "precision@4",
        "mrr@3",
    )
)
items_st = st.lists(st.sampled_from([f"i{n}" for n in range(12)]), min_size=1, max_size=15)
events_st = st.lists(
    st.tuples(st.sampled_from([f"i{n}" for n in range(16)]), st.sampled_from([0.0, 1.0, 2.0, 3.0])),
    max_size=25,
)
params_st = st.builds(
    ScoringParams,
    metrics=st.just(METRICS),
    ap_denominator=st.sampled_from(["min_g_k", "g", "hits"]),
    ndcg_gain=st.sampled_from(["exp", "linear"]),
    min_grade=st.sampled_from([1.0, 2.0]),
    unshown_items=st.sampled_from(["count", "ignore"]),
)


def apply(scorer: Scorer, items, events):
    state = scorer.new(items)
    grades: dict[str, float] = {}
    for item, grade in events:
        scorer.add_grade(state, item, grade)
        grades[item] = max(grades.get(item, 0.0), grade)
    return state, grades


_query = st.tuples(
    st.integers(0, 5),
    st.none() | st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=3, max_size=3),
)


@given(st.lists(_query, max_size=6), _query, _query)
def test_sums_replace_is_remove_then_add_bit_for_bit(before, old, new) -> None:
    """A query whose values change moves the provisional sums as removing its old values and
    adding its new ones would, to the last bit."""
    from streameval.scoring import Sums

    one, two = Sums(3), Sums(3)
    for n, values in [*before, old]:
        one.add(n, values)
        two.add(n, values)
    one.add(old[0], old[1], -1)
    one.add(new[0], new[1])
    two.replace(old[0], old[1], new[0], new[1])
    assert repr(two.to_dict()) == repr(one.to_dict())


@given(params_st, st.lists(st.tuples(items_st, events_st), min_size=1, max_size=8), st.integers(1, 4))
@example(  # the same hits, grades and AP numerators; only the DCGs tell the two apart
    ScoringParams(METRICS),
    [(["a", "b"], [("a", 1.0), ("b", 2.0)]), (["a", "b"], [("a", 2.0), ("b", 1.0)])],
    4,
)
def test_values_remembered_are_the_values_read(params, queries, table_size) -> None:
    """Scorer.values remembers the values of states it read (a small table, cleared when
    full): every query of one scorer gets, to the last bit, what reading its state gives."""
    import streameval.scoring.query as query_module

    scorer = Scorer(params)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(query_module, "_READ_TABLE_SIZE", table_size)
        for items, events in queries:
            state = scorer.new(items)
            for item, grade in events:
                scorer.add_grade(state, item, grade)
                got = scorer.values(state)
                read = scorer._read(state.hits, state.ideal, state.ap_num, state.dcg) if state.ideal else None
                assert repr(got) == repr(read)
                assert len(scorer._read_table) <= table_size


@given(params_st, items_st, events_st)
def test_incremental_equals_from_scratch(params, items, events) -> None:
    scorer = Scorer(params)
    state = scorer.new(items)
    grades: dict[str, float] = {}
    for item, grade in events:
        scorer.add_grade(state, item, grade)
        grades[item] = max(grades.get(item, 0.0), grade)
        incremental = scorer.values(state)
        scratch = scorer.values_from_scratch(items, grades)
        if scratch is None:
            assert incremental is None
        else:
            assert incremental == pytest.approx(scratch, abs=1e-12)


@given(params_st, items_st, events_st, st.booleans())
def test_values_once_are_the_from_scratch_values_to_the_bit(params, items, events, compact) -> None:
    # replay scores each query once, from its best grades, with the shown list as the daemon
    # holds it (compact) or as a list; a signature's values come from a table the second time
    from streameval.scoring.query import compact as compact_items

    scorer = Scorer(params)
    _, grades = apply(scorer, items, events)
    held = compact_items(items) if compact else items
    for _ in range(2):
        n_relevant, values = scorer.values_once(held, grades.items())
        assert values == scorer.values_from_scratch(items, grades)
        assert n_relevant == len(scorer.relevant_set(items, grades))


@given(
    st.lists(st.tuples(st.integers(0, 5), st.lists(st.floats(0, 1), min_size=3, max_size=3))),
    st.randoms(use_true_random=False),
)
def test_sums_add_exact_is_add_in_turn_correctly_rounded_in_any_order(rows, rng) -> None:
    from streameval.scoring import Sums

    rows = [(n, tuple(v) if n else None) for n, v in rows]
    one, exact = Sums(3), Sums(3)
    for n, values in rows:
        one.add(n, values)
    scored = [values for _, values in rows if values is not None]
    rng.shuffle(scored)
    cut = rng.randint(0, len(scored))  # in two pieces, as from two processes
    columns = [[[v[i] for v in scored[:cut]], [v[i] for v in scored[cut:]]] for i in range(3)]
    exact.add_exact(len(rows), len(scored), sum(n for n, v in rows if v is not None), columns)
    assert (exact.queries, exact.with_relevant, exact.relevant_items) == (
        one.queries,
        one.with_relevant,
        one.relevant_items,
    )
    assert exact.sums == [math.fsum(v[i] for v in scored) for i in range(3)]
    assert exact.squares == [math.fsum(v[i] * v[i] for v in scored) for i in range(3)]
    assert exact.sums == pytest.approx(one.sums, rel=1e-12)
    assert exact.squares == pytest.approx(one.squares, rel=1e-12)


@given(params_st, items_st, events_st)
def test_from_scratch_equals_independent_oracle(params, items, events) -> None:
    scorer = Scorer(params)
    _, grades = apply(scorer, items, events)
    cfg = oracle.Config(
        metrics=[str(m) for m in METRICS],
        ap_denominator=params.ap_denominator,
        ndcg_gain=params.ndcg_gain,
        min_grade=params.min_grade,
        unshown_items=params.unshown_items,
    )
    expected = [oracle.query_metric(str(m), items, grades, cfg) for m in METRICS]
    got = scorer.values_from_scratch(items, grades)
    if got is None:
        assert all(v is None for v in expected)
    else:
        assert list(got) == pytest.approx(expected, abs=1e-12)


@given(params_st, items_st, events_st)
def test_values_are_in_unit_interval(params, items, events) -> None:
    scorer = Scorer(params)
    state, _ = apply(scorer, items, events)
    values = scorer.values(state)
    if values is None:
        return
    for metric, value in zip(METRICS, values, strict=True):
        if metric.name == "wmap":
            value /= state.n_relevant
        assert -1e-12 <= value <= 1 + 1e-12, metric


@given(
    params_st,
    st.lists(st.sampled_from([f"i{n}" for n in range(30)]), min_size=1, max_size=20, unique=True),
    st.data(),
)
def test_perfect_ranking_scores_one(params, items, data) -> None:
    scorer = Scorer(params)
    # the relevant items are exactly the top of the list, best grade first
    n_rel = data.draw(st.integers(1, len(items)))
    grades = sorted(
        data.draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=n_rel, max_size=n_rel)),
        reverse=True,
    )
    grades = [max(g, params.min_grade) for g in grades]
    state = scorer.new(items)
    for item, grade in zip(items, grades, strict=False):
        scorer.add_grade(state, item, grade)
    values = scorer.values(state)
    assert values is not None
    for metric, value in zip(METRICS, values, strict=True):
        if metric.name in ("ndcg", "mrr"):
            assert value == pytest.approx(1.0), metric
        if metric.name == "map" and (params.ap_denominator != "g" or n_rel <= metric.k):
            # trec_eval's |G| denominator caps AP@k at k/|G| when |G| > k
            assert value == pytest.approx(1.0), metric
        if metric.name == "recall" and n_rel <= metric.k:
            assert value == pytest.approx(1.0)


def test_adding_a_hit_updates_later_terms() -> None:
    scorer = Scorer(ScoringParams(metrics=(MetricSpec("map", 10),), ap_denominator="g"))
    state = scorer.new([f"d{i}" for i in range(1, 11)])
    scorer.add_grade(state, "d4", 1)
    scorer.add_grade(state, "d7", 1)
    assert state.ap_num == [pytest.approx(1 / 4 + 2 / 7)]
    scorer.add_grade(state, "d1", 1)  # moves both later hits one place down the hit list
    assert state.ap_num == [pytest.approx(1 + 2 / 4 + 3 / 7)]
    assert scorer.values(state) == (pytest.approx((1 + 2 / 4 + 3 / 7) / 3),)


def test_grade_upgrade_changes_ndcg_not_ap() -> None:
    scorer = Scorer(ScoringParams(metrics=(MetricSpec("map", 5), MetricSpec("ndcg", 5))))
    state = scorer.new(["a", "b", "c"])
    scorer.add_grade(state, "b", 1)
    scorer.add_grade(state, "c", 1)
    before = scorer.values(state)
    assert scorer.add_grade(state, "c", 2)
    after = scorer.values(state)
    assert before is not None and after is not None
    assert after[0] == before[0] and after[1] != before[1]
    assert not scorer.add_grade(state, "c", 1)  # a lower grade changes nothing


@example(["a", "b"], "a\x7fb")  # an unshown item that spans two shown ones in the joined string
@example(["", ""], "\x7f")
@given(  # DEL joins a list held as one string (SEP), \x1f did in state format 4 (OLD_SEP)
    st.lists(st.sampled_from(["a", "b", "ab", "", "a\x7fb", "\x7f", "c", "\x1f"]), min_size=1, max_size=8),
    st.sampled_from(["a", "b", "ab", "", "a\x7fb", "\x7f", "c", "x", "\x1f"]),
)
def test_rank_is_the_first_position_however_the_list_is_held(items, item) -> None:
    from streameval.scoring.query import QueryScore

    expected = items.index(item) + 1 if item in items else None
    state = QueryScore(items, (), ())
    assert state.rank(item) == expected
    assert QueryScore.from_dict(state.to_dict()).rank(item) == expected


def test_state_format_1_scores_still_restore() -> None:
    # format 1 wrote the shown list as item -> first rank; format 2 writes the list itself
    from streameval.scoring.query import QueryScore

    old = {"rank_of": {"a": 1, "b": 2, "c": 4}, "grade": {"b": 1.0}, "hits": [2], "ideal": [1.0]}
    state = QueryScore.from_dict({**old, "ap_num": [0.5], "dcg": [0.63]})
    assert [state.rank(i) for i in ("a", "b", "c", "x")] == [1, 2, 4, None]
    assert state.n_relevant == 1 and state.hits == [2]
