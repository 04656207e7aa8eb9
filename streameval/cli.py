"""Command line: flags -> Settings -> command. The only place that picks exit codes.

Exit codes: 0 success; 1 the daemon stopped but its final checkpoint did not commit; 2 bad
usage, configuration or input (the message names the problem, no traceback); 130 interrupted;
141 the reader of the output went away (``| head``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from streameval import __version__, collector
from streameval.config import KEYS, Settings, default_text, load_settings
from streameval.errors import StreamevalError
from streameval.keys import DEFINITIONS, HTTP, INPUTS, KAFKA, WINDOWS
from streameval.logsetup import configure as configure_logging

log = logging.getLogger(__name__)

_GROUP_TITLES = {
    INPUTS: "inputs",
    KAFKA: "Kafka",
    DEFINITIONS: "definitions (README, Definitions)",
    WINDOWS: "windows and time (README, Time, settling and windows)",
    HTTP: "HTTP",
}


def _keys_of(*groups: str) -> list[str]:
    """The configuration keys of these help groups, in the README's order."""
    return [k for k, description in KEYS.items() if description.group in groups and description.flag]


#: What `demo` changes so that queries settle within seconds on its compressed clock.
DEMO_DEFAULTS: dict[str, Any] = {
    "horizon": "3m",
    "allowed_lateness": "10s",
    "orphan_ttl": "3m",
    "windows": ["10m", "1h"],
}


def _groups(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    return {name: parser.add_argument_group(title) for name, title in _GROUP_TITLES.items()}


def _add_config_flags(
    groups: Mapping[str, argparse._ArgumentGroup],
    keys: Sequence[str],
    overrides: Mapping[str, Any] | None = None,
) -> None:
    """A flag for each config key in ``keys``, with its line and default, in its group."""
    for key in keys:
        group_name, text = KEYS[key].group, KEYS[key].help
        default = default_text(key, overrides)
        each = KEYS[key].each
        if each is not None:
            groups[group_name].add_argument(
                each,
                dest=f"cfg_{key}",
                action="append",
                metavar="TOPIC",
                help=f"{text} (default: {default})",
            )
            continue
        groups[group_name].add_argument(
            f"--{key.replace('_', '-')}",
            dest=f"cfg_{key}",
            metavar="VALUE",
            help=f"{text} (default: {default})",
        )


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file with any of the settings below (flag > STREAMEVAL_<KEY> variable > file)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
    )


def _settings(args: argparse.Namespace, defaults: Mapping[str, Any] | None = None) -> Settings:
    flags: dict[str, Any] = {
        name[4:]: value for name, value in vars(args).items() if name.startswith("cfg_") and value is not None
    }
    return load_settings(args.config, os.environ, flags, defaults)


def _add_simulation_flags(group: argparse._ArgumentGroup, rate: float, regress_default: str | None) -> None:
    group.add_argument(
        "--seed", type=int, default=1, help="random seed: the same seed gives the same traffic (default: 1)"
    )
    group.add_argument(
        "--rate",
        type=float,
        default=rate,
        metavar="N",
        help=f"records per second of event time (default: {rate:g})",
    )
    group.add_argument(
        "--regress",
        action="append",
        metavar="MODEL:DROP@AT",
        help="from AT (a duration after the start, e.g. 10m) a share DROP of MODEL's lists miss every item "
        "the user wanted, so its MAP falls by about DROP; models: control, candidate-a, candidate-b"
        + (f" (default: {regress_default})" if regress_default else " (repeatable; default: none)"),
    )


