"""The optional native core (README, Performance: "The native core"), where it is installed.

``streameval_native`` is a compiled extension (Rust, built from ``native/`` of the source tree)
with the per-record work that is a pure function of a record's bytes: the decoders' fast paths
and Kafka's murmur2 (and the join's deadlines: :func:`streameval.deadlines.deadlines`; and the
JSON of a checkpoint's query entries: :func:`pack_entries`; and the signatures of ``replay``'s
queries and the partial sums of their values: :func:`score_rows`, :func:`exact_partials`; and
the scoring of an attributed event: :func:`grader`). It
returns what the Python code returns, or None where it leaves a record to it, and never decides
a rejection; the pure-Python core stays the reference (``tests/test_native.py``,
``tests/test_native_packs.py``, ``tests/test_native_score.py``, ``tests/test_native_grade.py``
and ``tests/test_deadlines.py`` hold the two equal). Without the extension, everything runs as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streameval.records import (
    EventFields,
    ImpressionFields,
    Rejection,
    _iso_with_offset,
    decode_event_fields,
    decode_impression_fields,
)
from streameval.scoring.query import NO_GRADES, OLD_SEP, SEP, Scorer, compact

try:
    import streameval_native as core
except ImportError:  # not installed: the pure-Python core
    core = None
if core is not None and getattr(core, "SEP", OLD_SEP) != SEP:
    core = None  # built from an older source tree, joining shown lists with another separator

#: the installed extension's version, None without it
VERSION: str | None = getattr(core, "__version__", None)


def impression_decoder(
    group_by: Sequence[str], compacted: bool = False
) -> Callable[[bytes | str], ImpressionFields | Rejection]:
    """:func:`~streameval.records.decode_impression_fields` for these group fields, through the
    native fast path where it is installed; ``compacted``: with the shown list as
    :func:`~streameval.scoring.query.compact` makes it (the core builds that string itself)."""
    group_by = tuple(group_by)
    checked = _compacted_fields(group_by) if compacted else _fields(group_by)
    if core is None:
        return checked
    impressions = core.Impressions(group_by)
    fast = impressions.decode_compact if compacted else impressions.decode

    def decode(raw: bytes | str) -> ImpressionFields | Rejection:
        fields = fast(raw)
        if fields is None:
            return checked(raw)
        if type(fields[1]) is str:  # ts as text: read as the Python fast path reads it
            ts = _iso_with_offset(fields[1])
            if ts is None:  # another form, or no time: the checked path decides
                return checked(raw)
            return fields[0], ts, fields[2], fields[3]
        return fields

    return decode


def _fields(group_by: tuple[str, ...]) -> Callable[[bytes | str], ImpressionFields | Rejection]:
    return lambda raw: decode_impression_fields(raw, group_by)


def _compacted_fields(group_by: tuple[str, ...]) -> Callable[[bytes | str], ImpressionFields | Rejection]:
    def decode(raw: bytes | str) -> ImpressionFields | Rejection:
        fields = decode_impression_fields(raw, group_by)
        if type(fields) is Rejection:
            return fields
        query_id, ts, items, group = fields  # type: ignore[misc]
        return query_id, ts, compact(items), group  # type: ignore[return-value]

    return decode


def event_decoder(
    grades: Mapping[str, float],
) -> Callable[[bytes | str, str | None], EventFields | Rejection]:
    """:func:`~streameval.records.decode_event_fields` for these grades, through the native
    fast path where it is installed."""
    if core is None:
        return lambda raw, default_type: decode_event_fields(raw, grades, default_type)
    fast = core.event

    def decode(raw: bytes | str, default_type: str | None) -> EventFields | Rejection:
        fields = fast(raw, grades, default_type)
        if fields is None:
            return decode_event_fields(raw, grades, default_type)
        if type(fields[3]) is str:
            ts = _iso_with_offset(fields[3])
            if ts is None:
                return decode_event_fields(raw, grades, default_type)
            return fields[0], fields[1], fields[2], ts, fields[4]
        return fields

    return decode


#: what a core's ``decode_lines``/``event_lines`` give for a block of lines: the records, one
#: per line that is not blank (the bytes of a line where Python must decide), and the indexes
#: of those lines
Lines = tuple[list[Any], list[int]]
#: what a core's ``shard_lines``/``event_shard_lines`` give for a block of lines and one shard
#: of the queries: as :data:`Lines` for the lines of that shard's queries, and the indexes of
#: the lines every shard gets (a subset of the second list: no query id could be read from them)
ShardLines = tuple[list[Any], list[int], list[int]]


def impression_lines(
    group_by: Sequence[str],
) -> Callable[[bytes, float, dict[Any, Any]], Lines] | None:
    """The core's reading of a block of impression lines at once, compacted (``replay``), with
    the event-time guard's limit and the dict of shared group tuples; None without it."""
    impressions = core.Impressions(tuple(group_by)) if core is not None else None
    return getattr(impressions, "decode_lines", None)


