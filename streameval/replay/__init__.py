"""``streameval replay``: JSONL logs -> the batch join -> a report.

The answer is the pipeline's on the inputs merged in timestamp order (impressions before events
at the same time, file order otherwise), with everything settling at the end. The records are
decoded by the daemon's decoders and scored by its scorer, but joined as one batch
(:mod:`~streameval.replay.batch`, which says why that is the same), because a record at a time
through the pipeline costs several times more; large inputs are shared by several processes,
each joining the queries of one shard (:mod:`~streameval.replay.shards`). The parts: ``files``
(reading and cutting the inputs), ``batch`` (the join in phases), ``shards`` and ``pipes``
(processes), ``report``, ``progress``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import NamedTuple

from streameval import collector
from streameval.config import Settings
from streameval.decoding import Decoder
from streameval.errors import ConfigError
from streameval.pipeline import Pipeline
from streameval.replay.batch import join_in_batch
from streameval.replay.files import Decoding, Labels, check_inputs, sources
from streameval.replay.progress import Progress
from streameval.replay.report import build_report, format_table
from streameval.replay.shards import OneProcess, replay_in_shards

__all__ = [
    "Progress",
    "Replayed",
    "build_report",
    "default_workers",
    "format_table",
    "join_in_batch",
    "replay",
    "run_replay",
]

#: inputs smaller than this are replayed in one process: a worker would cost more than it saves
PARALLEL_FROM_BYTES = 4 << 20
MAX_WORKERS = 4  # each one more passes more records between processes (through the main one)


class Replayed(NamedTuple):
    """The finished pipeline, and what the replay built to get there (its records): held by a
    caller about to exit, which leaves freeing them to the end of the process."""

    pipeline: Pipeline
    held: tuple[object, ...]


def run_replay(
    settings: Settings,
    impressions: str,
    events: Sequence[str],
    progress: Progress | None = None,
    workers: int | None = None,
) -> Pipeline:
    """Read and decode the files, join and score in one batch; returns the finished pipeline."""
    return replay(settings, impressions, events, progress, workers).pipeline


def replay(
    settings: Settings,
    impressions: str,
    events: Sequence[str],
    progress: Progress | None = None,
    workers: int | None = None,
) -> Replayed:
    """:func:`run_replay`, and the records it built. ``workers`` processes share the work
    (None: :func:`default_workers`); the answer is the same with any number."""
    check_inputs((impressions, *events))
    if settings.input.uses_kafka_timestamp:
        raise ConfigError(
            'input: ts = "@timestamp" takes the time of the Kafka record, which a file does not '
            "have; replay needs the path of a time field in the records (README, Your logs)"
        )
    progress = progress or Progress()
    labels: Labels = {}  # the groups read (in this process)
    started = time.time()  # the event-time guard measures from the start of the replay
    inputs = sources(settings, Decoder(settings, lambda: started), impressions, events, labels)
    if workers is None:
        workers = default_workers(sum(os.path.getsize(source.path) for source in inputs))
    with collector.paused():  # (and in the workers: they fork from here)
        if workers > 1:
            pipeline = Pipeline(settings)
            try:
                return Replayed(pipeline, replay_in_shards(pipeline, inputs, workers, progress, labels))
            except OneProcess as why:
                progress.stage(f"replaying in one process: {why}")
        # not fed record by record: it holds the counters, the scorer and the totals
        pipeline = Pipeline(settings)
        c = pipeline.counters
        decoding = Decoding(progress, c.consumed, c.rejected, c.ignored)
        held = join_in_batch(pipeline, decoding.records(inputs[:1]), decoding.records(inputs[1:]), progress)
        return Replayed(pipeline, held)


def default_workers(input_bytes: int) -> int:
    """The usable CPUs (at most :data:`MAX_WORKERS`) for inputs of PARALLEL_FROM_BYTES or more,
    else 1; 1 where processes cannot be forked."""
    if input_bytes < PARALLEL_FROM_BYTES or not hasattr(os, "fork"):
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_WORKERS))
