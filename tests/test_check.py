"""`streameval check`: what a configuration makes of the first records of each input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ROOT / "examples" / "foreign"


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streameval", "check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_on_the_foreign_example_reports_each_input() -> None:
    run = check(
        "--config",
        str(FOREIGN / "streameval.toml"),
        "--impressions",
        str(FOREIGN / "impressions.jsonl"),
        "--events",
        str(FOREIGN / "events.jsonl"),
    )
    assert run.returncode == 1, run.stderr  # the example holds bad records on purpose
    out = run.stdout
    assert "impressions (" in out and "202 records read" in out and "accepted  200" in out
    assert "empty_items             1  e.g. line 51: results is an empty list" in out
    assert "not_json" in out and "line 91" in out
    assert "model     ranker-v1 (105), ranker-v2 (95)" in out
    assert "which look like milliseconds (ts_unit = 'ms')" in out
    assert "time      2026-01-01T00:00:00.395Z .. " in out
    assert 'mapped    {"query_id":"req-0000","ts":1767225600.395,"items":["sku-24",' in out
    assert "ignored   66 (VIEW 66)" in out
    assert "type      click (357), purchase (108)" in out
    assert "unknown_event_type      1  e.g. line 23: event type 'HOVER' has no grade" in out
    assert "3 records rejected" in out
    assert run.stderr == ""


def test_check_exits_0_when_nothing_is_rejected_and_json_has_the_same(tmp_path: Path) -> None:
    good = [
        line for line in (FOREIGN / "impressions.jsonl").read_bytes().splitlines() if b'"results":[{' in line
    ]
    path = tmp_path / "impressions.jsonl"
    path.write_bytes(b"\n".join(good) + b"\n")
    run = check("--config", str(FOREIGN / "streameval.toml"), "--impressions", str(path), "--format", "json")
    assert run.returncode == 0, run.stdout
    [report] = orjson.loads(run.stdout)
    assert report["read"] == report["accepted"] == len(good) and report["rejected"] == {}
    assert report["values"]["surface"] == {"search": 102, "home": 98}
    assert report["mapped"]["items"][:2] == ["sku-24", "sku-37"]  # ordered by pos


def test_check_names_the_path_a_broken_mapping_misses() -> None:
    run = check(
        "--config",
        str(FOREIGN / "streameval.toml"),
        "--impressions",
        str(FOREIGN / "impressions.jsonl"),
        "--input",
        '{impressions = {query_id = "request.uid", ts = "timestamp_ms", ts_unit = "ms", '
        'items = "results", item_id = "sku"}}',
        "--limit",
        "20",
    )
    assert run.returncode == 1
    assert "20 records read" in run.stdout
    assert "missing_field          20  e.g. line 1: required field 'request.uid' is missing" in run.stdout


def test_check_says_which_unit_the_times_look_like_when_the_unit_is_wrong() -> None:
    run = check(
        "--impressions",
        str(FOREIGN / "impressions.jsonl"),
        "--input",
        '{impressions = {query_id = "request.id", ts = "timestamp_ms", items = "results", item_id = "sku"}}',
    )
    assert run.returncode == 1
    assert "ts_out_of_range       200" in run.stdout
    assert (
        "look like milliseconds, but ts_unit is 's': set ts_unit = 'ms' in [input.impressions]" in run.stdout
    )


def test_check_with_a_bad_configuration_exits_2_naming_the_key() -> None:
    run = check(
        "--impressions", str(FOREIGN / "impressions.jsonl"), "--input", '{events = {types = {CLICK = "tap"}}}'
    )
    assert run.returncode == 2
    assert "input.events.types.CLICK" in run.stderr and "Traceback" not in run.stderr
    run = check("--impressions", str(FOREIGN / "nope.jsonl"))
    assert run.returncode == 2 and "nope.jsonl: cannot be read" in run.stderr