def event_lines() -> Callable[[bytes, Mapping[str, float], str | None, float], Lines] | None:
    """The core's reading of a block of event lines at once (``replay``): with the grades, the
    topic's default type and the guard's limit; None without it."""
    return getattr(core, "event_lines", None)


def impression_shard_lines(
    group_by: Sequence[str],
) -> Callable[[bytes, float, dict[Any, Any], int, int], ShardLines] | None:
    """As :func:`impression_lines`, for one shard of the queries (``replay`` in several
    processes, each reading every line): with the shard and the number of shards."""
    impressions = core.Impressions(tuple(group_by)) if core is not None else None
    return getattr(impressions, "shard_lines", None)


def event_shard_lines() -> (
    Callable[[bytes, Mapping[str, float], str | None, float, int, int], ShardLines] | None
):
    """As :func:`event_lines`, for one shard of the queries."""
    return getattr(core, "event_shard_lines", None)


def impression_values(
    group_by: Sequence[str],
) -> Callable[[list[Any], float, dict[Any, Any]], Lines] | None:
    """The core's reading of a list of Kafka records' values at once, as
    :func:`impression_lines` reads lines (the daemon): a value it leaves comes back as it was;
    None without it."""
    impressions = core.Impressions(tuple(group_by)) if core is not None else None
    return getattr(impressions, "decode_values", None)


def event_values() -> Callable[[list[Any], Mapping[str, float], str | None, float], Lines] | None:
    """As :func:`impression_values`, for events (as :func:`event_lines` reads lines)."""
    return getattr(core, "event_values", None)


def placement(partitions: int) -> Any:
    """The native ``Placement(partitions)`` (its ``partition_of(query_id)``), None without the
    extension."""
    return None if core is None else core.Placement(partitions)


def describe() -> str:
    """``native core <version>``, or ``no native core``, for ``streameval --version``."""
    return "no native core" if VERSION is None else f"native core {VERSION}"


def pack_entries(
    changed: list[tuple[Any, ...]], open_queries: Mapping[str, Any], tombstones: Mapping[str, float]
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]] | None:
    """:data:`streameval.packs.Entries` of the changed ``("q", query_id)`` keys through the native
    core, each entry as its JSON text: what orjson writes of the entry ``streameval.state`` builds.
    None without the core, or where it leaves the entries to Python (a value of a type it does not
    write)."""
    if core is None:
        return None
    got = core.pack_entries(changed, open_queries, tombstones, NO_GRADES)
    if got is None:
        return None
    q_keys, q_entries, t_keys, t_entries = got
    return {"q": q_keys, "t": t_keys}, {"q": q_entries, "t": t_entries}


def score_rows(scorer: Scorer, entries: list[list[Any]], not_scored: tuple[int, None]) -> list[Any] | None:
    """The row of each of ``replay``'s kept queries (``[ts, group, items, best]``) through the
    native core: ``not_scored`` without a grade, else what ``scorer.values_once`` gives, the
    values computed by :meth:`~streameval.scoring.query.Scorer.values_of_signature` once per
    signature. None without the core."""
    if core is None:
        return None
    params = scorer.params
    return core.score_rows(
        entries,
        scorer.values_of_signature,
        scorer.values_once,
        params.min_grade,
        params.unshown_items == "count",
        not_scored,
    )


def grader(scorer: Scorer) -> Callable[[Any, str, float], bool]:
    """``scorer.add_grade`` through the native core where it is installed (the same change to
    the same state, to the bit; a state it does not read is left to ``scorer.add_grade``)."""
    if core is None or not hasattr(core, "Grader"):
        return scorer.add_grade
    p = scorer.params
    fast = core.Grader(
        p.min_grade,
        p.unshown_items == "ignore",
        scorer.ap_ks,
        scorer.dcg_ks,
        p.ndcg_gain == "exp",
        NO_GRADES,
        scorer.add_grade,
    )
    return fast.add_grade


def exact_partials(columns: list[Any]) -> list[tuple[list[float], list[float]]] | None:
    """Per column of values (one metric's, floats), floats whose exact sums are those of the
    values and of their squares -- what ``math.fsum`` keeps of them -- through the native core.
    None without the core, or where it leaves a column to Python (a value that is not a finite
    float, a square or sum past the floats)."""
    if core is None:
        return None
    out = []
    for column in columns:
        got = core.exact_partials(column)
        if got is None:
            return None
        out.append(got)
    return out
