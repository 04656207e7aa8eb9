"""Deadlines hand items out exactly as one heap of (time, arrival) would."""

from __future__ import annotations

import heapq
import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from streameval.deadlines import Deadlines

times = st.one_of(
    st.floats(-5.0, 5.0, allow_nan=False),
    st.sampled_from([0.0, 1.0, 1.5, 2.0, -1.0, 1e9 + 0.25, math.inf, -math.inf]),
)
steps = st.lists(st.one_of(st.tuples(st.just("push"), times), st.tuples(st.just("pop"), times)), max_size=80)


@settings(max_examples=500)
@given(steps)
def test_the_same_order_as_a_heap(ops) -> None:
    ours: Deadlines[int] = Deadlines()
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
