"""Records in other shapes: the mapping ([input.*]), the event-time guard, label controls."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streameval.config import load_settings
from streameval.decoding import Decoder
from streameval.errors import ConfigError
from streameval.records import Ignored, Rejection
from streameval.replay import build_report, run_replay
from tests.logs import random_log

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
T0 = 1_700_000_000.0


def report_of(tmp: Path, impressions: list[bytes], events: list[bytes], config: dict[str, Any]) -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    imps, evs = tmp / "impressions.jsonl", tmp / "events.jsonl"
    imps.write_bytes(b"\n".join(impressions) + b"\n")
    evs.write_bytes(b"\n".join(events) + b"\n")
    return build_report(run_replay(load_settings(None, {}, config), str(imps), [str(evs)], workers=1))


def numbers(report: dict) -> dict:
    """What must not depend on the shape: every metric, and what was rejected or unattributed."""
    inputs = {k: v for k, v in report["inputs"].items() if k not in ("records", "ignored")}
    return {"overall": report["overall"], "groups": report["groups"], "inputs": inputs}


def test_the_foreign_example_scores_as_the_example_in_streamevals_shape() -> None:
    native = load_settings(str(EXAMPLES / "streameval.toml"), {}, {})
    foreign = load_settings(str(EXAMPLES / "foreign" / "streameval.toml"), {}, {})
    a = build_report(
        run_replay(
            native,
            str(EXAMPLES / "impressions.jsonl"),
            [str(EXAMPLES / "clicks.jsonl"), str(EXAMPLES / "purchases.jsonl")],
        )
    )
    b = build_report(
        run_replay(
            foreign,
            str(EXAMPLES / "foreign" / "impressions.jsonl"),
            [str(EXAMPLES / "foreign" / "events.jsonl")],
        )
    )
    assert numbers(a) == numbers(b)
    assert b["inputs"]["ignored"] == {"VIEW": 66}
    assert b["inputs"]["records"] == a["inputs"]["records"] + 66


# --- the mapping's configuration -----------------------------------------------------------------

BAD_MAPPINGS = [
    ({"impressions": {"query_id": 3}}, "input.impressions.query_id"),
    ({"impressions": {"query_id": "request..id"}}, "input.impressions.query_id"),
    ({"impressions": {"ts_unit": "sec"}}, "input.impressions.ts_unit"),
    ({"impressions": {"item_rank": "pos"}}, "input.impressions.item_rank"),
    ({"impressions": {"labels": {"colour": "c"}}}, "input.impressions.labels.colour"),
    ({"impressions": {"labels": {"model": 1}}}, "input.impressions.labels.model"),
    ({"impressions": {"labels": "model"}}, "input.impressions.labels"),
    ({"impressions": {"qid": "x"}}, "input.impressions.qid"),
    ({"events": {"types": {"CLICK": "tap"}}}, "input.events.types.CLICK"),
    ({"events": {"ignore_types": "VIEW"}}, "input.events.ignore_types"),
    ({"events": {"ignore_types": ["click"]}}, "input.events.ignore_types"),
    ({"events": {"ts_unit": "minutes"}}, "input.events.ts_unit"),
    ({"events": {"item": ["a"]}}, "input.events.item"),
    ({"clicks": {}}, "input.clicks"),
    ("request.id", "input"),
]


@pytest.mark.parametrize(("mapping", "key"), BAD_MAPPINGS, ids=[k for _, k in BAD_MAPPINGS])
def test_an_impossible_mapping_is_a_config_error_naming_its_key(mapping, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {}, {"input": mapping})
    assert key in str(caught.value)


def test_a_bad_mapping_in_a_file_stops_the_command_with_exit_2(tmp_path: Path) -> None:
    from streameval.cli import main

    config = tmp_path / "c.toml"
    config.write_text('[input.impressions]\nts_unit = "sec"\n')
    args = ["--config", str(config), "--impressions", str(EXAMPLES / "impressions.jsonl")]
    assert main(["replay", *args, "--events", str(EXAMPLES / "clicks.jsonl")]) == 2
    assert main(["check", *args]) == 2


def test_labels_controls_name_group_by_labels() -> None:
    with pytest.raises(ConfigError, match="labels_allow.*'colour'"):
        load_settings(None, {}, {"labels_allow": {"colour": ["red"]}})
    with pytest.raises(ConfigError, match="labels_max_values.*surface"):
        load_settings(None, {}, {"labels_max_values": {"surface": 0}})
    with pytest.raises(ConfigError, match="labels_allow.*glob"):
        load_settings(None, {}, {"labels_allow": {"model": [1]}})


# --- records under a mapping ---------------------------------------------------------------------

MAPPING = {
    "impressions": {
        "query_id": "request.id",
        "ts": "timestamp_ms",
        "ts_unit": "ms",
        "items": "results",
        "item_id": "sku",
        "item_rank": "pos",
        "labels": {"model": "ranker.name", "surface": "page"},
    },
    "events": {
        "query_id": "rid",
        "item": "product.id",
        "type": "kind",
        "types": {"CLICK": "click", "ORDER": "purchase"},
        "ignore_types": ["VIEW"],
        "ts": "time_ms",
        "ts_unit": "ms",
        "event_id": "eid",
    },
}
IMP = {
    "request": {"id": "r1"},
    "timestamp_ms": 1_700_000_000_123,
    "ranker": {"name": "v2"},
    "page": "home",
    "results": [{"pos": 2, "sku": "b"}, {"pos": 1, "sku": "a"}, {"pos": 3, "sku": 7}],
}
EV = {"rid": "r1", "product": {"id": "a"}, "kind": "ORDER", "time_ms": 1_700_000_000_500, "eid": 42}


def decoder(**config: Any) -> Decoder:
    return Decoder(load_settings(None, {}, {"input": MAPPING, **config}), clock=lambda: T0)


def test_a_mapped_impression_and_event_decode_to_streamevals_fields() -> None:
    d = decoder()
    assert d.impression(orjson.dumps(IMP)) == ("r1", 1_700_000_000.123, ["a", "b", "7"], ("v2", "home"))
    assert d.event(orjson.dumps(EV), "clicks") == ("r1", "a", "purchase", 1_700_000_000.5, "42")
    assert d.event(orjson.dumps({"kind": "VIEW"}), "clicks") == Ignored("VIEW")
    # an absent label is unknown; numbers and booleans become strings
    imp = dict(IMP, ranker={"name": 3}, page=True)
    assert d.impression(orjson.dumps(imp))[3] == ("3", "true")  # type: ignore[index]
    assert d.impression(orjson.dumps({k: v for k, v in IMP.items() if k != "page"}))[3] == ("v2", "unknown")  # type: ignore[index]


def test_mapped_times_as_digit_strings_and_integer_query_ids_are_read() -> None:
    imp = dict(IMP, request={"id": 12}, timestamp_ms="1700000000123")
    assert decoder().impression(orjson.dumps(imp))[:2] == ("12", 1_700_000_000.123)  # type: ignore[index]
    imp = dict(IMP, timestamp_ms="2023-11-14T22:13:20.123Z")  # RFC 3339, whatever the unit
    assert decoder().impression(orjson.dumps(imp))[1] == 1_700_000_000.123  # type: ignore[index]
    ids_only = {k: v for k, v in MAPPING["impressions"].items() if k not in ("item_id", "item_rank")}
    got = decoder(input={"impressions": ids_only}).impression(orjson.dumps(IMP))
    assert isinstance(got, Rejection) and "set item_id" in got.detail


def test_a_label_that_is_a_number_is_a_string_in_streamevals_shape_too() -> None:
    d = Decoder(load_settings(None, {}, {}), clock=None)
    raw = orjson.dumps({"query_id": "q", "ts": 5, "items": ["a"], "model": 3, "surface": False})
    assert d.impression(raw) == ("q", 5.0, ("a",), ("3", "false"))


def _with(obj: dict, path: str, value: Any) -> dict:
    """``obj`` with the value at a dotted path replaced (``...`` deletes it)."""
    obj = orjson.loads(orjson.dumps(obj))
    *parents, last = path.split(".")
    here = obj
    for key in parents:
        here = here[int(key)] if isinstance(here, list) else here[key]
    if value is ...:
        del here[int(last) if isinstance(here, list) else last]
    elif isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return obj


BAD_IMPRESSIONS = [
    (_with(IMP, "request", ...), "missing_field", "'request.id' is missing"),
    (_with(IMP, "request", "r1"), "wrong_type", "request is str, not an object"),
    (_with(IMP, "request.id", 1.5), "wrong_type", "request.id is float"),
    (_with(IMP, "timestamp_ms", ...), "missing_field", "'timestamp_ms' is missing"),
    (_with(IMP, "timestamp_ms", "soon"), "wrong_type", "timestamp_ms 'soon' is not an RFC 3339 time"),
    (_with(IMP, "timestamp_ms", True), "wrong_type", "timestamp_ms is a boolean"),
    (_with(IMP, "timestamp_ms", "9" * 400), "wrong_type", "timestamp_ms is not a finite number"),
    (_with(IMP, "results", {"a": 1}), "wrong_type", "results is dict, not an array"),
    (_with(IMP, "results", []), "empty_items", "results is an empty list"),
    (_with(IMP, "results.1", "a"), "wrong_type", "results[1] is str, not an object"),
    (_with(IMP, "results.1.sku", ...), "missing_field", "'results[1].sku' is missing"),
    (_with(IMP, "results.1.sku", 1.5), "wrong_type", "results[1].sku is float"),
    (_with(IMP, "results.2.pos", ...), "missing_field", "'results[2].pos' is missing"),
    (_with(IMP, "results.2.pos", "3"), "wrong_type", "results[2].pos is str, not a number"),
    (_with(IMP, "ranker.name", ["v2"]), "wrong_type", "ranker.name is list"),
    (_with(IMP, "timestamp_ms", 1_700_000_000_123_000), "ts_out_of_range", "max_future"),
]


@pytest.mark.parametrize(
    ("record", "reason", "detail"), BAD_IMPRESSIONS, ids=[d for _, _, d in BAD_IMPRESSIONS]
)
def test_a_bad_mapped_impression_is_rejected_with_its_reason_and_path(record, reason, detail) -> None:
    got = decoder().impression(orjson.dumps(record))
    assert isinstance(got, Rejection)
    assert (got.reason, detail in got.detail) == (reason, True), got.detail


BAD_EVENTS = [
    (_with(EV, "rid", ...), "missing_field", "'rid' is missing"),
    (_with(EV, "product", ...), "missing_field", "'product.id' is missing"),
    (_with(EV, "product", 5), "wrong_type", "product is int, not an object"),
    (_with(EV, "kind", ...), "missing_field", "'kind' is missing"),
    (_with(EV, "kind", "HOVER"), "unknown_event_type", "'HOVER' has no grade"),
    (_with(EV, "kind", ["CLICK"]), "wrong_type", "kind is list"),
    (_with(EV, "time_ms", ...), "missing_field", "'time_ms' is missing"),
    (_with(EV, "time_ms", {"at": 1}), "wrong_type", "time_ms is dict"),
    (_with(EV, "eid", {"x": 1}), "wrong_type", "eid is dict"),
    (_with(EV, "time_ms", 1_700_000_000_500_000), "ts_out_of_range", "max_future"),
]


@pytest.mark.parametrize(("record", "reason", "detail"), BAD_EVENTS, ids=[d for _, _, d in BAD_EVENTS])
def test_a_bad_mapped_event_is_rejected_with_its_reason_and_path(record, reason, detail) -> None:
    got = decoder().event(orjson.dumps(record), "clicks")
    assert isinstance(got, Rejection)
    assert (got.reason, detail in got.detail) == (reason, True), got.detail


def test_an_event_of_an_ignored_type_is_ignored_whatever_else_it_lacks() -> None:
    assert decoder().event(b'{"kind": "VIEW", "time_ms": "never"}', "clicks") == Ignored("VIEW")
    assert isinstance(decoder().event(b"[1]", "clicks"), Rejection)


def test_the_kafka_timestamp_gives_the_time_with_at_timestamp() -> None:
    d = decoder(input={"impressions": {"ts": "@timestamp"}, "events": {"ts": "@timestamp"}})
    raw = orjson.dumps({"query_id": "q", "items": ["a"]})
    assert d.wants_kafka_ts
    assert d.impression(raw, kafka_ts=T0 - 1) == ("q", T0 - 1, ["a"], ("unknown", "unknown"))
    missing = d.impression(raw, kafka_ts=None)
    assert isinstance(missing, Rejection) and missing.reason == "missing_field"
    ev = orjson.dumps({"query_id": "q", "item": "a", "type": "click"})
    assert d.event(ev, "clicks", kafka_ts=T0) == ("q", "a", "click", T0, None)


def test_replay_refuses_the_kafka_timestamp(tmp_path: Path, capsys) -> None:
    from streameval.cli import main

    code = main(
        [
            "replay",
            "--impressions",
            str(EXAMPLES / "impressions.jsonl"),
            "--events",
            str(EXAMPLES / "clicks.jsonl"),
            "--input",
            '{impressions = {ts = "@timestamp"}}',
        ]
    )
    assert code == 2
    assert '"@timestamp"' in capsys.readouterr().err


# --- the event-time guard ------------------------------------------------------------------------


def test_the_guard_rejects_times_further_ahead_than_max_future_and_nothing_else() -> None:
    d = Decoder(load_settings(None, {}, {"max_future": "5m"}), clock=lambda: T0)

    def imp(ts: float) -> bytes:
        return orjson.dumps({"query_id": "q", "ts": ts, "items": ["a"]})

    assert not isinstance(d.impression(imp(T0 + 300)), Rejection)
    assert not isinstance(d.impression(imp(T0 - 86400 * 365)), Rejection)  # the past is for the join
    ahead = d.impression(imp(T0 + 300.001))
    assert isinstance(ahead, Rejection) and ahead.reason == "ts_out_of_range"
    ms = d.impression(imp(T0 * 1000))
    assert isinstance(ms, Rejection) and ms.reason == "ts_out_of_range" and "ts_unit" in ms.detail
    ev = orjson.dumps({"query_id": "q", "item": "a", "type": "click", "ts": T0 * 1000})
    got = d.event(ev, "clicks")
    assert isinstance(got, Rejection) and got.reason == "ts_out_of_range"


def test_replay_rejects_millisecond_times_and_the_rest_scores_as_without_them(tmp_path: Path) -> None:
    log = random_log(random.Random(3), n_queries=50, t0=T0, bad=False)
    half = len(log.impressions) // 2
    wrong = [
        orjson.dumps(dict(orjson.loads(raw), ts=orjson.loads(raw)["ts"] * 1000))
        for raw in log.impressions[:3]
    ]
    wrong = [orjson.dumps(dict(orjson.loads(w), query_id=f"ms{i}")) for i, w in enumerate(wrong)]
    mixed = log.impressions[:half] + wrong + log.impressions[half:]
    with_ms = report_of(tmp_path / "a", mixed, log.events, {})
    without = report_of(tmp_path / "b", log.impressions, log.events, {})
    assert with_ms["inputs"]["rejected"] == {"ts_out_of_range": 3}
    assert with_ms["overall"] == without["overall"] and with_ms["groups"] == without["groups"]


# --- label controls ------------------------------------------------------------------------------


def test_labels_allow_and_max_values_fold_values_into_other(tmp_path: Path) -> None:
    imps = [
        orjson.dumps({"query_id": f"q{i}", "ts": T0 + i, "items": ["a"], "model": m, "surface": s})
        for i, (m, s) in enumerate(
            [
                ("control", "home"),
                ("candidate-1", "search"),
                ("contrl", "home"),
                ("candidate-2", "mail"),
                ("x", "app"),
            ]
        )
    ]
    evs = [
        orjson.dumps({"query_id": f"q{i}", "item": "a", "type": "click", "ts": T0 + i + 1}) for i in range(5)
    ]
    config = {"labels_allow": {"model": ["control", "candidate-*"]}, "labels_max_values": {"surface": 2}}
    groups = {
        tuple(g["labels"].values()): g["queries"] for g in report_of(tmp_path, imps, evs, config)["groups"]
    }
    assert groups == {
        ("control", "home"): 1,
        ("candidate-1", "search"): 1,
        ("__other__", "home"): 1,
        ("candidate-2", "__other__"): 1,
        ("__other__", "__other__"): 1,
    }


# --- any record, rewritten through any mapping, scores the same ----------------------------------

_paths = st.lists(st.sampled_from(["a", "b", "rec", "x"]), min_size=0, max_size=2)


@st.composite
def mappings(draw) -> dict[str, Any]:
    def path(name: str) -> str:
        return ".".join([*draw(_paths), draw(st.sampled_from([name, f"{name}_", "v"]))])

    units = st.sampled_from(["s", "ms", "us", "ns"])
    imp = {
        "query_id": path("id"),
        "ts": path("t"),
        "ts_unit": draw(units),
        "items": path("list"),
        "labels": {"model": path("m"), "surface": path("s")},
    }
    shape = draw(st.sampled_from(["ids", "objects", "ranked"]))
    if shape != "ids":
        imp["item_id"] = draw(st.sampled_from(["id", "p.id"]))
    if shape == "ranked":
        imp["item_rank"] = draw(st.sampled_from(["rank", "p.rank"]))
    ev = {
        "query_id": path("q"),
        "item": path("item"),
        "type": path("kind"),
        "types": {"C": "click", "P": "purchase"},
        "ignore_types": ["V"],
        "ts": path("time"),
        "ts_unit": draw(units),
        "event_id": path("eid"),
    }
    _distinct(imp, ["query_id", "ts", "items", ("labels", "model"), ("labels", "surface")])
    _distinct(ev, ["query_id", "item", "type", "ts", "event_id"])
    return {"impressions": imp, "events": ev}


def _distinct(table: dict[str, Any], keys: list) -> None:
    """No path of a mapping may be a prefix of another (they would overwrite each other)."""
    seen: list[str] = []
    for key in keys:
        holder, name = (table[key[0]], key[1]) if isinstance(key, tuple) else (table, key)
        path = holder[name]
        while any(path == s or path.startswith(s + ".") or s.startswith(path + ".") for s in seen):
            path = f"{path}{len(seen)}"
        holder[name] = path
        seen.append(path)


def _put(obj: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[last] = value


_UNITS = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}


def _time(ts: float, unit: str) -> float | int:
    """``ts`` (whole milliseconds, as the logs hold them) in ``unit``: exact integers but for seconds."""
    return ts if unit == "s" else round(ts * 1000) * (_UNITS[unit] // 1000)


def rewrite(log, mapping: dict[str, Any], rng: random.Random) -> tuple[list[bytes], list[bytes]]:
    m, e = mapping["impressions"], mapping["events"]
    imps = []
    for r in log.valid_impressions:
        out: dict[str, Any] = {}
        _put(out, m["query_id"], r["query_id"])
        _put(out, m["ts"], _time(r["ts"], m["ts_unit"]))
        items: list[Any] = list(r["items"])
        if "item_id" in m:
            objects = []
            for rank, item in enumerate(items, start=1):
                element: dict[str, Any] = {}
                _put(element, m["item_id"], item)
                if "item_rank" in m:
                    _put(element, m["item_rank"], rank * 10)
                objects.append(element)
            if "item_rank" in m:
                rng.shuffle(objects)
            items = objects
        _put(out, m["items"], items)
        for label in ("model", "surface"):
            if label in r:
                _put(out, m["labels"][label], r[label])
        imps.append(orjson.dumps(out))
    raw_types = {"click": "C", "purchase": "P"}
    evs = []
    for r in log.valid_events:
        out = {}
        _put(out, e["query_id"], r["query_id"])
        _put(out, e["item"], r["item"])
        _put(out, e["type"], raw_types[r["type"]])
        _put(out, e["ts"], _time(r["ts"], e["ts_unit"]))
        if "event_id" in r:
            _put(out, e["event_id"], r["event_id"])
        evs.append(orjson.dumps(out))
        if rng.random() < 0.1:  # another kind of event on the same stream
            view: dict[str, Any] = {}
            _put(view, e["type"], "V")
            evs.append(orjson.dumps(view))
    return imps, evs


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mapping=mappings(), seed=st.integers(0, 10**6))
def test_any_record_rewritten_through_any_mapping_scores_the_same(tmp_path: Path, mapping, seed: int) -> None:
    rng = random.Random(seed)
    log = random_log(rng, n_queries=25, t0=T0, bad=False)
    native = report_of(tmp_path / f"n{seed}", log.impressions, log.events, {"horizons": {"purchase": "2h"}})
    imps, evs = rewrite(log, mapping, rng)
    mapped = report_of(tmp_path / f"m{seed}", imps, evs, {"horizons": {"purchase": "2h"}, "input": mapping})
    assert native["overall"]["queries"] > 0 and native["inputs"]["unattributed"]
    assert numbers(mapped) == numbers(native)
    assert mapped["inputs"]["records"] == native["inputs"]["records"] + sum(
        mapped["inputs"]["ignored"].values()
    )


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
    | st.sampled_from(["1700000000123", "2023-11-14T22:13:20Z", "CLICK", "VIEW", "a"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "sku", "pos", "name", "request", "results", "x"]), children, max_size=4
        )
    ),
    max_leaves=20,
)
_keys = ["request", "timestamp_ms", "ranker", "page", "results", "rid", "product", "kind", "time_ms", "eid"]


@hsettings(max_examples=300, deadline=None)
@given(record=st.dictionaries(st.sampled_from(_keys), _json, max_size=8))
def test_no_record_makes_a_mapped_decoder_raise(record: dict) -> None:
    raw = orjson.dumps(record)
    d = decoder()
    assert isinstance(d.impression(raw), tuple | Rejection)
    assert isinstance(d.event(raw, "clicks"), tuple | Rejection | Ignored)
