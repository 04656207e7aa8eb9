"""Command line: flags -> Settings -> command. The only place that picks exit codes.

Exit codes: 0 success; 1 the daemon stopped but its final checkpoint did not commit; 2 bad
usage, configuration or input (the message names the problem, no traceback); 130 interrupted;
141 the reader of the output went away (``| head``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from streameval import __version__
from streameval.config import Settings, format_duration, load_settings
from streameval.errors import ConfigError, StreamevalError
from streameval.logsetup import configure as configure_logging

log = logging.getLogger(__name__)

KAFKA, INPUTS, DEFINITIONS, WINDOWS, HTTP = "Kafka", "inputs", "definitions", "windows and time", "HTTP"

#: config key -> (help group, one line). Every key is also a TOML key and STREAMEVAL_<KEY>.
FLAG_HELP: dict[str, tuple[str, str]] = {
    "bootstrap_servers": (KAFKA, "Kafka brokers, host:port[,host:port...]"),
    "group_id": (KAFKA, "consumer group; the state lives in the topic <group_id>-changelog"),
    "impressions_topic": (KAFKA, "topic of impressions (ranked lists served)"),
    "events_topics": (KAFKA, "an engagement topic (repeatable; replaces the list)"),
    "dead_letter_topic": (KAFKA, "topic that receives rejected records, with the reason in headers"),
    "commit_interval": (KAFKA, "time between checkpoints of state and offsets"),
    "shutdown_timeout": (KAFKA, "longest shutdown after SIGTERM/SIGINT, final checkpoint included"),
    "changelog_replication_factor": (KAFKA, "replication factor of a changelog topic created at start"),
    "metrics": (DEFINITIONS, "metrics as name@k; names: map, wmap, ndcg, recall, precision, mrr"),
    "ap_denominator": (DEFINITIONS, "AP denominator: min_g_k, g or hits"),
    "no_relevant": (DEFINITIONS, "a query with no relevant item: skip it, or count it as zero"),
    "grades": (DEFINITIONS, 'event type to grade, a TOML table, e.g. "{click = 1, purchase = 2}"'),
    "min_grade": (DEFINITIONS, "grade at which an item counts as relevant"),
    "ndcg_gain": (DEFINITIONS, "NDCG gain of a grade g: exp (2^g - 1) or linear (g)"),
    "horizon": (DEFINITIONS, "attribution horizon: events later than this after the impression do not count"),
    "horizons": (DEFINITIONS, 'per-type horizons, a TOML table, e.g. "{purchase = \\"24h\\"}"'),
    "unshown_items": (DEFINITIONS, "relevant items the list did not show: count (recall-like) or ignore"),
    "group_by": (DEFINITIONS, "impression fields that become labels, comma-separated"),
    "max_groups": (DEFINITIONS, "label cardinality cap; later groups fold into __other__"),
    "labels_allow": (
        DEFINITIONS,
        'glob patterns per label, a TOML table, e.g. "{model = [\\"control\\", \\"candidate-*\\"]}"; '
        "other values fold into __other__",
    ),
    "labels_max_values": (
        DEFINITIONS,
        'distinct values kept per label, a TOML table, e.g. "{surface = 50}"; later ones fold into __other__',
    ),
    "input": (
        INPUTS,
        "where the fields are in records of another shape: a TOML table, usually [input.impressions] "
        "and [input.events] in --config (README, Your logs)",
    ),
    "max_future": (
        INPUTS,
        "a record whose event time is further ahead of the clock than this is rejected (ts_out_of_range)",
    ),
    "windows": (WINDOWS, "sliding event-time windows, comma-separated"),
    "allowed_lateness": (WINDOWS, "how far the watermark trails the newest event time"),
    "orphan_ttl": (WINDOWS, "how long an event waits for its impression"),
    "metrics_port": (HTTP, "port of /metrics, /healthz, /readyz, / and /api/summary"),
    "metrics_host": (HTTP, "address the HTTP server binds"),
}
_DURATIONS = {"max_future", "horizon", "allowed_lateness", "orphan_ttl", "commit_interval"}
_DURATIONS.add("shutdown_timeout")
_GROUP_TITLES = {
    INPUTS: "inputs",
    KAFKA: "Kafka",
    DEFINITIONS: "definitions (README, Definitions)",
    WINDOWS: "windows and time (README, Time, settling and windows)",
    HTTP: "HTTP",
}
_DEFINITION_KEYS = [k for k, (group, _) in FLAG_HELP.items() if group == DEFINITIONS]
_WINDOW_KEYS = [k for k, (group, _) in FLAG_HELP.items() if group == WINDOWS]
_HTTP_KEYS = ["metrics_port", "metrics_host"]
_INPUT_KEYS = ["input", "max_future"]

#: What `demo` changes so that queries settle within seconds on its compressed clock.
DEMO_DEFAULTS: dict[str, Any] = {
    "horizon": "3m",
    "allowed_lateness": "10s",
    "orphan_ttl": "3m",
    "windows": ["10m", "1h"],
}


def _default_text(key: str, overrides: Mapping[str, Any]) -> str:
    if key in overrides:
        value = overrides[key]
        return ",".join(value) if isinstance(value, list) else str(value)
    value = getattr(Settings(), key)
    if key in _DURATIONS:
        return format_duration(value)
    if key == "windows":
        return ",".join(w.name for w in value)
    if key == "grades":
        return "{" + ", ".join(f"{k} = {v:g}" for k, v in value.items()) + "}"
    if key in ("horizons", "labels_allow", "labels_max_values"):
        return "none"
    if key == "input":
        return "the fields of README, Inputs"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _groups(parser: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    return {name: parser.add_argument_group(title) for name, title in _GROUP_TITLES.items()}


def _add_config_flags(
    groups: Mapping[str, argparse._ArgumentGroup],
    keys: Sequence[str],
    overrides: Mapping[str, Any] | None = None,
) -> None:
    """A flag for each config key in ``keys``, with its line and default, in its group."""
    overrides = overrides or {}
    for key in keys:
        group_name, text = FLAG_HELP[key]
        default = _default_text(key, overrides)
        if key == "events_topics":
            groups[group_name].add_argument(
                "--events-topic",
                dest="cfg_events_topics",
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
    """How this install runs its per-record modules (README, Performance: "A compiled install")."""
    from streameval import join

    return "pure Python" if (join.__file__ or "").endswith(".py") else "compiled with mypyc"


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
    _add_config_flags(groups, _DEFINITION_KEYS + _WINDOW_KEYS + _HTTP_KEYS, DEMO_DEFAULTS)

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
    _add_config_flags(groups, _INPUT_KEYS + _DEFINITION_KEYS)

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
    _add_config_flags(groups, [k for k in FLAG_HELP if FLAG_HELP[k][0] == KAFKA], {})
    groups[
        KAFKA
    ].description = "[kafka] table in --config: settings passed to the Kafka clients (security, ...)"
    _add_config_flags(groups, _INPUT_KEYS + _DEFINITION_KEYS + _WINDOW_KEYS + _HTTP_KEYS)

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
        help="event time of the first record, RFC 3339 or epoch seconds (default: now; with --fast, "
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
    _add_config_flags(groups, _INPUT_KEYS + ["bootstrap_servers", "impressions_topic", "events_topics"])
    _add_config_flags(groups, ["grades", "group_by", "labels_allow", "labels_max_values"])


def _check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from streameval.check import check_input, file_samples, format_report
    from streameval.decoding import Decoder

    settings = _settings(args)
    decoder = Decoder(settings)
    reports = []
    from_files = args.impressions is not None or args.events is not None
    if from_files:
        if settings.input.uses_kafka_timestamp:
            raise ConfigError(
                'input: ts = "@timestamp" takes the time of the Kafka record, which a file does not have; '
                "check the topics instead (leave out --impressions and --events)"
            )
        if args.impressions is not None:
            samples = file_samples(args.impressions, args.limit)
            topic = settings.impressions_topic
            reports.append(check_input(settings, "impressions", args.impressions, topic, samples, decoder))
        for path in args.events or []:
            topic = Path(path).stem
            samples = file_samples(path, args.limit)
            reports.append(check_input(settings, "events", path, topic, samples, decoder))
    else:
        from streameval.kafka.placement import Placement
        from streameval.kafka.sample import partition_count, topic_samples

        inputs = [("impressions", settings.impressions_topic)]
        inputs += [("events", topic) for topic in settings.events_topics]
        for kind, topic in inputs:
            samples = topic_samples(settings, topic, args.limit)
            placement = Placement(max(1, partition_count(settings, topic))).partition_of
            source = f"topic {topic}"
            reports.append(check_input(settings, kind, source, topic, samples, decoder, placement))
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
    from streameval.replay import build_report, format_table, run_replay

    settings = _settings(args)
    # the program exits after the report: its records are left for the end of the process
    keep = _LEFT_TO_EXIT if args.program else None
    pipeline = run_replay(settings, args.impressions, args.events, keep=keep, workers=args.workers)
    report = build_report(pipeline)
    if args.format == "json":
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(format_table(report, [str(m) for m in settings.metrics]) + "\n")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from streameval.simulate_io import simulate

    return simulate(_settings(args), args)


def _demo(args: argparse.Namespace) -> int:
    from streameval.demo import demo

    return demo(_settings(args, DEMO_DEFAULTS), args)


COMMANDS = {"replay": _replay, "check": _check, "run": _run, "simulate": _simulate, "demo": _demo}


#: what a command leaves for the end of the process to reclaim (replay's records)
_LEFT_TO_EXIT: list[object] = []


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; ``argv`` None means the process's own arguments (the program)."""
    args = _parser().parse_args(argv)
    args.program = argv is None
    configure_logging(args.verbose)
    try:
        code = COMMANDS[args.command](args)
        if args.program and _LEFT_TO_EXIT:
            # the program ends here: skip freeing, one by one, the millions of objects a replay
            # leaves (5-10% of its run), as the end of the process reclaims them at once
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
