"""``streameval replay``: JSONL logs -> the batch join -> a report.

The answer is the pipeline's on the inputs merged in timestamp order (impressions before events
at the same time, file order otherwise), with everything settling at the end. The records are
decoded by the daemon's decoders and scored by its scorer, but joined as one batch
(:func:`join_in_batch`, which says why that is the same), because a record at a time through
the pipeline costs several times more; large inputs are shared by several processes, each
joining the queries of one shard (:func:`_replay_in_shards`). Blank lines are not records.
"""

from __future__ import annotations

import array
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
from streameval.decoding import Decoder
from streameval.errors import ConfigError, InputError
from streameval.pipeline import Pipeline
from streameval.records import EventFields, Ignored, ImpressionFields, Rejection, fields_key
from streameval.scoring import Scorer, Sums
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

    ``workers`` processes share the work (None: :func:`default_workers`; see
    :func:`_replay_in_shards`); the answer is the same with any number. With ``keep``, the
    records are left in it instead of being freed on return, for a caller that is about to
    exit (the command line: freeing millions of small objects one by one is work the end of the
    process does at once).
    """
    for path in (impressions, *events):
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file" if not Path(path).exists() else f"{path}: not a file")
    if settings.input.uses_kafka_timestamp:
        raise ConfigError(
            'input: ts = "@timestamp" takes the time of the Kafka record, which a file does not '
            "have; replay needs the path of a time field in the records (README, Your logs)"
        )
    progress = progress or Progress()
    labels: dict[tuple[str, ...], tuple[str, ...]] = {}  # the groups read (in this process)
    # the event-time guard measures from the start of the replay
    started = time.time()
    decoder = Decoder(settings, lambda: started)
    sources = [_Source(impressions, settings.impressions_topic, _impression_decoder(decoder, labels))]
    for path in events:
        topic = Path(path).stem
        sources.append(_Source(path, topic, _event_decoder(decoder, topic)))
    if workers is None:
        workers = default_workers(sum(os.path.getsize(source.path) for source in sources))
    # Replay holds every query until the end: the cyclic garbage collector would rescan that
    # growing heap again and again (a third of the run) and find nothing, since none of it
    # forms cycles. It is off for the run and back on afterwards (and off in the workers).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        pipeline = None
        if workers > 1:
            try:
                pipeline = _replay_in_shards(settings, sources, workers, progress, keep, labels)
            except _OneProcess as why:
                progress.stage(f"replaying in one process: {why}")
        if pipeline is None:
            # not fed record by record: it holds the counters, the scorer and the totals
            pipeline = Pipeline(settings)
            c = pipeline.counters
            decoding = _Decoding(progress, c.consumed, c.rejected, c.ignored)
            imps, evs = decoding.records(sources[:1]), decoding.records(sources[1:])
            join_in_batch(pipeline, imps, evs, keep, progress)
    finally:
        if keep is not None:
            gc.freeze()  # what is kept is not garbage: the collector need never scan it again
        if gc_was_enabled:
            gc.enable()
    return pipeline


#: inputs smaller than this are replayed in one process: a worker would cost more than it saves
PARALLEL_FROM_BYTES = 4 << 20
MAX_WORKERS = 4  # each one more passes more records between processes (through the main one)


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


def _impression_decoder(
    decoder: Decoder, shared_labels: dict[tuple[str, ...], tuple[str, ...]]
) -> Callable[[bytes], ImpressionFields | Rejection]:
    """Decodes an impression, its shown list compacted and its group labels one tuple per group,
    in ``shared_labels`` (held by all its queries, and sent once in a batch of records: marshal
    writes an object it has written before as a reference)."""
    impression = decoder.impression

    def decode(raw: bytes) -> ImpressionFields | Rejection:
        # the shown list as the join keeps it (compact), made where the records are decoded
        fields = impression(raw)
        if type(fields) is Rejection:
            return fields
        query_id, ts, items, group = fields  # type: ignore[misc]
        return query_id, ts, compact(items), shared_labels.setdefault(group, group)  # type: ignore[return-value]

    return decode


def _event_decoder(decoder: Decoder, topic: str) -> Callable[[bytes], EventFields | Rejection | Ignored]:
    return functools.partial(decoder.event, topic=topic)


class _Source(NamedTuple):
    path: str
    topic: str
    decode: Callable[[bytes], Any]


class _Decoding:
    """Decodes the lines of the input files, counting each as consumed and each bad one as
    rejected by its reason, and yields the good records."""

    def __init__(
        self,
        progress: Progress,
        consumed: Counter[str] | None = None,
        rejected: Counter[tuple[str, str]] | None = None,
        ignored: Counter[tuple[str, str]] | None = None,
    ) -> None:
        self.progress = progress
        self.consumed: Counter[str] = Counter() if consumed is None else consumed
        self.rejected: Counter[tuple[str, str]] = Counter() if rejected is None else rejected
        self.ignored: Counter[tuple[str, str]] = Counter() if ignored is None else ignored
        self.read = 0  # lines read, for the progress lines

    def records(self, sources: Sequence[_Source]) -> Iterator[Any]:
        """The good records of these files, one after the other."""
        for source in sources:
            yield from self.part(source, 0, None)

    def part(self, source: _Source, start: int, end: int | None) -> Iterator[Any]:
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
                    elif type(record) is Ignored:
                        self.ignored[(topic, record.type)] += 1
                    else:
                        yield record
        except OSError as exc:
            raise _unreadable(source.path, exc) from None
        self.consumed[topic] += read - self.read
        self.read = read


def _unreadable(path: str, exc: OSError) -> InputError:
    """The error for an input file that cannot be read, when cutting it or reading it."""
    return InputError(f"{path}: cannot be read ({exc.strerror})")


def _cuts(path: str, parts: int) -> list[int]:
    """``parts + 1`` byte offsets that cut the file at line ends into parts of about equal size."""
    cuts = [0]
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            for part in range(1, parts):
                at = size * part // parts
                if at <= cuts[-1]:
                    cuts.append(cuts[-1])
                    continue
                handle.seek(at - 1)
                handle.readline()  # to the end of the line that holds byte at - 1
                cuts.append(handle.tell())
    except OSError as exc:
        raise _unreadable(path, exc) from None
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


# --- several processes ---------------------------------------------------------------------------

#: a shard's answer (:func:`_join`): its counts, and its groups (labels -> first settling time,
#: queries, queries with a relevant item, relevant items, and per metric the values of its
#: queries as the bytes of an array of doubles)
_Shard = tuple[dict[str, int], dict[tuple[str, ...], tuple[float, int, int, int, list[bytes]]]]


class _OneProcess(Exception):
    """Why a replay in several processes cannot give the answer: it is done in one instead."""


def _replay_in_shards(
    settings: Settings,
    sources: list[_Source],
    n: int,
    progress: Progress,
    keep: list[object] | None,
    labels: dict[tuple[str, ...], tuple[str, ...]],
) -> Pipeline:
    """The replay in ``n`` processes, this one and n - 1 forked workers; raises _OneProcess
    when it must be done in one process.

    Every rule of the join relates the records of one query to each other, but one: the copies
    of an event id count once, whatever their queries. So the queries are dealt to the
    processes by a hash of their id, and each joins and scores its share. Each process decodes
    one part of every file (cut at line ends), deals the records to their shards, and sends
    each shard its records (this process passes on what the workers send each other); a shard
    then holds its records in the order of the files, as one process would read them. Each
    shard keeps the first copy of each event id among its records; before the events are
    judged, the shards settle the ids kept in more than one (:func:`_ids_here`,
    :func:`_ids_in_worker`): the earliest copy counts, the others are duplicates. Each worker
    sends its shard's counts and per group its queries' values back; this process adds them up,
    and the means are the same as from one process, since each group's values are summed
    correctly rounded (``math.fsum``), whatever their order.

    Done in one process instead (from the start): when the earliest copies of an event id in two
    shards have one time (which is first is a matter of the files' order, which the shards do
    not share), when there are more groups than ``max_groups`` or values of a label than its
    ``labels_max_values`` (which admit them in the order they first settle), or when a worker
    cannot be started or stops.
    """
    pipeline = Pipeline(settings)
    cuts = [_cuts(source.path, n) for source in sources]
    workers: list[_Worker] = []
    try:
        for part in range(1, n):
            worker = _Worker.start(functools.partial(_work, pipeline, sources, cuts, part, n), workers)
            if worker is None:
                raise _OneProcess("no process could be forked")
            workers.append(worker)
        decoding = _Decoding(progress)
        mine = _deal(decoding, sources, cuts, 0, n)
        too_many = f"more groups than max_groups ({settings.max_groups})"
        if settings.labels_max_values:
            too_many += " or values of a label than labels_max_values"
        if pipeline.group_cap.would_fold(labels):  # in this process's part alone
            raise _OneProcess(too_many)
        progress.stage(f"passing records between {n} processes")
        # the records each worker read for the other shards: [worker][shard] (its own left out)
        sent = [[worker.receive() for _ in range(n - 1)] for worker in workers]
        for to, worker in enumerate(workers, start=1):
            for part in range(n):
                if part == 0:
                    worker.send(marshal.dumps(mine[to]))
                elif part != to:
                    worker.send(sent[part - 1][to if to < part else to - 1])
        for to in range(1, n):
            mine[to] = []  # sent: freed before the loads below build this shard's records (peak RSS)
        parts = [mine[0]] + [marshal.loads(frames[0]) for frames in sent]
        del sent
        progress.stage(f"joining and scoring in {n} processes")
        left: list[object] = [mine, parts]  # for ``keep``, once the replay is done here
        own = _join(
            pipeline.settings,
            pipeline.scorer,
            _in_order(parts, range(1)),
            _in_order(parts, range(1, len(sources))),
            left,
            settle_ids=functools.partial(_ids_here, workers),
        )
        shards = [own]
        for worker in workers:
            consumed, rejected, ignored, their_shard = marshal.loads(worker.receive())
            decoding.consumed.update(consumed)
            decoding.rejected.update(rejected)
            decoding.ignored.update(ignored)
            shards.append(their_shard)
        if pipeline.group_cap.would_fold(group for _, groups in shards for group in groups):
            raise _OneProcess(too_many)
        pipeline.counters.consumed.update(decoding.consumed)
        pipeline.counters.rejected.update(decoding.rejected)
        pipeline.counters.ignored.update(decoding.ignored)
        # before the workers are stopped: each leaves once it has sent its answer, and the
        # system frees its memory meanwhile (stop() waits for that)
        _settle(pipeline, shards)
    except (EOFError, OSError):  # from a pipe: the files' errors are InputErrors
        raise _OneProcess("a worker stopped") from None
    finally:
        for worker in workers:
            worker.stop()
    if keep is not None:
        keep += left
    return pipeline


def _deal(
    decoding: _Decoding, sources: list[_Source], cuts: list[list[int]], part: int, n: int
) -> list[list[list[Any]]]:
    """The good records of part ``part`` of every file, dealt to the ``n`` shards by their query:
    [shard][file] -> records in the file's order."""
    shards: list[list[list[Any]]] = [[[] for _ in sources] for _ in range(n)]
    last = part == n - 1
    for number, (source, offsets) in enumerate(zip(sources, cuts, strict=True)):
        appends = [shard[number].append for shard in shards]
        for record in decoding.part(source, offsets[part], None if last else offsets[part + 1]):
            appends[hash(record[0]) % n](record)  # the query id's hash: one seed in every process
    return shards


