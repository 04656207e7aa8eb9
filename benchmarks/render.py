"""The table of ``python -m benchmarks``: results.json's figures as the rows of results.md, each
with its target and whether it was met."""

from __future__ import annotations

from typing import Any


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def same_metrics(two: dict[str, Any]) -> str:
    """Whether every run of a figure (2, 1m) showed the same metrics."""
    return "same metrics" if two["same_metrics"] else "**metrics differ**"


def figure_2_rows(two: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Figure 2's rows: the daemon against the bare consumer, and its variants."""
    rows: list[tuple[str, str, str, str]] = []
    if "skipped" in two:
        rows.append(("2. `run` / bare kafka-python consumer", "not run", ">= 0.45", two["skipped"]))
    else:
        rows.append(
            (
                f"2. `run` / bare kafka-python consumer, backlog of {two['records']:,} records, 3 partitions "
                f"({two['run_s']:.1f} s vs {two['bare_consumer_s']:.1f} s; without checkpoints "
                f"{two['ratio_without_checkpoints']:.2f}, a checkpoint every 7 min)",
                f"{two['ratio']:.2f}",
                ">= 0.45",
                verdict(two["ratio"] >= 0.45),
            )
        )
        if "ratio_confluent" in two:
            rows.append(
                (
                    f'2k. the same `run` with `kafka_client = "confluent-kafka"` / the bare kafka-python '
                    f"consumer ({two['run_confluent_s']:.1f} s vs {two['bare_consumer_s']:.1f} s)",
                    f"{two['ratio_confluent']:.2f}",
                    ">= 1.0",
                    verdict(two["ratio_confluent"] >= 1.0),
                )
            )
        if "pipeline_alone_ratio" in two:
            rows.append(
                (
                    f"2p. bare kafka-python consumer / the pipeline alone, the backlog's records fed "
                    f"from memory ({two['pipeline_alone_s']:.1f} s: decoded, merged and processed as the "
                    "daemon does, no Kafka, no checkpoints): the most 2 and 2k can read with this pipeline",
                    f"{two['pipeline_alone_ratio']:.2f}",
                    "reported",
                    "",
                )
            )
        if "confluent_floor_ratio" in two:
            rows.append(
                (
                    f"2c. bare kafka-python consumer / bare confluent-kafka consumer, the same backlog "
                    f"({two['bare_consumer_s']:.1f} s vs {two['bare_confluent_s']:.1f} s): the ceiling "
                    "of a librdkafka client",
                    f"{two['confluent_floor_ratio']:.2f}",
                    "reported",
                    "",
                )
            )
        if "ratio_repartitioned" in two:
            rows.append(
                (
                    f"2r. the same with the events topic repartitioned by the daemon (`--repartition`; "
                    f"{two['run_repartitioned_s']:.1f} s; README, Repartitioning)",
                    f"{two['ratio_repartitioned']:.2f}",
                    "reported",
                    "",
                )
            )
        if "compiled_ratio" in two:
            rows.append(
                (
                    f"2'. the same, the compiled install (`STREAMEVAL_MYPYC=1`; "
                    f"{two['compiled_run_s']:.1f} s, {same_metrics(two)})",
                    f"{two['compiled_ratio']:.2f}",
                    "reported",
                    "",
                )
            )
        if "compiled_ratio_confluent" in two:
            rows.append(
                (
                    f'2k\'. the compiled install with `kafka_client = "confluent-kafka"` / the bare '
                    f"kafka-python consumer ({two['compiled_run_confluent_s']:.1f} s, {same_metrics(two)})",
                    f"{two['compiled_ratio_confluent']:.2f}",
                    "reported",
                    "",
                )
            )
    return rows


def figure_1_rows(one: dict[str, Any], mapped: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Figure 1's rows: replay against the floor, its variants, and the mapped input (1m)."""
    if "skipped" in one:
        return [
            ("1. `replay` throughput / read + orjson floor", "not run", ">= 0.35", one["skipped"]),
            ("1m. `replay` in streameval's shape, and mapped", "not run", "reported", mapped["skipped"]),
        ]
    rows: list[tuple[str, str, str, str]] = []
    processes = f"{one['workers']} processes" if one["workers"] > 1 else "one process"
    rows.append(
        (
            f"1. `replay` throughput / read + orjson floor ({one['records']:,} records; "
            f"{one['replay_records_per_s']:,.0f} rec/s, {one['replay_s']:.1f} s vs {one['floor_s']:.2f} s; "
            f"{processes}, the default here)",
            f"{one['ratio']:.3f}",
            ">= 0.35",
            verdict(one["ratio"] >= 0.35),
        )
    )
    same = "same report" if one["same_report"] else "**reports differ**"
    if "compiled_ratio" in one:
        rows.append(
            (
                f"1'. the same, the compiled install (`STREAMEVAL_MYPYC=1`; "
                f"{one['compiled_replay_s']:.1f} s, {same})",
                f"{one['compiled_ratio']:.3f}",
                "reported",
                "",
            )
        )
    if "one_process_ratio" in one:
        rows.append(
            (
                f"1''. the same in one process, like the floor (`--workers 1`; "
                f"{one['one_process_replay_s']:.1f} s, {same})",
                f"{one['one_process_ratio']:.3f}",
                "reported",
                "",
            )
        )
    rows.append(
        (
            f"1m. `replay` in streameval's shape / the same records in another shape through a mapping "
            f"(`examples/foreign/`'s; {mapped['native_s']:.1f} s vs {mapped['mapped_s']:.1f} s, "
            f"{same_metrics(mapped)})",
            f"{mapped['ratio']:.2f}",
            "reported",
            "",
        )
    )
    return rows


def figure_3_4_rows(three: dict[str, Any], four: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Figures 3 and 4: the cost per record as the state grows, and memory per open query."""
    if "skipped" in three:
        return [
            ("3a. cost per record, large vs 1k open queries", "not run", "<= 1.2x", three["skipped"]),
            ("4. memory per open query", "not run", "<= 2 KB", four["skipped"]),
        ]
    rows: list[tuple[str, str, str, str]] = []
    rows.append(
        (
            f"3a. cost per record, {three['large_open']:,} vs 1k open queries "
            f"({three['us_per_record_' + str(three['large_open']) + '_open']:.1f} vs "
            f"{three['us_per_record_1k_open']:.1f} us)",
            f"{three['ratio_large_vs_1k']:.2f}x",
            "<= 1.2x",
            verdict(three["ratio_large_vs_1k"] <= 1.2),
        )
    )
    rows.append(
        (
            f"3b. cost per record, k = 100 vs k = 10 ({three['us_per_record_k100']:.1f} vs "
            f"{three['us_per_record_k10']:.1f} us, 100-item lists)",
            f"{three['ratio_k100_vs_k10']:.2f}x",
            "reported",
            "",
        )
    )
    rows.append(
        (
            f"3c. cost per record, 3 and 6 windows vs 1 ({three['us_per_record_3_windows']:.1f}, "
            f"{three['us_per_record_6_windows']:.1f} vs {three['us_per_record_1_window']:.1f} us)",
            f"{three['ratio_3_vs_1_window']:.2f}x, {three['ratio_6_vs_1_window']:.2f}x",
            "reported",
            "",
        )
    )
    rows.append(
        (
            f"4. memory per open query, 20-item lists ({four['open_queries']:,} open, RSS growth)",
            f"{four['bytes_per_open_query']:,.0f} B",
            "<= 2 KB",
            verdict(four["bytes_per_open_query"] <= 2048),
        )
    )
    return rows


def stolen(m: dict[str, Any], two: dict[str, Any]) -> str:
    """How much CPU time a hypervisor took while the figures ran (and in figure 2's rounds), or
    nothing where that is not known."""
    whole = m.get("steal_percent")
    if whole is None:
        return ""
    rounds = [f"{p:.1f}%" for p in two.get("steal_percent_by_round", ()) if p is not None]
    in_rounds = f" (figure 2's rounds: {', '.join(rounds)})" if rounds else ""
    return (
        f" The hypervisor gave {whole:.1f}% of the CPU time to others meanwhile{in_rounds}: "
        "`steal` in /proc/stat; where it is more than a few percent, ratios move between runs."
    )


def render(results: dict[str, Any]) -> str:
    """The Markdown table: one row per figure, its ratio and its target."""
    f = results["figures"]
    m = results["machine"]
    rows: list[tuple[str, str, str, str]] = []

    rows += figure_1_rows(f["1_replay"], f["1m_mapped_input"])
    rows += figure_2_rows(f["2_daemon"])
    rows += figure_3_4_rows(f["3_state_size"], f["4_memory"])
    five = f["5_batch_route"]
    if "skipped" in five:
        rows.append(("5. pandas + ranx batch route vs `replay`", "not run", "reported", five["skipped"]))
    else:
        diff = five["largest_difference"]
        rows.append(
            (
                f"5. pandas + ranx batch route / `replay`, MAP@10 per model ({five['pandas_ranx_s']:.1f} s, "
                f"{five['pandas_ranx_peak_mb']:,.0f} MB vs {five['replay_s']:.1f} s, "
                f"{five['replay_peak_mb']:,.0f} MB; largest MAP difference "
                f"{'n/a' if diff is None else f'{diff:.1e}'})",
                f"{five['time_ratio']:.1f}x time, {five['memory_ratio']:.1f}x memory",
                "reported",
                "",
            )
        )
    six = f["6_freshness"]
    if "skipped" in six:
        rows.append(("6. freshness at 5k records/s", "not run", "reported", six["skipped"]))
    else:
        rows.append(
            (
                f"6. freshness: produce -> counted in /metrics, at {six['achieved_rate']:,.0f} records/s "
                f"({six['records']:,} records)",
                f"p50 {six['p50_s']:.2f} s, p99 {six['p99_s']:.2f} s",
                "reported",
                "",
            )
        )
    seven = f["7_peer"]
    if "skipped" in seven:
        rows.append(("7. the Quix Streams job / `run`", "not run", ">= 2x", seven["skipped"]))
    else:
        same_out = "same MAP in every run" if seven["same_output"] else "**MAP differs between runs**"
        rows.append(
            (
                f"7. the same job written with Quix Streams (exactly-once, RocksDB state and its "
                f"changelog; `benchmarks/quix_job.py`) / `run`, figure 2's backlog "
                f"({seven['quix_s']:.1f} s vs {seven['run_s']:.1f} s; {same_out})",
                f"{seven['speedup']:.2f}x",
                ">= 2x",
                verdict(seven["speedup"] >= 2.0),
            )
        )
        if "speedup_confluent" in seven:
            rows.append(
                (
                    '7k. the same, against `run` with `kafka_client = "confluent-kafka"`: both on '
                    f"librdkafka, the client Quix Streams runs on ({seven['quix_s']:.1f} s vs "
                    f"{seven['run_confluent_s']:.1f} s)",
                    f"{seven['speedup_confluent']:.2f}x",
                    ">= 2x",
                    verdict(seven["speedup_confluent"] >= 2.0),
                )
            )
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items() if v)
    lines = [
        "# Benchmark results",
        "",
        f"`python -m benchmarks --scale {results['scale']:g}` on {m['date']}: {m['cores']} cores "
        f"({m['cpu']}), {m['memory_gb']} GB, Python {m['python']}; {libs}. "
        f"Took {results['elapsed_s'] / 60:.1f} min.{stolen(m, f['2_daemon'])}",
        "",
        "| figure | measured | target | |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
    ]
    return "\n".join(lines)
