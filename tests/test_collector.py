"""The daemon's garbage-collection policy: no automatic full collections, one when due."""

from __future__ import annotations

import gc
import weakref

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