def _in_order(parts: list[list[list[Any]]], files: Iterable[int]) -> Iterator[Any]:
    """A shard's records of these files, from every part: [part][file] -> the files' order."""
    for number in files:
        for part in parts:
            yield from part[number]


def _work(
    pipeline: Pipeline,
    sources: list[_Source],
    cuts: list[list[int]],
    part: int,
    n: int,
    main: _Frames,
) -> None:
    """A worker: part ``part`` of every file decoded and dealt, each other shard's records
    sent to the main process, its own shard's received and joined (the event ids it shares with
    other shards settled with the main process) and scored, and that sent."""
    progress = Progress(every=math.inf)  # the main process prints the progress
    progress.mask = -1  # ...and this one never looks at the clock
    decoding = _Decoding(progress)
    mine = _deal(decoding, sources, cuts, part, n)
    for shard in range(n):
        if shard != part:
            main.send(marshal.dumps(mine[shard]))
            mine[shard] = []
    parts = [mine[part] if other == part else marshal.loads(main.receive()) for other in range(n)]
    own = _join(
        pipeline.settings,
        pipeline.scorer,
        _in_order(parts, range(1)),
        _in_order(parts, range(1, len(sources))),
        settle_ids=functools.partial(_ids_in_worker, main),
    )
    main.send(marshal.dumps((dict(decoding.consumed), dict(decoding.rejected), dict(decoding.ignored), own)))


