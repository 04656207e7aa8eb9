"""Command line: flags -> Settings -> command. The only place that picks exit codes.

Exit codes: 0 success; 2 bad usage, configuration or input (the message names the problem,
no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from streameval.config import KEYS, Settings, load_settings
from streameval.errors import StreamevalError
from streameval.logsetup import configure as configure_logging

log = logging.getLogger(__name__)

#: Config keys that get no generic flag (tables; or a flag of their own).
_NO_FLAG = {"kafka", "grades", "horizons", "events_topics"}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="TOML config file (every key: README, section Configuration)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
    )
    group = parser.add_argument_group(
        "configuration", "each flag overrides STREAMEVAL_<KEY> and the config file"
    )
    for key in KEYS:
        if key in _NO_FLAG:
            continue
        group.add_argument(f"--{key.replace('_', '-')}", dest=f"cfg_{key}", metavar="VALUE")
    group.add_argument(
        "--events-topic",
        dest="cfg_events_topics",
        action="append",
        metavar="TOPIC",
        help="an engagement topic (repeatable; replaces events_topics)",
    )
    group.add_argument(
        "--grades", dest="cfg_grades", metavar="TABLE", help='e.g. "{click = 1, purchase = 2}"'
    )
    group.add_argument(
        "--horizons", dest="cfg_horizons", metavar="TABLE", help='e.g. "{purchase = \\"24h\\"}"'
    )


def _settings(args: argparse.Namespace) -> Settings:
    flags: dict[str, Any] = {
        name[4:]: value for name, value in vars(args).items() if name.startswith("cfg_") and value is not None
    }
    return load_settings(args.config, os.environ, flags)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streameval",
        description="Streaming evaluation of rankings: exact MAP@k, NDCG@k, recall, MRR.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        help="run the pipeline over JSONL logs and print the final metrics",
        description="Merge JSONL logs in timestamp order, run the pipeline, settle everything, "
        "print the metrics of every query, pooled and per group.",
    )
    replay.add_argument("--impressions", required=True, metavar="FILE", help="impressions JSONL")
    replay.add_argument(
        "--events", required=True, action="append", metavar="FILE", help="events JSONL (repeatable)"
    )
    replay.add_argument("--format", choices=("table", "json"), default="table")
    _add_config_flags(replay)

    run = commands.add_parser(
        "run",
        help="the daemon: consume Kafka, serve /metrics",
        description="Consume impressions and engagement events from Kafka, keep the metrics up to date "
        "and serve them on /metrics, /healthz, /readyz and /. SIGTERM or SIGINT stops it cleanly.",
    )
    _add_config_flags(run)
    return parser


def _run(args: argparse.Namespace) -> int:
    from streameval.daemon import run

    return run(_settings(args))


def _replay(args: argparse.Namespace) -> int:
    from streameval.replay import build_report, format_table, run_replay

    settings = _settings(args)
    pipeline = run_replay(settings, args.impressions, args.events)
    report = build_report(pipeline)
    if args.format == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(format_table(report, [str(m) for m in settings.metrics]) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "run":
            return _run(args)
    except StreamevalError as exc:
        sys.stderr.write(f"streameval: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("streameval: interrupted\n")
        return 130
    return 2
