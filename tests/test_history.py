"""The live page's history: the difference of each group from its control counterpart."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

from streameval.config import load_settings
from streameval.history import History, control_of, versus_control
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression
from tests.test_exporter import T0, view_of


def settings(**overrides):
    base = {"metrics": ["map@3"], "windows": ["1h"], "group_by": ["model", "surface"]}
    return load_settings(None, {}, base | overrides)


def test_each_group_is_compared_with_the_control_on_its_own_surface() -> None:
    view = SimpleNamespace(settings=settings())
    points = {
        ("control", "home"): (0.5, 0.01),
        ("cand", "home"): (0.4, 0.02),
        ("cand", "search"): (0.3, 0.05),  # no control on search: not compared
        ("control", "search-2"): (0.9, None),
    }
    assert control_of(view, ("cand", "home")) == ("control", "home")  # type: ignore[arg-type]
    assert control_of(view, ("control", "home")) is None  # type: ignore[arg-type]
    out = versus_control(view, points)  # type: ignore[arg-type]
    assert list(out) == ["model=cand, surface=home"]
    diff, se = out["model=cand, surface=home"]
    assert diff is not None and math.isclose(diff, -0.1)
    assert se is not None and math.isclose(se, math.sqrt(0.01**2 + 0.02**2))


def test_the_control_may_be_named_by_another_label_and_none_without_it() -> None:
    view = SimpleNamespace(settings=settings(control={"surface": "home"}))
    out = versus_control(view, {("a", "home"): (0.5, None), ("a", "search"): (0.6, None)})  # type: ignore[arg-type]
    assert out == {"model=a, surface=search": [0.6 - 0.5, None]}
    view = SimpleNamespace(settings=settings(group_by=["surface"]))  # the default names model
    assert versus_control(view, {("home",): (0.5, 0.1)}) == {}  # type: ignore[arg-type]


def test_a_recorded_point_holds_the_difference_computed_from_the_queries() -> None:
    """Against a brute-force mean and standard error of the per-query AP@3 values."""
    s = settings(group_by=["model"])
    values = {"control": [], "cand": []}
    pipeline = Pipeline(s)
    patterns = {"control": [["a"], ["b"], ["a", "c"], ["c"]], "cand": [["b"], ["c"], ["b", "c"]]}
    ap = {
        ("a",): 1.0,
        ("b",): 0.5,
        ("c",): 1 / 3,
        ("a", "c"): (1 + 2 / 3) / 2,
        ("b", "c"): (1 / 2 + 2 / 3) / 2,
    }
    for model, hits_list in patterns.items():
        for i, hits in enumerate(hits_list):
            qid = f"{model}-{i}"
            pipeline.process(Impression(qid, T0 + i, ("a", "b", "c"), (model,)))
            for item in hits:
                pipeline.process(Engagement(qid, item, "click", T0 + i + 1, None))
            values[model].append(ap[tuple(hits)])
    pipeline.process(Impression("flush", T0 + 1900, ("a",), ("control",)))  # settles the rest
    history = History(every=0.0)
    history.record(view_of(pipeline))
    diff, se = history.points[-1]["vs_control"]["model=cand"]

    def se_of(xs: list[float]) -> float:
        return statistics.stdev(xs) / math.sqrt(len(xs))

    assert math.isclose(diff, statistics.mean(values["cand"]) - statistics.mean(values["control"]))
    assert math.isclose(se, math.sqrt(se_of(values["cand"]) ** 2 + se_of(values["control"]) ** 2))
    summary = history.summary(view_of(pipeline), "wall")
    assert summary["compared"] == ["model=cand"] and summary["control"] == "model=control"