def _id_hashes(seen: dict[str, EventFields]) -> array.array[int]:
    """The hashes of the event ids kept in a shard."""
    return array.array("q", map(hash, seen))


def _copies(seen: dict[str, EventFields], hashes: bytes) -> list[tuple[str, float]]:
    """The kept event ids of a shard with one of these hashes, each with its copy's time."""
    wanted = set(array.array("q", hashes))
    return [(key, ev[3]) for key, ev in seen.items() if hash(key) in wanted]


def _ids_in_worker(main: _Frames, seen: dict[str, EventFields]) -> int:
    """A worker's side of :func:`_ids_here`: the copies it keeps that do not count are left out
    of ``seen``; returns how many."""
    main.send(_id_hashes(seen).tobytes())
    shared = main.receive()
    if not shared:  # the common case: no event id kept in two shards
        return 0
    main.send(marshal.dumps(_copies(seen, shared)))
    dropped = marshal.loads(main.receive())
    for event_id in dropped:
        del seen[event_id]
    return len(dropped)


def _ids_here(workers: list[_Worker], seen: dict[str, EventFields]) -> int:
    """Settles the event ids kept in more than one shard, this process's ``seen`` and each
    worker's: of the copies each shard keeps (its earliest), the earliest counts and the
    others are left out; returns how many here. Raises _OneProcess when two have one time."""
    union = set(map(hash, seen))  # the hashes of the shards so far
    shared: set[int] = set()  # ... of two or more of them
    for worker in workers:
        hashes = array.array("q", worker.receive())
        shared.update(union.intersection(hashes))
        if worker is not workers[-1]:
            union.update(hashes)
    frame = array.array("q", sorted(shared)).tobytes()
    for worker in workers:
        worker.send(frame)
    if not shared:
        return 0
    found: dict[str, list[tuple[float, int]]] = {}  # event id -> (time of the copy, shard)
    for event_id, ts in _copies(seen, frame):
        found.setdefault(event_id, []).append((ts, 0))
    for shard, worker in enumerate(workers, start=1):
        for event_id, ts in marshal.loads(worker.receive()):
            found.setdefault(event_id, []).append((ts, shard))
    dropped: list[list[str]] = [[] for _ in range(len(workers) + 1)]
    for event_id, copies in found.items():
        if len(copies) < 2:  # one id of a hash two ids share
            continue
        copies.sort()
        if copies[0][0] == copies[1][0]:
            raise _OneProcess("copies of an event id at one time under queries of two shards")
        for _ts, shard in copies[1:]:
            dropped[shard].append(event_id)
    for shard, worker in enumerate(workers, start=1):
        worker.send(marshal.dumps(dropped[shard]))
    for event_id in dropped[0]:
        del seen[event_id]
    return len(dropped[0])


