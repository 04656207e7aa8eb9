"""``streameval replay``: JSONL logs -> the batch join -> a report.

The answer is the pipeline's on the inputs merged in timestamp order (impressions before events
at the same time, file order otherwise), with everything settling at the end. The records are
decoded by the daemon's decoders and scored by its scorer, but joined as one batch
(:func:`join_in_batch`, which says why that is the same), because a record at a time through
the pipeline costs several times more. Blank lines are not records.
"""

from __future__ import annotations

import functools
import gc
import itertools
import marshal
import math
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TextIO

from streameval.config import Settings
from streameval.errors import InputError
from streameval.pipeline import Counters, Pipeline
from streameval.records import (
    EventFields,
    ImpressionFields,
    Rejection,
    decode_event_fields,
    decode_impression_fields,
    fields_key,
)
from streameval.scoring import Sums
from streameval.scoring.query import compact

PROGRESS_AFTER_S = 2.0


class Progress:
    """Prints a line to stderr every couple of seconds, but only once work has taken that long."""

    def __init__(self, stream: TextIO | None = None, every: float = PROGRESS_AFTER_S) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        #: callers look at the clock only every mask + 1 records
        self.mask = 4095 if every > 0 else 0
        self.start = time.monotonic()
        self.next_at = self.start + every
        self.printed = False

    def update(self, what: str, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        rate = done / max(now - self.start, 1e-9)
        of = f"/{total}" if total else ""
        self.stream.write(f"streameval replay: {what} {done}{of} records ({rate:,.0f}/s)\n")
        self.stream.flush()
        self.printed = True

    def stage(self, what: str) -> None:
        """Say what a long run does next (a run shorter than the interval says nothing)."""
        if time.monotonic() - self.start >= self.every:
            self.stream.write(f"streameval replay: {what}\n")
            self.stream.flush()
            self.printed = True


def run_replay(
    settings: Settings,
    impressions: str,
    events: Sequence[str],
    progress: Progress | None = None,
    keep: list[object] | None = None,
    workers: int | None = None,
) -> Pipeline:
    """Read and decode the files, join and score in one batch; returns the finished pipeline.

    ``workers`` processes read and decode the files (None: :func:`default_workers`); the answer
    is the same with any number. With ``keep``, the records are left in it instead of being
    freed on return, for a caller that is about to exit (the command line: freeing millions of
    small objects one by one is work the end of the process does at once).
    """
    for path in (impressions, *events):
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file" if not Path(path).exists() else f"{path}: not a file")
    progress = progress or Progress()
    pipeline = Pipeline(settings)  # not fed: it holds the counters, the scorer and the totals
    sources = [_Source(impressions, settings.impressions_topic, _impression_decoder(settings))]
    for path in events:
        topic = Path(path).stem
        sources.append(_Source(path, topic, _event_decoder(settings, topic)))
    if workers is None:
        workers = default_workers(sum(os.path.getsize(source.path) for source in sources))
    # Replay holds every query until the end: the cyclic garbage collector would rescan that
    # growing heap again and again (a third of the run) and find nothing, since none of it
    # forms cycles. It is off for the run and back on afterwards (and off in the workers).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    reader = _Reader(pipeline.counters, progress, sources, workers)
    try:
        join_in_batch(
            pipeline,
            reader.records(0),
            reader.records_of(range(1, len(sources))),
            keep,
            progress,
        )
    finally:
        reader.close()
        if keep is not None:
            gc.freeze()  # what is kept is not garbage: the collector need never scan it again
        if gc_was_enabled:
            gc.enable()
    return pipeline


#: inputs smaller than this are read in one process: a worker would cost more than it saves
PARALLEL_FROM_BYTES = 4 << 20
MAX_WORKERS = 4  # beyond this the join, which is one process's, is all that is left


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


def _impression_decoder(settings: Settings) -> Callable[[bytes], ImpressionFields | Rejection]:
    group_by = settings.group_by
    # one tuple per group, held by all its queries (and sent once by a worker: marshal writes
    # an object it has written before as a reference)
    shared_labels: dict[tuple[str, ...], tuple[str, ...]] = {}

    def decode(raw: bytes) -> ImpressionFields | Rejection:
        # the shown list as the join keeps it (compact), made here: in the workers when there are
        fields = decode_impression_fields(raw, group_by)
        if type(fields) is Rejection:
            return fields
        query_id, ts, items, group = fields  # type: ignore[misc]
        return query_id, ts, compact(items), shared_labels.setdefault(group, group)  # type: ignore[return-value]

    return decode


def _event_decoder(settings: Settings, topic: str) -> Callable[[bytes], EventFields | Rejection]:
    return functools.partial(
        decode_event_fields, grades=settings.grades, default_type=settings.topic_types.get(topic)
    )


class _Source(NamedTuple):
    path: str
    topic: str
    decode: Callable[[bytes], Any]


class _Reader:
    """Decodes the lines of the input files, counting each as consumed and each bad one as
    rejected by its reason; yields the good records, file by file, in the files' order.

    With n workers, each file is cut at line ends into n parts of about equal size: this
    process reads the first, and a forked worker each of the others, which sends its part's
    records and counts back through a pipe (marshal: the records are tuples of strings and
    numbers) when this process comes to it. The records come out in the same order as from one
    process. A worker that cannot be started or dies leaves its parts to this process.
    """

    def __init__(self, counters: Counters, progress: Progress, sources: list[_Source], workers: int) -> None:
        self.progress = progress
        self.sources = sources
        self.consumed, self.rejected = counters.consumed, counters.rejected
        self.read = 0  # lines read, for the progress lines
        self.cuts = [_cuts(source.path, workers) for source in sources]
        self.workers: list[_Worker] = []
        for index in range(1, workers):
            worker = _Worker.start(self, index)
            if worker is None:
                break
            self.workers.append(worker)

    def records(self, index: int) -> Iterator[Any]:
        """The good records of ``sources[index]``."""
        source, cuts = self.sources[index], self.cuts[index]
        last = len(self.workers)
        yield from self._part(source, cuts[0], cuts[1] if last else None)
        for part, worker in enumerate(self.workers, start=1):
            answer = worker.receive()
            if answer is None:  # the worker is gone: its part is read here
                yield from self._part(source, cuts[part], cuts[part + 1] if part < last else None)
                continue
            sent_for, consumed, rejected, records = answer
            if sent_for != index:
                raise RuntimeError(f"replay worker {part} sent file {sent_for} for file {index}")
            self.consumed.update(consumed)
            self.rejected.update(rejected)
            self.read += sum(consumed.values())
            yield from records

    def records_of(self, indices: Iterable[int]) -> Iterator[Any]:
        """The good records of these sources, one after the other. (A generator function, not
        a generator expression: mypyc may evaluate one of those at once, and the workers' parts
        come in the sources' order.)"""
        for index in indices:
            yield from self.records(index)

    def _part(self, source: _Source, start: int, end: int | None) -> Iterator[Any]:
        """The good records of the lines from byte ``start`` to ``end`` (None: the end of the file)."""
        if end is not None and end <= start:
            return
        topic, decode = source.topic, source.decode
        progress, mask, rejected = self.progress, self.progress.mask, self.rejected
        read = self.read
        try:
            with open(source.path, "rb") as handle:
                lines: Iterable[bytes] = handle
                if end is not None:
                    lines = itertools.islice(handle, _count_lines(handle, start, end))
                handle.seek(start)
                for raw in lines:
                    if raw.isspace():  # blank lines are not records (JSON allows the line end)
                        continue
                    read += 1
                    if not read & mask:
                        progress.update("read", read)
                    record = decode(raw)
                    if type(record) is Rejection:
                        rejected[(topic, record.reason)] += 1
                    else:
                        yield record
        except OSError as exc:
            raise InputError(f"{source.path}: cannot be read ({exc.strerror})") from None
        self.consumed[topic] += read - self.read
        self.read = read

    def serve(self, index: int, out: BinaryIO) -> None:
        """A worker's work: part ``index`` of every file, sent in the files' order."""
        self.progress.next_at = math.inf  # the parent prints the progress
        last = index == len(self.cuts[0]) - 2
        for number, (source, cuts) in enumerate(zip(self.sources, self.cuts, strict=True)):
            self.consumed, self.rejected = Counter(), Counter()
            records = list(self._part(source, cuts[index], None if last else cuts[index + 1]))
            blob = marshal.dumps((number, dict(self.consumed), dict(self.rejected), records))
            out.write(len(blob).to_bytes(8, "little"))
            out.write(blob)
            out.flush()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()


def _cuts(path: str, parts: int) -> list[int]:
    """``parts + 1`` byte offsets that cut the file at line ends into parts of about equal size."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as handle:
        for part in range(1, parts):
            at = size * part // parts
            if at <= cuts[-1]:
                cuts.append(cuts[-1])
                continue
            handle.seek(at - 1)
            handle.readline()  # to the end of the line that holds byte at - 1
            cuts.append(handle.tell())
    cuts.append(max(size, cuts[-1]))
    return cuts


def _count_lines(handle: BinaryIO, start: int, end: int) -> int:
    """The lines from byte ``start`` to ``end``: the line ends, and one more for a last line
    without one (the end of a file)."""
    handle.seek(start)
    count, left, block = 0, end - start, b""
    while left > 0:
        block = handle.read(min(left, 1 << 20))
        if not block:
            break
        count += block.count(b"\n")
        left -= len(block)
    return count + (not block.endswith(b"\n") and bool(block))


class _Worker:
    """A forked process that reads one part of every file (:meth:`_Reader.serve`)."""

    def __init__(self, pid: int, stream: BinaryIO) -> None:
        self.pid: int | None = pid
        self.stream: BinaryIO | None = stream

    @classmethod
    def start(cls, reader: _Reader, index: int) -> _Worker | None:
        """The worker for part ``index``, or None when no process can be forked."""
        if not hasattr(os, "fork"):  # not on Windows: its parts are read by the main process
            return None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the worker: it ends here, whatever happens, without the parent's exit work
            code = 1
            try:
                os.close(read_end)
                with os.fdopen(write_end, "wb") as out:
                    reader.serve(index, out)
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(pid, os.fdopen(read_end, "rb"))

    def receive(self) -> tuple[int, dict[str, int], dict[tuple[str, str], int], list[Any]] | None:
        """The worker's next part: the file's index, its counts and records; None once it is gone."""
        if self.stream is None:
            return None
        head = self.stream.read(8)
        blob = self.stream.read(int.from_bytes(head, "little")) if len(head) == 8 else b""
        if not blob:
            self.stop()
            return None
        return marshal.loads(blob)

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)  # done or not needed any more
            os.waitpid(self.pid, 0)
            self.pid = None


_NOT_SCORED = (0, None)  # a query with no attributed event: no relevant item


def _entry_ts(entry: list[Any]) -> float:
    return entry[0]


def join_in_batch(
    pipeline: Pipeline,
    impressions: Iterable[ImpressionFields],
    events: Iterable[EventFields],
    keep: list[object] | None = None,
    progress: Progress | None = None,
) -> None:
    """Settle every query of these records into ``pipeline`` as if its :meth:`~Pipeline.process`
    had been fed their merge in timestamp order (impressions first at equal times, the given
    order otherwise), remembering everything until the end, and then :meth:`~Pipeline.finish`:
    the same counters, and the same settled totals up to floating-point rounding (each query is
    scored once, from its best grades, where the daemon updates its values event by event).
    The impressions' shown lists come as :func:`~streameval.scoring.query.compact` made them.

    Why a batch gives the same answer: with everything remembered until the end, nothing the
    join decides depends on the watermark. Each rule of the join (README, Definitions) then
    reads only times: an impression's duplicates lose to the first in that order, the earliest
    copy; an event's duplicates likewise; a kept event counts for the kept impression of its
    query when ``imp.ts <= ev.ts <= imp.ts + horizon`` (an event before its impression waits
    as an orphan and is then judged ``before_impression`` -- the same verdict), is
    ``unknown_query`` without one, and nothing is late. A query's values depend on the best
    grade of each item only, whatever the order of its events. Two things do depend on order
    and are done in it: settled queries are added to their group's sums (floating point), and
    groups are admitted under the ``max_groups`` cap.

    So no per-record pipeline step is needed: the records are deduplicated into dicts, the
    events judged, and only queries with attributed events scored -- the others count as
    queries with no relevant item. A dict keeps the position of a key's first insertion; an
    impression that replaces an earlier copy is deleted and inserted again, so the dict of
    impressions stays in the order its winners came in, and a stable sort by time gives the
    merged order.
    """
    counters = pipeline.counters
    # query_id -> [ts, group, shown list (compact), best grades of the items attributed to it:
    # None, an (item, grade) pair or a dict]
    kept: dict[str, list[Any]] = {}
    duplicates = 0
    # one tuple per group, held by all its queries
    shared_labels: dict[tuple[str, ...], tuple[str, ...]] = {}
    for query_id, ts, items, group in impressions:
        group = shared_labels.setdefault(group, group)
        entry = kept.get(query_id)
        if entry is None:
            kept[query_id] = [ts, group, items, None]
        else:
            duplicates += 1
            if ts < entry[0]:  # earlier in time: it comes first in the merge
                del kept[query_id]
                kept[query_id] = [ts, group, items, None]
    counters.duplicates["impressions"] += duplicates
    seen: dict[tuple[str, ...] | str, EventFields] = {}
    duplicates = 0
    for ev in events:
        query_id, item, event_type, ts, event_id = ev
        key = event_id if event_id is not None else fields_key(query_id, item, event_type, ts)
        first = seen.get(key)
        if first is None:
            seen[key] = ev
        else:
            duplicates += 1
            if ts < first[3]:  # copies of an event_id may differ: the earliest counts
                seen[key] = ev
    counters.duplicates["events"] += duplicates

    if progress is not None:
        progress.stage(f"judging {len(seen):,} events against {len(kept):,} queries")
    settings = pipeline.settings
    rules = {t: (grade, settings.horizon_for(t)) for t, grade in settings.grades.items()}
    unknown = before = after = n_attributed = 0
    for query_id, item, event_type, ts, _ in seen.values():
        entry = kept.get(query_id)
        if entry is None:
            unknown += 1
            continue
        grade, horizon = rules[event_type]
        imp_ts = entry[0]
        if ts < imp_ts:
            before += 1
        elif ts > imp_ts + horizon:
            after += 1
        else:
            n_attributed += 1
            best = entry[3]
            if best is None:
                entry[3] = {item: grade}
            elif grade > best.get(item, -math.inf):
                best[item] = grade
    verdicts = {"before_impression": before, "after_horizon": after, "unknown_query": unknown}
    for reason, count in verdicts.items():
        if count:
            counters.unattributed[reason] += count
    counters.attributed += n_attributed

    if progress is not None:
        progress.stage(f"scoring {len(kept):,} queries")
    values_once, group_of = pipeline.scorer.values_once, pipeline.group_of
    rows: dict[tuple[str, ...], list[tuple[int, tuple[float, ...] | None]]] = {}
    for _ts, labels, items, best in sorted(kept.values(), key=_entry_ts):
        group_rows = rows.get(group := group_of(labels))
        if group_rows is None:
            group_rows = rows[group] = []
        if best is None:
            group_rows.append(_NOT_SCORED)
        else:
            group_rows.append(values_once(items, best.items()))
    n_metrics = len(pipeline.metrics)
    for group, group_rows in rows.items():
        pipeline.settled_totals.setdefault(group, Sums(n_metrics)).add_rows(group_rows)
    if keep is not None:
        keep += (kept, seen)


def _block(sums: Sums, pipeline: Pipeline) -> dict[str, Any]:
    means = sums.means(pipeline.metrics, pipeline.settings.no_relevant)
    out: dict[str, Any] = {"queries": sums.queries, "queries_with_relevant": sums.with_relevant}
    for metric, mean in zip(pipeline.metrics, means, strict=True):
        out[str(metric)] = mean
    return out


def build_report(pipeline: Pipeline) -> dict[str, Any]:
    """The JSON report (README, `streameval replay`): overall (pooled), per group, and the input counts."""
    n = len(pipeline.metrics)
    overall = Sums(n)
    groups: list[tuple[tuple[str, ...], Sums]] = sorted(
        pipeline.settled_totals.items(), key=lambda kv: str(kv[0])
    )
    for _, sums in groups:
        overall.merge(sums)
    group_by = pipeline.settings.group_by
    counters = pipeline.counters
    rejected: Counter[str] = Counter()
    for (_, reason), count in counters.rejected.items():
        rejected[reason] += count
    return {
        "overall": _block(overall, pipeline),
        "groups": [
            {"labels": dict(zip(group_by, labels, strict=True)), **_block(sums, pipeline)}
            for labels, sums in groups
        ],
        "inputs": {
            "records": sum(counters.consumed.values()),
            "rejected": dict(sorted(rejected.items())),
            "unattributed": dict(sorted(counters.unattributed.items())),
            "duplicates": {
                "impressions": counters.duplicates["impressions"],
                "events": counters.duplicates["events"],
            },
        },
    }


def format_table(report: dict[str, Any], metric_names: Sequence[str]) -> str:
    """A readable aligned table: one row for all queries, then one per group; then the inputs."""
    rows = [{"group": "(all)", **report["overall"]}]
    for group in report["groups"]:
        label = ",".join(f"{k}={v}" for k, v in group["labels"].items()) or "(all)"
        rows.append({"group": label, **group})
    columns = ["group", "queries", "queries_with_relevant", *metric_names]
    headers = {"queries_with_relevant": "with_relevant"}

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4f}"
        return str(value)

    table = [[headers.get(c, c) for c in columns]] + [[cell(r[c]) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = [
        "  ".join(
            text.ljust(w) if i == 0 else text.rjust(w)
            for i, (text, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    inputs = report["inputs"]

    def counts(values: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in values.items()) or "none"

    lines += [
        "",
        f"records read: {inputs['records']}",
        f"rejected: {counts(inputs['rejected'])}",
        f"unattributed: {counts(inputs['unattributed'])}",
        f"duplicates: {counts(inputs['duplicates'])}",
    ]
    return "\n".join(lines)
