"""The command line as a user runs it: exit codes, messages without tracebacks, both formats."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.logs import random_log

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ("--impressions", "examples/impressions.jsonl", "--events", "examples/clicks.jsonl")


def streameval(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streameval", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_replay_shipped_example_json() -> None:
    out = streameval("replay", *EXAMPLE, "--events", "examples/purchases.jsonl", "--format", "json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report) == {"overall", "groups", "inputs", "detectors"}
    assert set(report["inputs"]) == {"records", "rejected", "unattributed", "duplicates"}
    assert {"queries", "queries_with_relevant", "map@10", "ndcg@10", "recall@10", "mrr@10"} <= set(
        report["overall"]
    )
    assert all(set(g["labels"]) == {"model", "surface"} for g in report["groups"])


def test_replay_takes_several_event_files_after_one_flag() -> None:
    both = ("--events", "examples/clicks.jsonl", "examples/purchases.jsonl", "--format", "json")
    out = streameval("replay", "--impressions", "examples/impressions.jsonl", *both)
    repeated = streameval("replay", *EXAMPLE, "--events", "examples/purchases.jsonl", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert out.stdout == repeated.stdout
    assert json.loads(out.stdout)["inputs"]["records"] > 0


def test_replay_with_workers_prints_the_report_of_one_process(tmp_path) -> None:
    imps, evs = random_log(random.Random(3), n_queries=400).write(tmp_path)
    args = ("replay", "--impressions", str(imps), "--events", str(evs), "--format", "json")
    alone, shared = streameval(*args, "--workers", "1"), streameval(*args, "--workers", "3")
    assert alone.returncode == 0 and shared.returncode == 0, alone.stderr + shared.stderr
    assert shared.stdout == alone.stdout and json.loads(shared.stdout)["inputs"]["records"] > 400


def test_replay_table(tmp_path) -> None:
    imps, evs = random_log(random.Random(1)).write(tmp_path)
    out = streameval("replay", "--impressions", str(imps), "--events", str(evs))
    assert out.returncode == 0, out.stderr
    assert "map@10" in out.stdout and "(all)" in out.stdout and "rejected:" in out.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--impressions", "nope.jsonl", "--events", "examples/clicks.jsonl"], "nope.jsonl"),
        (["--impressions", "examples", "--events", "examples/clicks.jsonl"], "examples"),
        (
            [
                "--impressions",
                "examples/impressions.jsonl",
                "--events",
                "examples/clicks.jsonl",
                "--ap-denominator",
                "x",
            ],
            "ap_denominator",
        ),
        (
            [
                "--impressions",
                "examples/impressions.jsonl",
                "--events",
                "examples/clicks.jsonl",
                "--config",
                "nope.toml",
            ],
            "nope.toml",
        ),
        ([*EXAMPLE, "--workers", "0"], "--workers"),
        ([*EXAMPLE, "--workers", "two"], "--workers"),
    ],
)
def test_errors_are_one_line_without_traceback(args, needle) -> None:
    out = streameval("replay", *args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_env_config_error_names_the_variable() -> None:
    import os

    out = streameval("replay", *EXAMPLE, env={**os.environ, "STREAMEVAL_WINDOWS": "forever"})
    assert out.returncode == 2 and "STREAMEVAL_WINDOWS" in out.stderr and "Traceback" not in out.stderr


def test_a_reader_that_goes_away_ends_replay_with_141_and_no_traceback() -> None:
    import os

    read, write = os.pipe()
    os.close(read)  # like `| head` having exited: every write to stdout fails
    try:
        out = subprocess.run(
            [sys.executable, "-m", "streameval", "replay", *EXAMPLE],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write)
    assert out.returncode == 141 and "Traceback" not in out.stderr, out.stderr


def test_progress_on_long_inputs(tmp_path) -> None:
    from io import StringIO

    from streameval.config import load_settings
    from streameval.replay import Progress, run_replay

    imps, evs = random_log(random.Random(2), n_queries=300).write(tmp_path)
    stream = StringIO()
    run_replay(load_settings(None, {}, {}), str(imps), [str(evs)], Progress(stream, every=0.0))
    assert "streameval replay: read" in stream.getvalue()
    assert "streameval replay: judging" in stream.getvalue()
    assert "streameval replay: scoring" in stream.getvalue()


@pytest.mark.parametrize("command", ["demo", "replay", "run", "simulate"])
def test_help_describes_every_flag_with_its_default(command: str) -> None:
    import argparse

    from streameval.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = action.option_strings[-1]
        assert action.help and len(action.help.split()) >= 2, f"{command} {flag}: no description"
        takes_value = action.nargs != 0
        if takes_value and not action.required and flag not in ("--config", "--out", "--start", "--duration"):
            assert "default:" in action.help or action.default is not None, f"{command} {flag}: no default"
    out = streameval(command, "--help")
    assert out.returncode == 0
    text = out.stdout
    assert "SPEC" not in text and "../" not in text
    if command in ("demo", "run"):
        assert "(default: 9464)" in text and "--horizon" in text
    if command == "replay":  # only the flags that apply: nothing of Kafka or HTTP
        assert "--bootstrap-servers" not in text and "--metrics-port" not in text
    if command == "simulate":
        assert "--horizon" not in text and "--out" in text and "--regress" in text


def test_version() -> None:
    out = streameval("--version")
    assert out.returncode == 0 and out.stdout.startswith("streameval ")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--out", "unused", "--duration", "1x"], "--duration"),
        (["demo", "--duration", "soon"], "--duration"),
        (["simulate", "--out", "unused", "--regress", "nope:0.5@1m"], "no model 'nope'"),
        (["simulate", "--out", "unused", "--start", "yesterday"], "--start"),
    ],
)
def test_simulation_flag_errors_are_one_line(args, needle) -> None:
    out = streameval(*args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