class _Frames:
    """Length-prefixed byte strings over a pipe."""

    def __init__(self, inbox: BinaryIO | None, outbox: BinaryIO | None) -> None:
        self.inbox, self.outbox = inbox, outbox

    def receive(self) -> bytes:
        """The next frame; EOFError when the other end has gone."""
        assert self.inbox is not None
        head = self.inbox.read(8)
        size = int.from_bytes(head, "little")
        frame = self.inbox.read(size) if len(head) == 8 else b""
        if len(head) < 8 or len(frame) < size:
            raise EOFError("the other end of the pipe went away")
        return frame

    def send(self, frame: bytes) -> None:
        """Writes the frame (an OSError, BrokenPipeError, when the other end has gone)."""
        assert self.outbox is not None
        self.outbox.write(len(frame).to_bytes(8, "little"))
        self.outbox.write(frame)
        self.outbox.flush()


class _Worker(_Frames):
    """A forked process running ``work(frames)``, frames a pipe each way to this process."""

    def __init__(self, pid: int, inbox: BinaryIO, outbox: BinaryIO) -> None:
        super().__init__(inbox, outbox)
        self.pid: int | None = pid

    @classmethod
    def start(cls, work: Callable[[_Frames], None], others: list[_Worker]) -> _Worker | None:
        """The worker, or None when no process can be forked."""
        if not hasattr(os, "fork"):  # not on Windows
            return None
        from_worker, to_main = os.pipe()
        from_main, to_worker = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (to_main, from_worker, from_main, to_worker):
                os.close(fd)
            return None
        if pid == 0:  # the worker: it ends here, whatever happens, without the main process's exit work
            code = 1
            try:
                for other in others:  # its pipes to the workers before it are not this one's
                    for stream in (other.inbox, other.outbox):
                        if stream is not None:
                            os.close(stream.fileno())
                os.close(from_worker)
                os.close(to_worker)
                with os.fdopen(from_main, "rb") as inbox, os.fdopen(to_main, "wb") as outbox:
                    work(_Frames(inbox, outbox))
                code = 0
            except (KeyboardInterrupt, OSError, EOFError, InputError):
                pass  # stopped, the main process went away, or a file it reads again and reports
            except BaseException as exc:  # a bug: said, and the main process goes on alone
                sys.stderr.write(f"streameval replay: a worker failed ({type(exc).__name__}: {exc})\n")
            finally:
                os._exit(code)
        os.close(to_main)
        os.close(from_main)
        return cls(pid, os.fdopen(from_worker, "rb"), os.fdopen(to_worker, "wb"))

    def stop(self) -> None:
        for stream in (self.inbox, self.outbox):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # a write to a worker that had gone
                    pass
        self.inbox = self.outbox = None
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)  # done, or not needed any more
            os.waitpid(self.pid, 0)
            self.pid = None


