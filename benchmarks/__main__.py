"""``python -m benchmarks``: every performance figure of the README, as ratios measured in one run.

Generates its data with ``streameval simulate``, runs the seven figures and writes
``benchmarks/results.json`` and ``benchmarks/results.md`` (the table in the README comes from
there). Figures 2, 6 and 7 need a broker (``deploy/kafka/local.sh start``); without one they are
reported as not run. Figure 7 (the same job written with Quix Streams) and row 2c (a bare
confluent-kafka consumer) need the bench extras, and are reported as not run without them.
Each figure is a ratio against a floor measured in the same run, so it compares across
machines; absolute times are in the JSON for reference. Nothing here asserts.

    pip install -e ".[bench]"          # pandas and ranx (figure 5), quixstreams (figure 7, row 2c)
    deploy/kafka/local.sh start        # for figures 2, 6 and 7
    python -m benchmarks               # 11-25 minutes on 2 cores (the last runs)
    python -m benchmarks --scale 0.1   # a quick look (smaller data, same figures)
    python -m benchmarks --figures 2,6  # some of them (figure 7 runs with 2, 4 with 3)
    python -m benchmarks --scale 0.01 --rounds 1   # that it runs (tests/test_benchmarks.py and
                                                   # tests/integration/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.render import render
from benchmarks.steal import StealMeter

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
#: the figures --figures names, and those that run together
FIGURES = ("1", "2", "3", "4", "5", "6", "7")
TOGETHER = (("2", "7"), ("3", "4"))
#: results.json's keys of the figures, each present (a figure not run says why)
FIGURE_KEYS = (
    "1_replay",
    "1m_mapped_input",
    "2_daemon",
    "3_state_size",
    "4_memory",
    "5_batch_route",
    "6_freshness",
    "7_peer",
)
PY = sys.executable


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def timed(
    cmd: list[str], log: Any, stdout: Any = subprocess.DEVNULL, cwd: Path = ROOT
) -> tuple[float, float, bytes]:
    """Run ``cmd`` in ``cwd``; its wall time (s), peak resident memory (MB) and stdout."""
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=log)
    out = process.stdout.read() if process.stdout else b""
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {process.returncode}")
    return elapsed, usage.ru_maxrss / 1024, out


def machine() -> dict[str, Any]:
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_gb, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": {
            name: version(name)
            for name in (
                "streameval",
                "orjson",
                "kafka-python",
                "crc32c",
                "prometheus-client",
                "pandas",
                "ranx",
                "confluent-kafka",
                "quixstreams",
                # the native core (README, Performance): every figure runs with it where installed
                "streameval-native",
            )
        },
    }


def simulate_files(out: Path, scale: float, log: Any) -> list[Path]:
    duration = max(10, round(1000 * scale))
    say(
        f"data: streameval simulate --out {out} --rate 1200 --duration {duration}s (about {scale:g}M records)"
    )
    cmd = [PY, "-m", "streameval", "simulate", "--out", str(out), "--rate", "1200"]
    cmd += ["--duration", f"{duration}s", "--seed", "11", "--start", "2026-01-01T00:00:00Z"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=log)
    return [out / "impressions.jsonl", out / "clicks.jsonl", out / "purchases.jsonl"]


def replay_cmd(files: list[Path], *extra: str) -> list[str]:
    cmd = [PY, "-m", "streameval", "replay", "--impressions", str(files[0])]
    for path in files[1:]:
        cmd += ["--events", str(path)]
    return [*cmd, "--format", "json", *extra]


RUNS_OF_FIGURE_1 = 5


def compiled_build(scratch: Path, log: Any) -> Path | None:
    """The compiled install (``STREAMEVAL_MYPYC=1 pip install``, ``compiled.py``) in a directory
    of its own, for figures 1' and 2'; None when it cannot be built (no C compiler)."""
    from benchmarks import compiled

    try:
        build = compiled.build(scratch / "compiled", log)
    except RuntimeError as exc:
        say(f"no compiled build ({exc}): figures 1' and 2' left out")
        return None
    say(f"the compiled install (STREAMEVAL_MYPYC=1) in {build}")
    return build


def figure_1(files: list[Path], log: Any, build: Path | None) -> dict[str, Any]:
    """replay against reading + decoding the same files: five runs of each, alternating, and the
    median of each (a 2-process replay on 2 cores is slowed by anything else running, where the
    1-core floor is not; the JSON has every run). Also replay in one process, and from ``build``
    (the compiled install) when there is one; every report checked equal to the default's."""
    records = sum(1 for path in files for _ in path.open("rb"))
    from streameval.replay import default_workers

    workers = default_workers(sum(path.stat().st_size for path in files))
    floors, replays, alone, fast, peaks = [], [], [], [], []
    outputs: set[bytes] = set()
    for attempt in range(RUNS_OF_FIGURE_1):
        floors.append(timed([PY, str(HERE / "floor_read.py"), *map(str, files)], log)[0])
        elapsed, peak, out = timed(replay_cmd(files), log)
        replays.append(elapsed)
        peaks.append(peak)
        elapsed, _, alone_out = timed(replay_cmd(files, "--workers", "1"), log)
        alone.append(elapsed)
        outputs.update((out, alone_out))
        line = (
            f"figure 1: run {attempt + 1}: read + decode {floors[-1]:.2f} s, replay {replays[-1]:.2f} s "
            f"({workers} process{'es' if workers > 1 else ''}), in one process {alone[-1]:.2f} s"
        )
        if build is not None:
            elapsed, _, compiled_out = timed(replay_cmd(files), log, cwd=build)
            fast.append(elapsed)
            outputs.add(compiled_out)
            line += f", compiled {fast[-1]:.2f} s"
        say(line)
    floor, replay = statistics.median(floors), statistics.median(replays)
    one_process = statistics.median(alone)
    result = {
        "records": records,
        "floor_s": floor,
        "replay_s": replay,
        "replay_records_per_s": records / replay,
        "replay_peak_mb": max(peaks),
        "ratio": floor / replay,
        "workers": workers,
        "one_process_replay_s": one_process,
        "one_process_ratio": floor / one_process,
        "runs_s": {"floor": floors, "replay": replays, "one_process": alone, "compiled": fast},
        # the report does not depend on the workers (nor on the compiled build, below)
        "same_report": len(outputs) == 1,
    }
    if build is not None:
        result["compiled_replay_s"] = statistics.median(fast)
        result["compiled_ratio"] = floor / result["compiled_replay_s"]
        result["compiled_same_report"] = result["same_report"]
    return result


