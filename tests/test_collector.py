"""The daemon's garbage-collection policy: no automatic full collections, one when due; the young
generations collected after each round of its loop."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

from streameval.collector import FullCollections
from streameval.config import load_settings
from streameval.pipeline import Pipeline
from tests.pipelines import ingest


def test_full_collections_are_off_while_it_runs_and_restored_at_the_end() -> None:
    before = gc.get_threshold()
    collections = FullCollections(interval=3600)
    try:
        young, middle, oldest = gc.get_threshold()
        assert (young, middle) == before[:2]
        assert oldest > 10**9
    finally:
        collections.end()
    assert gc.get_threshold() == before


def test_a_dropped_pipeline_is_a_cycle_that_the_due_collection_reclaims() -> None:
    # why the loop collects at once when it drops a partition's state
    collections = FullCollections(interval=0)
    try:
        gc.disable()  # no young collection in between either
        pipeline = Pipeline(load_settings(None, {}, {}))
        ingest(pipeline, b'{"query_id": "q1", "ts": 1000, "model": "m", "items": ["a"]}', "i", True)
        gone = weakref.ref(pipeline)
        del pipeline
        assert gone() is not None  # reference counting alone does not free it
        collections.tick()
        assert gone() is None
    finally:
        gc.enable()
        collections.end()


# Run as the program: the replay's records, kept for the exit, are never scanned by a young
# collection (the collector turned back on first would scan them all at its next one).
_REPLAY_WATCHED = """
import gc, sys
import streameval.replay
from streameval import cli

largest = [0]
def watch(phase, info):
    if phase == "start" and info["generation"] == 0:
        largest[0] = max(largest[0], len(gc.get_objects(generation=0)))
replay = streameval.replay.replay
def watched(*args, **kwargs):
    gc.callbacks.append(watch)  # from the start: the collector is off while it runs
    return replay(*args, **kwargs)
streameval.replay.replay = watched
sys.argv = ["streameval", "replay", "--impressions", "examples/impressions.jsonl",
            "--events", "examples/clicks.jsonl", "--events", "examples/purchases.jsonl"]
import os
real_exit = os._exit
def said_exit(code):  # the program ends with os._exit, having kept the records for it
    sys.stderr.write(f"young collections scanned at most {largest[0]}\\n")
    real_exit(code)
os._exit = said_exit
sys.exit(cli.main())
"""


def test_a_replay_about_to_exit_keeps_its_records_from_the_collector() -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _REPLAY_WATCHED], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    scanned = int(done.stderr.rsplit(" ", 1)[1])
    records = 668  # the three example files: each leaves two or more tracked objects
    assert scanned < records, done.stderr


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_young_after_rounds_collects_only_when_ticked_and_moves_survivors_to_the_old() -> None:
    was_enabled = gc.isenabled()
    collections = FullCollections(interval=3600, young_after_rounds=True)
    try:
        assert not gc.isenabled()  # no automatic collection while a round runs
        cycle = _Node()
        gone = weakref.ref(cycle)
        del cycle
        survivor = [_Node() for _ in range(5_000)]  # far past the young threshold
        assert gone() is not None
        assert any(o is survivor for o in gc.get_objects(generation=0))
        collections.tick()  # after a round: the young generations, scanned once
        assert gone() is None
        assert any(o is survivor for o in gc.get_objects(generation=2))
    finally:
        collections.end()
    assert gc.isenabled() == was_enabled