def _build() -> str:
    """How this install runs its per-record work (README, Performance: compiled install, native core)."""
    from streameval import join, native

    modules = "pure Python" if (join.__file__ or "").endswith(".py") else "compiled with mypyc"
    return f"{modules}, {native.describe()}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streameval",
        description="Exact online evaluation of rankings: MAP@k, NDCG@k, recall, MRR and precision, "
        "per model and surface, over sliding event-time windows. Start with `streameval demo`.",
    )
    parser.add_argument("--version", action="version", version=f"streameval {__version__} ({_build()})")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="simulated traffic and a live page, no Kafka needed: the place to start",
        description="Simulate ranking traffic of three models on two surfaces, evaluate it in this "
        "process and serve the live page on http://localhost:9464/ (and /metrics, /healthz, /readyz, "
        "/api/summary). Event time runs fast (one simulated minute per second by default), so "
        "settled MAP appears within seconds; at 10 simulated minutes candidate-a's quality drops, "
        "and the page shows it. Stop with Ctrl-C or SIGTERM.",
    )
    _add_common(demo)
    groups = _groups(demo)
    sim = demo.add_argument_group("simulation")
    _add_simulation_flags(
        sim, rate=20.0, regress_default="candidate-a:0.4@10m; --regress none for no regression"
    )
    sim.add_argument(
        "--speed",
        type=float,
        default=60.0,
        metavar="X",
        help="simulated seconds per wall-clock second (default: 60)",
    )
    sim.add_argument(
        "--duration",
        metavar="DURATION",
        help="stop after this much simulated time, e.g. 2h (default: run until stopped)",
    )
    _add_config_flags(groups, _keys_of(DEFINITIONS, WINDOWS, HTTP), DEMO_DEFAULTS)

    replay = commands.add_parser(
        "replay",
        help="evaluate JSONL logs in one pass and print the final metrics",
        description="Evaluate JSONL logs as the daemon would on them merged in timestamp order, with "
        "every query settled at the end (the same definitions, joined in one batch), and print the "
        "metrics pooled and per group (README, streameval replay). A time more than max_future ahead "
        "of the moment the replay starts is rejected as ts_out_of_range, as the daemon would.",
    )
    _add_common(replay)
    groups = _groups(replay)
    groups[INPUTS].add_argument(
        "--impressions", required=True, metavar="FILE", help="impressions, one JSON object a line"
    )
    groups[INPUTS].add_argument(
        "--events",
        required=True,
        action="extend",
        nargs="+",
        metavar="FILE",
        help="engagement events JSONL: one or more files (--events a.jsonl b.jsonl, or --events repeated)",
    )
    groups[INPUTS].add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    groups[INPUTS].add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help="processes that share the work: each decodes a part of every file, then joins and scores "
        "a share of the queries; the report is the same with any N (default: the usable CPUs, at "
        "most 4, for 4 MiB of input or more; else 1)",
    )
    _add_config_flags(groups, _keys_of(INPUTS, DEFINITIONS))

    _add_check(commands)

    run = commands.add_parser(
        "run",
        help="the daemon: consume Kafka, keep the metrics exact, serve /metrics",
        description="Consume impressions and engagement events from Kafka, keep the metrics exact "
        "across restarts and rebalances (state in a changelog topic), and serve /metrics, /healthz, "
        "/readyz, / and /api/summary. SIGTERM or SIGINT stops it after a final checkpoint.",
    )
    _add_common(run)
    groups = _groups(run)
    _add_config_flags(groups, _keys_of(KAFKA))
    groups[
        KAFKA
    ].description = "[kafka] table in --config: settings passed to the Kafka clients (security, ...)"
    _add_config_flags(groups, _keys_of(INPUTS, DEFINITIONS, WINDOWS, HTTP))

    simulate = commands.add_parser(
        "simulate",
        help="generate realistic ranking traffic into Kafka or JSONL files",
        description="Generate impressions, clicks and purchases of three models of different quality "
        "(position-biased clicks, purchases, a small share of bad, duplicate, late and orphan records), "
        "deterministic for a seed. Writes JSONL files with --out DIR (impressions.jsonl, clicks.jsonl, "
        "purchases.jsonl, for replay), else produces to Kafka keyed by query_id, creating the topics "
        "if missing, paced so event time follows the clock (or --fast).",
    )
    _add_common(simulate)
    groups = _groups(simulate)
    sim = simulate.add_argument_group("simulation")
    _add_simulation_flags(sim, rate=100.0, regress_default=None)
    sim.add_argument(
        "--duration", default="10m", metavar="DURATION", help="simulated time to generate (default: 10m)"
    )
    sim.add_argument(
        "--start",
        metavar="TIME",
        help="event time of the first record, RFC 3339 or epoch seconds (default: now; to Kafka with --fast, "
        "now minus --duration)",
    )
    sim.add_argument(
        "--no-late",
        action="store_true",
        help="leave out the clicks that arrive 10 minutes after their time (late for the daemon, "
        "but not for replay, which orders by time): then run and replay agree exactly",
    )
    groups[INPUTS].add_argument("--out", metavar="DIR", help="write JSONL files into DIR instead of Kafka")
    groups[KAFKA].add_argument(
        "--fast", action="store_true", help="produce as fast as possible instead of following the clock"
    )
    groups[KAFKA].add_argument(
        "--partitions", type=int, default=3, metavar="N", help="partitions of topics created (default: 3)"
    )
    _add_config_flags(groups, ["bootstrap_servers", "impressions_topic", "events_topics"])
    return parser