RUNS_OF_FIGURE_1M = 3


def figure_1m(files: list[Path], scratch: Path, log: Any) -> dict[str, Any]:
    """replay of the same records in another team's shape, read through a mapping ([input.*]),
    against replay of them in streameval's shape: three runs of each, alternating, medians; the
    metrics must be the same."""
    from benchmarks.foreign_shape import rewrite

    foreign, config = rewrite(files, scratch / "foreign")
    native_runs, mapped_runs = [], []
    reports = []
    for attempt in range(RUNS_OF_FIGURE_1M):
        elapsed, _, out = timed(replay_cmd(files), log)
        native_runs.append(elapsed)
        native = json.loads(out)
        elapsed, _, out = timed(replay_cmd(foreign, "--config", str(config)), log)
        mapped_runs.append(elapsed)
        mapped = json.loads(out)
        reports.append((native["overall"], native["groups"]) == (mapped["overall"], mapped["groups"]))
        say(f"figure 1m: run {attempt + 1}: replay {native_runs[-1]:.2f} s, mapped {mapped_runs[-1]:.2f} s")
    native_s, mapped_s = statistics.median(native_runs), statistics.median(mapped_runs)
    return {
        "native_s": native_s,
        "mapped_s": mapped_s,
        "ratio": native_s / mapped_s,
        "runs_s": {"native": native_runs, "mapped": mapped_runs},
        "same_metrics": all(reports),
    }


