"""Every worked example of shared/reference, through the public replay pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference"
SEED = json.loads((FIXTURES / "seed_cases.json").read_text())
ANCHOR = json.loads((FIXTURES / "anchor_cases.json").read_text())
T0 = 1_700_000_000


@pytest.mark.parametrize("name", ["seed_cases.json", "anchor_cases.json"])
def test_fixture_copies_match_shared(name: str) -> None:
    if not (SHARED / name).exists():
        pytest.skip("shared/reference is not beside this checkout")
    assert json.loads((SHARED / name).read_text()) == json.loads((FIXTURES / name).read_text())


def query_records(qid: str, n: int, relevant_ranks, unshown: int, ts: float = T0, grade_type="click"):
    items = [f"{qid}-d{i}" for i in range(1, n + 1)]
    imp = {"query_id": qid, "ts": ts, "items": items, "model": "m"}
    events = [
        {"query_id": qid, "item": items[r - 1], "type": grade_type, "ts": ts + 1} for r in relevant_ranks
    ]
    events += [
        {"query_id": qid, "item": f"{qid}-u{i}", "type": grade_type, "ts": ts + 1} for i in range(unshown)
    ]
    return imp, events


@pytest.mark.parametrize("case", SEED["ap_cases"], ids=lambda c: c["source"][:60])
def test_seed_ap_cases(replay, case) -> None:
    imp, events = query_records("q", case["n"], case["relevant_ranks"], case["unshown_relevant"])
    metric = f"map@{case['k']}"
    report = replay([imp], events, metrics=[metric], ap_denominator=case["denominator"])
    assert report["overall"][metric] == pytest.approx(case["expected_ap"], abs=1e-9)
    assert report["overall"]["queries_with_relevant"] == 1


@pytest.mark.parametrize("case", SEED["map_cases"], ids=lambda c: c["source"][:60])
def test_seed_map_cases(replay, case) -> None:
    imps, events = [], []
    for i, q in enumerate(case["queries"]):
        imp, evs = query_records(
            f"q{i}", q["n"], q["relevant_ranks"], q.get("unshown_relevant", 0), ts=T0 + i
        )
        imps.append(imp)
        events += evs
    metric = f"map@{case['k']}"
    report = replay(imps, events, metrics=[metric], ap_denominator=case["denominator"])
    assert report["overall"][metric] == pytest.approx(case["expected_map"], abs=1e-9)
    assert report["overall"]["queries"] == len(case["queries"])


def test_anchor_ap_denominators(replay) -> None:
    case = ANCHOR["cases"][0]
    imp, events = query_records("q", case["n"], case["relevant_ranks"], case["unshown_relevant"])
    metric = f"map@{case['k']}"
    for label, expected in case["expected"].items():
        denominator = label.split("=")[1].split()[0]
        report = replay([imp], events, metrics=[metric], ap_denominator=denominator)
        assert report["overall"][metric] == pytest.approx(expected, abs=1e-9), label


def test_anchor_graded_ndcg(replay) -> None:
    case = ANCHOR["cases"][1]
    k = case["k"]
    items = [f"d{i}" for i in range(1, len(case["grades_by_rank"]) + 1)]
    imp = {"query_id": "q", "ts": T0, "items": items}
    grades = {"g1": 1, "g2": 2, "g3": 3}
    events = [
        {"query_id": "q", "item": item, "type": f"g{g}", "ts": T0 + 1}
        for item, g in zip(items, case["grades_by_rank"], strict=True)
        if g > 0
    ]
    events += [
        {"query_id": "q", "item": f"u{i}", "type": f"g{g}", "ts": T0 + 1}
        for i, g in enumerate(case["unshown_grades"])
    ]
    for label, expected in case["expected"].items():
        gain = label.split("=")[1].split()[0]
        report = replay([imp], events, metrics=[f"ndcg@{k}"], ndcg_gain=gain, grades=grades)
        assert report["overall"][f"ndcg@{k}"] == pytest.approx(expected, abs=1e-9), label


def test_anchor_duplicate_item(replay) -> None:
    case = ANCHOR["cases"][2]
    imp = {"query_id": "q", "ts": T0, "items": case["items"]}
    events = [{"query_id": "q", "item": item, "type": "click", "ts": T0 + 1} for item in case["relevant"]]
    metric = f"map@{case['k']}"
    for label, expected in case["expected"].items():
        denominator = label.split("=")[1].split()[0]
        report = replay([imp], events, metrics=[metric], ap_denominator=denominator)
        assert report["overall"][metric] == pytest.approx(expected, abs=1e-9)


def test_anchor_binary_ndcg(replay) -> None:
    case = ANCHOR["cases"][3]
    imp, events = query_records("q", case["n"], case["relevant_ranks"], case["unshown_relevant"])
    metric = f"ndcg@{case['k']}"
    for gain in ("exp", "linear"):  # binary grades: both gains agree
        report = replay([imp], events, metrics=[metric], ndcg_gain=gain)
        assert report["overall"][metric] == pytest.approx(case["expected"]["ndcg"], abs=case["tolerance"])


def test_every_case_is_covered() -> None:
    assert len(ANCHOR["cases"]) == 4, "a new anchor case needs a test here"
    assert len(SEED) == 3, "a new kind of seed case needs a test here"
