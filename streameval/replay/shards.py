"""A replay in several processes: this one and forked workers, each joining one shard of the
queries.

Every rule of the join relates the records of one query to each other, but one: the copies of an
event id count once, whatever their queries. So the queries are dealt to the processes by a hash
of their id, and each joins and scores its share. With the native core and two processes each
reads every line of every file and decodes its shard's (:func:`read_shard`: parsing a line costs
less than passing its record, :data:`READ_ALL`). Otherwise each process decodes one part of
every file (cut at line ends), deals the records to their shards, and sends each shard its
records (the main process passes on what the workers send each other). Either way a shard holds
its records in the order of the files, as one process would read them. Each shard keeps the
first copy of each event id among its records; before the events are judged, the shards settle
the ids kept in more than one (:func:`ids_here`, :func:`ids_in_worker`): the earliest copy
counts, the others are duplicates. Each worker sends its shard's counts and per group its
queries' values back; the main process adds them up, and the means are the same as from one
process, since each group's values are summed correctly rounded (``math.fsum``), whatever their
order.

Done in one process instead (from the start, :class:`OneProcess`): when the earliest copies of
an event id in two shards have one time (which is first is a matter of the files' order, which
the shards do not share), when there are more groups than ``max_groups`` or values of a label
than its ``labels_max_values`` (which admit them in the order they first settle), or when a
worker cannot be started or stops.
"""

from __future__ import annotations

import array
import functools
import marshal
from collections.abc import Iterable, Iterator
from typing import Any

from streameval.pipeline import Pipeline
from streameval.records import EventFields
from streameval.replay.batch import Joined, add_up, join
from streameval.replay.files import Decoding, Labels, Source, cuts
from streameval.replay.pipes import Frames, Worker
from streameval.replay.progress import Progress

#: [shard][file] -> records in the file's order
Dealt = list[list[list[Any]]]

#: the most processes that each read every line (with the native core): each then parses all of
#: them, where passing records costs each process a share; measured on 1M records, 2 processes
#: reading all took 2.20-2.63 s against 2.48-2.85 s, and with 3 and 4 the CPU time grew by 0.4-0.6 s
READ_ALL = 2


class OneProcess(Exception):
    """Why a replay in several processes cannot give the answer: it is done in one instead."""


def replay_in_shards(
    pipeline: Pipeline, sources: list[Source], n: int, progress: Progress, labels: Labels
) -> tuple[object, ...]:
    """The replay in ``n`` processes into ``pipeline``; returns what it built (the records).
    Raises OneProcess when it must be done in one process."""
    settings = pipeline.settings
    # up to READ_ALL processes with the native core, every process reads every line, each
    # decoding its shard's; else each decodes its part of the lines, and they pass the records
    read_all = n <= READ_ALL and all(source.shard_lines for source in sources)
    file_cuts = None if read_all else [cuts(source.path, n) for source in sources]
    workers: list[Worker] = []
    too_many = f"more groups than max_groups ({settings.max_groups})"
    if settings.labels_max_values:
        too_many += " or values of a label than labels_max_values"
    try:
        for part in range(1, n):
            worker = Worker.start(functools.partial(work, pipeline, sources, file_cuts, part, n), workers)
            if worker is None:
                raise OneProcess("no process could be forked")
            workers.append(worker)
        decoding = Decoding(progress)
        if file_cuts is None:
            mine = [read_shard(decoding, sources, 0, n)]
        else:
            mine = deal(decoding, sources, file_cuts, 0, n)
        if pipeline.group_cap.would_fold(labels):  # in this process's records alone
            raise OneProcess(too_many)
        if file_cuts is None:
            parts = mine
        else:
            progress.stage(f"passing records between {n} processes")
            parts = _exchange(workers, mine)
        progress.stage(f"joining and scoring in {n} processes")
        own = join(
            settings,
            pipeline.scorer,
            in_order(parts, range(1)),
            in_order(parts, range(1, len(sources))),
            settle_ids=functools.partial(ids_here, workers),
        )
        shards = [own]
        for worker in workers:
            counts, their_shard = marshal.loads(worker.receive())
            decoding.add(counts)
            shards.append(Joined.from_wire(their_shard))
        if pipeline.group_cap.would_fold(group for shard in shards for group in shard.groups):
            raise OneProcess(too_many)
        c = pipeline.counters
        c.consumed.update(decoding.consumed)
        c.rejected.update(decoding.rejected)
        c.ignored.update(decoding.ignored)
        # before the workers are stopped: each leaves once it has sent its answer, and the
        # system frees its memory meanwhile (stop() waits for that)
        add_up(pipeline, shards)
    except (EOFError, OSError):  # from a pipe: the files' errors are InputErrors
        raise OneProcess("a worker stopped") from None
    finally:
        for worker in workers:
            worker.stop()
    return (mine, parts, own.held)