def figure_5(files: list[Path], log: Any) -> dict[str, Any]:
    """The batch route (pandas + ranx) against replay on the same files, for MAP@10 per model."""
    try:
        import pandas  # noqa: F401
        import ranx  # noqa: F401
    except ImportError:
        return {"skipped": 'pandas or ranx missing: pip install -e ".[bench]"'}
    same = ("--metrics", "map@10", "--ap-denominator", "g", "--group-by", "model")
    replay_s, replay_mb, out = timed(replay_cmd(files, *same), log, stdout=subprocess.PIPE)
    say(f"figure 5: replay (MAP@10 per model) {replay_s:.2f} s, peak {replay_mb:.0f} MB")
    ranx_s, ranx_mb, ranx_out = timed([PY, str(HERE / "batch_ranx.py"), *map(str, files)], log)
    say(f"figure 5: pandas + ranx {ranx_s:.2f} s, peak {ranx_mb:.0f} MB")
    ours = {g["labels"]["model"]: g["map@10"] for g in json.loads(out)["groups"]}
    theirs = json.loads(ranx_out)
    return {
        "replay_s": replay_s,
        "replay_peak_mb": replay_mb,
        "pandas_ranx_s": ranx_s,
        "pandas_ranx_peak_mb": ranx_mb,
        "time_ratio": ranx_s / replay_s,
        "memory_ratio": ranx_mb / replay_mb,
        "map10_per_model": ours,
        "largest_difference": max(abs(ours[m] - theirs[m]) for m in ours)
        if set(ours) == set(theirs)
        else None,
    }


def state_cost(log: Any, **flags: Any) -> dict[str, Any]:
    cmd = [PY, str(HERE / "state_cost.py")]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        cmd += [flag] if value is True else [flag, str(value)]
    return json.loads(timed(cmd, log, stdout=subprocess.PIPE)[2])


