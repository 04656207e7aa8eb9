"""Deadlines hand items out exactly as one heap of (time, arrival) would: the pure-Python ones
and the native core's (where it is installed; ``.ci/run`` installs it)."""

from __future__ import annotations

import heapq
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streameval import native
from streameval.deadlines import Deadlines, Queue, deadlines

times = st.one_of(
    st.floats(-5.0, 5.0, allow_nan=False),
    st.sampled_from([0.0, 1.0, 1.5, 2.0, -1.0, 1e9 + 0.25, math.inf, -math.inf]),
)
steps = st.lists(st.one_of(st.tuples(st.just("push"), times), st.tuples(st.just("pop"), times)), max_size=80)


native_only = pytest.mark.skipif(native.core is None, reason="the native core is not installed")
KINDS = [pytest.param(Deadlines, id="python"), pytest.param(deadlines, id="native", marks=native_only)]


@pytest.mark.parametrize("make", KINDS)
@settings(max_examples=500)
@given(ops=steps)
def test_the_same_order_as_a_heap(make, ops) -> None:
    ours: Queue[int] = make()
    heap: list[tuple[float, int, int]] = []
    seq = itertools.count()
    for n, (op, when) in enumerate(ops):
        if op == "push":
            ours.push(when, n)
            heapq.heappush(heap, (when, next(seq), n))
        else:
            expected = []
            while heap and heap[0][0] < when:
                expected.append(heapq.heappop(heap)[2])
            assert ours.pop_due(when) == expected
        assert len(ours) == len(heap)
        assert ours.earliest() == (min(entry[0] for entry in heap) if heap else math.inf)


@native_only
def test_the_native_core_gives_its_own() -> None:
    assert type(deadlines()) is native.core.Deadlines  # type: ignore[union-attr]