def _add_check(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="show what the configuration makes of the first records of each input",
        description="Read the first N records of each input -- the files given, or else the "
        "configured topics from their earliest offsets (no consumer group, nothing committed) -- "
        "decode them as the daemon would with the configuration, and print per input: records read, "
        "accepted, rejected by reason with one example each (the field or path that was missing or "
        "of the wrong type), ignored (ignore_types), the labels or event types found with their "
        "counts, the range of event times and the unit their numbers look like, and the first "
        "accepted record as streameval sees it; read from topics, also the records that are not in "
        "the partition murmur2 of their query_id gives (misrouted). Use it to write a mapping for "
        "logs in another shape ([input.impressions] / [input.events], README, Your logs). Exit "
        "status: 0 when nothing was rejected, 1 when something was, 2 for a bad configuration.",
    )
    _add_common(check)
    groups = _groups(check)
    groups[INPUTS].add_argument(
        "--impressions", metavar="FILE", help="impressions JSONL (default: the impressions topic)"
    )
    groups[INPUTS].add_argument(
        "--events",
        action="extend",
        nargs="+",
        metavar="FILE",
        help="engagement events JSONL, one or more files; each file's name (without .jsonl) is its "
        "topic, for events_topics' types (default: the topics)",
    )
    groups[INPUTS].add_argument(
        "--limit",
        type=_workers,
        default=1000,
        metavar="N",
        help="records to read from each file or topic (default: 1000)",
    )
    groups[INPUTS].add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    _add_config_flags(groups, _keys_of(INPUTS) + ["bootstrap_servers", "impressions_topic", "events_topics"])
    _add_config_flags(groups, ["grades", "group_by", "labels_allow", "labels_max_values"])


def _check(args: argparse.Namespace) -> int:
    from streameval.check import check_files, check_topics, format_report

    settings = _settings(args)
    if args.impressions is not None or args.events is not None:
        reports = check_files(settings, args.impressions, args.events or [], args.limit)
    else:
        reports = check_topics(settings, args.limit)
    if args.format == "json":
        text = orjson.dumps([r.as_dict() for r in reports], option=orjson.OPT_INDENT_2).decode()
        sys.stdout.write(text + "\n")
    else:
        sys.stdout.write(format_report(reports) + "\n")
    return 1 if any(r.rejected for r in reports) else 0


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return n


def _run(args: argparse.Namespace) -> int:
    from streameval.daemon import run

    return run(_settings(args))


def _replay(args: argparse.Namespace) -> int:
    from streameval.replay import build_report, format_table, replay

    settings = _settings(args)
    with collector.paused():  # until the records are kept for the exit (else scanned once more)
        pipeline, held = replay(settings, args.impressions, args.events, workers=args.workers)
        if args.program:  # the program exits after the report
            collector.keep_until_exit(held)
        del held
    report = build_report(pipeline)
    if args.format == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(format_table(report, [str(m) for m in settings.metrics]) + "\n")
    return 0


def _simulation(args: argparse.Namespace) -> Any:
    """The simulation's own flags, as the commands take them."""
    from streameval.simulate_io import SimulationOptions

    given = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(SimulationOptions) if hasattr(args, f.name)
    }
    if given.get("regress") is not None:
        given["regress"] = tuple(given["regress"])
    return SimulationOptions(**given)


def _simulate(args: argparse.Namespace) -> int:
    from streameval.simulate_io import simulate

    return simulate(_settings(args), _simulation(args))


def _demo(args: argparse.Namespace) -> int:
    from streameval.demo import demo

    return demo(_settings(args, DEMO_DEFAULTS), _simulation(args))


COMMANDS = {"replay": _replay, "check": _check, "run": _run, "simulate": _simulate, "demo": _demo}


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; ``argv`` None means the process's own arguments (the program)."""
    args = _parser().parse_args(argv)
    args.program = argv is None
    configure_logging(args.verbose)
    try:
        code = COMMANDS[args.command](args)
        if args.program and collector.kept_for_exit():
            # not freed one by one: the millions of objects a replay leaves go with the process
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            os._exit(code)
        return code
    except StreamevalError as exc:
        sys.stderr.write(f"streameval: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("streameval: interrupted\n")
        return 130
    except BrokenPipeError:
        # whoever read the output stopped (``| head``): nothing to report, no traceback; what
        # is left in the buffer goes nowhere instead of failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