def figures_3_4(scale: float, log: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    big = max(10_000, round(1_000_000 * scale))
    # records timed per run: at least 30,000 from --scale 0.1 up (enough for a quick look), fewer
    # only below it (the smoke run of tests/test_benchmarks.py)
    measure = max(round(150_000 * scale), min(30_000, round(300_000 * scale)))

    def cost(**flags: Any) -> float:
        return state_cost(log, measure=measure, **flags)["us_per_record"]

    # each twice, interleaved, and the faster run of each: runs of one case differ by ~10% on
    # this machine, and the same statistic on both sides keeps the ratio fair
    small = large = float("inf")
    for attempt in (1, 2):
        say(f"figure 3: run {attempt}: cost per record with 1k open queries (steady state)")
        small = min(small, cost(open=1000))
        say(f"figure 3: run {attempt}: with {big:,} open queries (warming up two horizons of traffic)")
        large = min(large, cost(open=big))
    say("figure 3: k = 10 vs 100 (100-item lists), 1 vs 3 vs 6 windows")
    k10 = cost(open=1000, k=10, list_len=100)
    k100 = cost(open=1000, k=100, list_len=100)
    w1 = cost(open=1000, windows="1h")
    w6 = cost(open=1000, windows="1m,5m,15m,1h,6h,24h")
    fig3 = {
        "us_per_record_1k_open": small,
        f"us_per_record_{big}_open": large,
        "large_open": big,
        "ratio_large_vs_1k": large / small,
        "us_per_record_k10": k10,
        "us_per_record_k100": k100,
        "ratio_k100_vs_k10": k100 / k10,
        "us_per_record_1_window": w1,
        "us_per_record_3_windows": small,
        "us_per_record_6_windows": w6,
        "ratio_3_vs_1_window": small / w1,
        "ratio_6_vs_1_window": w6 / w1,
    }
    say(f"figure 4: memory per open query, {big:,} open queries with 20-item lists")
    fig4 = state_cost(log, open=big, memory=True)
    return fig3, fig4


def broker_up(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except OSError:
        return False


def run_figures(wanted: set[str], args: argparse.Namespace, tmp: Path, log: Any) -> dict[str, Any]:
    """The figures asked for, by their key in results.json."""
    figures: dict[str, Any] = {}
    build = compiled_build(tmp, log) if wanted & {"1", "2"} else None
    if wanted & {"1", "5", "6"}:  # figure 6 produces these records at its pace
        files = simulate_files(tmp, args.scale, log)
    if "1" in wanted:
        figures["1_replay"] = figure_1(files, log, build)
        figures["1m_mapped_input"] = figure_1m(files, tmp, log)
    if "5" in wanted:
        figures["5_batch_route"] = figure_5(files, log)
    if "3" in wanted:
        figures["3_state_size"], figures["4_memory"] = figures_3_4(args.scale, log)
    if not wanted & {"2", "6"}:
        return figures
    if not broker_up(args.bootstrap_servers):
        skipped = {"skipped": f"no broker at {args.bootstrap_servers}: deploy/kafka/local.sh start"}
        say(f"figures 2, 6 and 7 skipped: {skipped['skipped']}")
        return figures | {"2_daemon": skipped, "6_freshness": skipped, "7_peer": skipped}
    from benchmarks import kafka_figures

    if "2" in wanted:
        backlog_s = max(30, round(400 * args.scale))
        figures["2_daemon"] = kafka_figures.figure_2(
            args.bootstrap_servers, backlog_s, args.port, log, say, compiled=build, rounds=args.rounds
        )
        # figure 7 runs on figure 2's backlog, in the same rounds
        figures["7_peer"] = figures["2_daemon"].pop("peer")
    if "6" in wanted:
        fresh_s = max(20, round(60 * args.scale))
        figures["6_freshness"] = kafka_figures.figure_6(
            args.bootstrap_servers, tmp, 5000, fresh_s, args.port + 1, log, say
        )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap-servers",
        default="127.0.0.1:9092",
        help="broker for figures 2, 6 and 7 (default: %(default)s)",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="data size: 1 = the README's figures, 0.1 = a quick look"
    )
    parser.add_argument("--out", default=str(HERE), help="where results.json/.md go (default: benchmarks/)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of figures 2 and 7, each the best of its rounds (default: %(default)s; 1: a smoke run)",
    )
    parser.add_argument(
        "--figures",
        default=",".join(FIGURES),
        help="which figures, comma-separated (default: all): 1 with 1m, 2 with 7 (figure 7 runs in "
        "figure 2's rounds), 3 with 4; the others are reported as not run",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=9499,
        help="metrics port of the daemons it starts, and the next one (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.scale <= 0:
        parser.error("--scale must be positive")
    if args.rounds < 1:
        parser.error("--rounds must be 1 or more")
    wanted = {name.strip() for name in args.figures.split(",")}
    if not wanted <= set(FIGURES):  # an empty name too: --figures '' or '1,'
        parser.error(f"--figures {args.figures}: a comma-separated list of {', '.join(FIGURES)}")
    wanted |= {partner for a, b in TOGETHER for partner in (a, b) if {a, b} & wanted}
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: {exc.strerror}")
    log_path = Path(args.out) / "benchmark.log"
    results: dict[str, Any] = {"machine": machine(), "scale": args.scale, "figures": {}}
    figures = results["figures"]
    started, meter = time.monotonic(), StealMeter()
    say(f"benchmarks: details of every step in {log_path}")
    with open(log_path, "wb") as log, tempfile.TemporaryDirectory(prefix="streameval-bench-") as tmp:
        figures.update(run_figures(wanted, args, Path(tmp), log))
    for name in FIGURE_KEYS:
        figures.setdefault(name, {"skipped": f"not asked for (--figures {args.figures})"})
    results["elapsed_s"] = time.monotonic() - started
    # the share of CPU time a hypervisor gave to others meanwhile (None: not known here)
    results["machine"]["steal_percent"] = meter.percent()
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(render(results))
    say(f"wrote {out / 'results.md'} and {out / 'results.json'} in {results['elapsed_s'] / 60:.1f} min")
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
