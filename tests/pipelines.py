"""Test-only ways of driving a Pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from streameval.config import Settings
from streameval.pipeline import Pipeline
from streameval.records import (
    Engagement,
    Impression,
    Rejection,
    decode_event_fields,
    decode_impression_fields,
)

#: an orphan_ttl no test input spans: the join then remembers everything (dedup keys, settled
#: queries, orphans) until the input ends, the batch definition that replay computes
FOREVER_S = 1e15


def remembering(settings: Settings) -> Settings:
    """These settings, with the join remembering everything until the end of the input."""
    return dataclasses.replace(settings, orphan_ttl=FOREVER_S)


def ingest(pipeline: Pipeline, raw: bytes | str, topic: str, is_impression: bool) -> Rejection | None:
    """Decode and handle one record; a bad one is counted and its Rejection returned."""
    record = pipeline.decode_impression(raw) if is_impression else pipeline.decode_event(raw, topic)
    pipeline.handle(topic, record)
    return record if isinstance(record, Rejection) else None


def decode_impression(raw: bytes | str, group_by: Collection[str]) -> Impression | Rejection:
    """One impression in streameval's own shape, as an Impression (or its Rejection)."""
    fields = decode_impression_fields(raw, group_by)
    if type(fields) is Rejection:
        return fields
    query_id, ts, items, group = fields  # type: ignore[misc]
    return Impression(query_id, ts, tuple(items), group)


def decode_event(
    raw: bytes | str, grades: Mapping[str, float], default_type: str | None = None
) -> Engagement | Rejection:
    """One engagement event in streameval's own shape, as an Engagement (or its Rejection)."""
    fields = decode_event_fields(raw, grades, default_type)
    if type(fields) is Rejection:
        return fields
    return Engagement(*fields)  # type: ignore[misc]