# --- the batch join ------------------------------------------------------------------------------

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
    scored once, from its best grades, where the daemon updates its values event by event; and
    each group's values are summed correctly rounded, where the daemon adds them in turn).
    The impressions' shown lists come as :func:`~streameval.scoring.query.compact` made them.

    Why a batch gives the same answer: with everything remembered until the end, nothing the
    join decides depends on the watermark. Each rule of the join (README, Definitions) then
    reads only times: an impression's duplicates lose to the first in that order, the earliest
    copy; an event's duplicates likewise; a kept event counts for the kept impression of its
    query when ``imp.ts <= ev.ts <= imp.ts + horizon`` (an event before its impression waits
    as an orphan and is then judged ``before_impression`` -- the same verdict), is
    ``unknown_query`` without one, and nothing is late. A query's values depend on the best
    grade of each item only, whatever the order of its events. What does depend on order is
    done in it: groups are admitted under the ``max_groups`` cap in the order they first settle.
    """
    _settle(pipeline, [_join(pipeline.settings, pipeline.scorer, impressions, events, keep, progress)])


def _join(
    settings: Settings,
    scorer: Scorer,
    impressions: Iterable[ImpressionFields],
    events: Iterable[EventFields],
    keep: list[object] | None = None,
    progress: Progress | None = None,
    settle_ids: Callable[[dict[str, EventFields]], int] | None = None,
) -> _Shard:
    """The join of :func:`join_in_batch` and the values of each query, per group, not yet added
    up. With ``settle_ids``, the events kept are handed to it before they are judged: it leaves
    out copies of event ids that count in another shard, and says how many.

    No per-record pipeline step is needed: the records are deduplicated into dicts, the events
    judged, and only queries with attributed events scored -- the others count as queries with
    no relevant item. A dict keeps the position of a key's first insertion; an impression that
    replaces an earlier copy is deleted and inserted again, so the dict of impressions stays in
    the order its winners came in, and a stable sort by time gives the merged order, in which
    the groups first settle.
    """
    # query_id -> [ts, group, shown list (compact), best grades of the items attributed to it:
    # None, an (item, grade) pair or a dict]
    kept: dict[str, list[Any]] = {}
    duplicate_impressions = 0
    # one tuple per group, held by all its queries (the decoder shares them among the records
    # one process decodes; records passed from another process come with their own)
    shared_labels: dict[tuple[str, ...], tuple[str, ...]] = {}
    for query_id, ts, items, group in impressions:
        group = shared_labels.setdefault(group, group)
        entry = kept.get(query_id)
        if entry is None:
            kept[query_id] = [ts, group, items, None]
        else:
            duplicate_impressions += 1
            if ts < entry[0]:  # earlier in time: it comes first in the merge
                del kept[query_id]
                kept[query_id] = [ts, group, items, None]
    # the events kept: by event id, and those without one by their fields_key; apart, so that
    # the ids (which alone can be shared by shards) are a dict of strings only, hashed in C
    # (both typed dict[Any, ...] for ``seen``, which is one or the other)
    by_id: dict[Any, EventFields] = {}
    by_fields: dict[Any, EventFields] = {}
    key: str | tuple[str, ...]
    duplicate_events = 0
    for ev in events:
        query_id, item, event_type, ts, event_id = ev
        if event_id is None:
            seen, key = by_fields, fields_key(query_id, item, event_type, ts)
        else:
            seen, key = by_id, event_id
        first = seen.get(key)
        if first is None:
            seen[key] = ev
        else:
            duplicate_events += 1
            if ts < first[3]:  # copies of an event_id may differ: the earliest counts
                seen[key] = ev
    if settle_ids is not None:
        duplicate_events += settle_ids(by_id)

    if progress is not None:
        progress.stage(f"judging {len(by_id) + len(by_fields):,} events against {len(kept):,} queries")
    rules = {t: (grade, settings.horizon_for(t)) for t, grade in settings.grades.items()}
    unknown = before = after = n_attributed = 0
    for query_id, item, event_type, ts, _ in itertools.chain(by_id.values(), by_fields.values()):
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

    if progress is not None:
        progress.stage(f"scoring {len(kept):,} queries")
    values_once = scorer.values_once
    rows: dict[tuple[str, ...], tuple[float, list[tuple[int, tuple[float, ...] | None]]]] = {}
    for ts, labels, items, best in sorted(kept.values(), key=_entry_ts):
        group_rows = rows.get(labels)
        if group_rows is None:
            group_rows = rows[labels] = (ts, [])
        if best is None:
            group_rows[1].append(_NOT_SCORED)
        else:
            group_rows[1].append(values_once(items, best.items()))
    n_metrics = len(scorer.metrics)
    groups = {}
    for labels, (first_ts, label_rows) in rows.items():
        scored = [row for row in label_rows if row[1] is not None]
        columns = zip(*[values for _, values in scored], strict=True) if scored else [()] * n_metrics
        groups[labels] = (
            first_ts,
            len(label_rows),
            len(scored),
            sum([n for n, _ in scored]),
            [array.array("d", column).tobytes() for column in columns],
        )
    counts = {
        "duplicate_impressions": duplicate_impressions,
        "duplicate_events": duplicate_events,
        "before_impression": before,
        "after_horizon": after,
        "unknown_query": unknown,
        "attributed": n_attributed,
    }
    if keep is not None:
        keep += (kept, by_id, by_fields)
    return counts, groups


def _settle(pipeline: Pipeline, shards: list[_Shard]) -> None:
    """Add the shards' counts to the pipeline's, and their groups to its settled totals: the
    groups admitted under ``max_groups`` in the order they first settle, each group's values
    summed correctly rounded."""
    counters = pipeline.counters
    counts: Counter[str] = Counter()
    for shard_counts, _ in shards:
        counts.update(shard_counts)
    counters.duplicates["impressions"] += counts["duplicate_impressions"]
    counters.duplicates["events"] += counts["duplicate_events"]
    for reason in ("before_impression", "after_horizon", "unknown_query"):
        if counts[reason]:
            counters.unattributed[reason] += counts[reason]
    counters.attributed += counts["attributed"]

    parts: dict[tuple[str, ...], list[tuple[float, int, int, int, list[bytes]]]] = {}
    for _, groups in shards:
        for labels, part in groups.items():
            parts.setdefault(labels, []).append(part)
    # sorted() is stable: one shard's groups stay in the order they first settled
    in_order = sorted(parts.items(), key=lambda item: min(part[0] for part in item[1]))
    admitted: dict[tuple[str, ...], list[tuple[float, int, int, int, list[bytes]]]] = {}
    for labels, group_parts in in_order:
        group = pipeline.group_of(labels, sum(part[1] for part in group_parts))
        admitted.setdefault(group, []).extend(group_parts)
    n_metrics = len(pipeline.metrics)
    for group, group_parts in admitted.items():
        columns = [[array.array("d", part[4][i]) for part in group_parts] for i in range(n_metrics)]
        pipeline.settled_totals.setdefault(group, Sums(n_metrics)).add_exact(
            sum(part[1] for part in group_parts),
            sum(part[2] for part in group_parts),
            sum(part[3] for part in group_parts),
            columns,
        )


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
    inputs: dict[str, Any] = {
        "records": sum(counters.consumed.values()),
        "rejected": dict(sorted(rejected.items())),
        "unattributed": dict(sorted(counters.unattributed.items())),
        "duplicates": {
            "impressions": counters.duplicates["impressions"],
            "events": counters.duplicates["events"],
        },
    }
    events = pipeline.settings.input.events
    if events is not None and events.ignore_types:
        ignored: Counter[str] = Counter()
        for (_, event_type), count in counters.ignored.items():
            ignored[event_type] += count
        inputs["ignored"] = dict(sorted(ignored.items()))
    return {
        "overall": _block(overall, pipeline),
        "groups": [
            {"labels": dict(zip(group_by, labels, strict=True)), **_block(sums, pipeline)}
            for labels, sums in groups
        ],
        "inputs": inputs,
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
    if "ignored" in inputs:
        lines.append(f"ignored: {counts(inputs['ignored'])}")
    return "\n".join(lines)