def _exchange(workers: list[Worker], mine: Dealt) -> Dealt:
    """The records of this process's shard from every part: the workers send what they read for
    each other shard, this process passes each worker its records from the others."""
    n = len(workers) + 1
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
    return [mine[0]] + [marshal.loads(frames[0]) for frames in sent]


def read_shard(decoding: Decoding, sources: list[Source], shard: int, n: int) -> list[list[Any]]:
    """The good records of shard ``shard`` (of ``n``) in every file, read whole: [file] -> its
    records in order (the native core's reading, :meth:`Decoding.shard`)."""
    return [list(decoding.shard(source, shard, n)) for source in sources]


def deal(decoding: Decoding, sources: list[Source], file_cuts: list[list[int]], part: int, n: int) -> Dealt:
    """The good records of part ``part`` of every file, dealt to the ``n`` shards by their query."""
    shards: Dealt = [[[] for _ in sources] for _ in range(n)]
    last = part == n - 1
    for number, (source, offsets) in enumerate(zip(sources, file_cuts, strict=True)):
        appends = [shard[number].append for shard in shards]
        for record in decoding.part(source, offsets[part], None if last else offsets[part + 1]):
            appends[hash(record[0]) % n](record)  # the query id's hash: one seed in every process
    return shards


def in_order(parts: Dealt, files: Iterable[int]) -> Iterator[Any]:
    """A shard's records of these files, from every part: [part][file] -> the files' order."""
    for number in files:
        for part in parts:
            yield from part[number]


def work(
    pipeline: Pipeline,
    sources: list[Source],
    file_cuts: list[list[int]] | None,
    part: int,
    n: int,
    main: Frames,
) -> None:
    """A worker: shard ``part``'s records read from every file (with ``file_cuts``: part
    ``part`` of every file decoded and dealt, each other shard's records sent to the main
    process, its own shard's received), joined (the event ids it shares with other shards
    settled with the main process) and scored, and that sent."""
    decoding = Decoding(Progress.silent())  # the main process prints the progress
    if file_cuts is None:
        parts = [read_shard(decoding, sources, part, n)]
    else:
        mine = deal(decoding, sources, file_cuts, part, n)
        for shard in range(n):
            if shard != part:
                main.send(marshal.dumps(mine[shard]))
                mine[shard] = []
        parts = [mine[part] if other == part else marshal.loads(main.receive()) for other in range(n)]
    own = join(
        pipeline.settings,
        pipeline.scorer,
        in_order(parts, range(1)),
        in_order(parts, range(1, len(sources))),
        settle_ids=functools.partial(ids_in_worker, main),
    )
    main.send(marshal.dumps((decoding.counts(), own.wire())))


def _copies(seen: dict[str, EventFields], hashes: bytes) -> list[tuple[str, float]]:
    """The kept event ids of a shard with one of these hashes, each with its copy's time."""
    wanted = set(array.array("q", hashes))
    return [(key, ev[3]) for key, ev in seen.items() if hash(key) in wanted]


def ids_in_worker(main: Frames, seen: dict[str, EventFields]) -> int:
    """A worker's side of :func:`ids_here`: the copies it keeps that do not count are left out
    of ``seen``; returns how many."""
    main.send(array.array("q", map(hash, seen)).tobytes())
    shared = main.receive()
    if not shared:  # the common case: no event id kept in two shards
        return 0
    main.send(marshal.dumps(_copies(seen, shared)))
    dropped = marshal.loads(main.receive())
    for event_id in dropped:
        del seen[event_id]
    return len(dropped)


def _shared_hashes(workers: list[Worker], seen: dict[str, EventFields]) -> bytes:
    """The hashes of event ids kept in two or more shards (this process's and the workers'),
    sent to every worker."""
    union = set(map(hash, seen))  # the hashes of the shards so far
    shared: set[int] = set()
    for worker in workers:
        hashes = array.array("q", worker.receive())
        shared.update(union.intersection(hashes))
        if worker is not workers[-1]:
            union.update(hashes)
    frame = array.array("q", sorted(shared)).tobytes()
    for worker in workers:
        worker.send(frame)
    return frame


def _losing_copies(workers: list[Worker], seen: dict[str, EventFields], frame: bytes) -> list[list[str]]:
    """Per shard, the event ids whose copy there is not the earliest of all shards'."""
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
            raise OneProcess("copies of an event id at one time under queries of two shards")
        for _ts, shard in copies[1:]:
            dropped[shard].append(event_id)
    return dropped


def ids_here(workers: list[Worker], seen: dict[str, EventFields]) -> int:
    """Settles the event ids kept in more than one shard, this process's ``seen`` and each
    worker's: of the copies each shard keeps (its earliest), the earliest counts and the
    others are left out; returns how many here. Raises OneProcess when two have one time."""
    frame = _shared_hashes(workers, seen)
    if not frame:
        return 0
    dropped = _losing_copies(workers, seen, frame)
    for shard, worker in enumerate(workers, start=1):
        worker.send(marshal.dumps(dropped[shard]))
    for event_id in dropped[0]:
        del seen[event_id]
    return len(dropped[0])
