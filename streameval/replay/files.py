"""The input files of a replay: decoded line by line, or cut at line ends into parts."""

from __future__ import annotations

import functools
import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from streameval import native
from streameval.config import Settings
from streameval.decoding import Decoder
from streameval.errors import InputError
from streameval.kafka.placement import Placement, partition_of_key
from streameval.records import Ignored, ImpressionFields, Rejection
from streameval.replay.progress import Progress

#: one tuple per group: the labels every query of the group holds
Labels = dict[tuple[str, ...], tuple[str, ...]]


#: bytes read at a time where a whole block of lines is decoded in one call
BLOCK_BYTES = 1 << 22


class Source(NamedTuple):
    """An input file, the topic its records count under, and their decoder (one line; and,
    with the native core, a block of whole lines in one call, and a block's lines of one shard
    of the queries: ``shard_lines(block, shard, shards)``)."""

    path: str
    topic: str
    decode: Callable[[bytes], Any]
    decode_lines: Callable[[bytes], native.Lines] | None = None
    shard_lines: Callable[[bytes, int, int], native.ShardLines] | None = None


def sources(
    settings: Settings, decoder: Decoder, impressions: str, events: Sequence[str], labels: Labels
) -> list[Source]:
    """The impressions file first, then each events file (its topic: the file's name without
    its extension)."""
    found = [
        Source(
            impressions,
            settings.impressions_topic,
            _impression_decoder(decoder, labels),
            decoder.impression_lines(labels),
            decoder.impression_shard_lines(labels),
        )
    ]
    for path in events:
        topic = Path(path).stem
        decode = functools.partial(decoder.event, topic=topic)
        lines, shard_lines = decoder.event_lines(topic), decoder.event_shard_lines(topic)
        found.append(Source(path, topic, decode, lines, shard_lines))
    return found


def _impression_decoder(
    decoder: Decoder, shared_labels: Labels
) -> Callable[[bytes], ImpressionFields | Rejection]:
    """Decodes an impression, its shown list compacted and its group labels one tuple per group,
    in ``shared_labels`` (held by all its queries, and sent once in a batch of records: marshal
    writes an object it has written before as a reference)."""
    impression = decoder.impression_compacted  # the shown list as the join keeps it

    def decode(raw: bytes) -> ImpressionFields | Rejection:
        fields = impression(raw)
        if type(fields) is Rejection:
            return fields
        query_id, ts, items, group = fields  # type: ignore[misc]
        return query_id, ts, items, shared_labels.setdefault(group, group)

    return decode


class Decoding:
    """Decodes the lines of the input files, counting each as consumed and each bad one as
    rejected by its reason, and yields the good records. Blank lines are not records."""

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

    def records(self, sources: Sequence[Source]) -> Iterator[Any]:
        """The good records of these files, one after the other."""
        for source in sources:
            yield from self.part(source, 0, None)

    def part(self, source: Source, start: int, end: int | None) -> Iterator[Any]:
        """The good records of the lines from byte ``start`` to ``end`` (None: the end of the file)."""
        if end is not None and end <= start:
            return
        if source.decode_lines is not None:
            yield from self._blocks(source, source.decode_lines, start, end)
            return
        topic, decode = source.topic, source.decode
        progress, mask, rejected = self.progress, self.progress.mask, self.rejected
        read = self.read
        try:
            with open(source.path, "rb") as handle:
                lines: Iterable[bytes] = handle
                if end is not None:
                    lines = itertools.islice(handle, count_lines(handle, start, end))
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
            raise unreadable(source.path, exc) from None
        self.consumed[topic] += read - self.read
        self.read = read

    def _blocks(
        self, source: Source, decode_lines: Callable[[bytes], native.Lines], start: int, end: int | None
    ) -> Iterator[Any]:
        """:meth:`part` a block of whole lines at a time, each decoded in one call; the lines
        it leaves (to reject, or unusual) decoded one by one as :meth:`part` does."""
        topic, decode = source.topic, source.decode
        read = self.read
        for block in blocks(source.path, start, end):
            records, slow = decode_lines(block)
            read += len(records)
            for i in slow:
                records[i] = self._good(topic, decode(records[i]))
            self.progress.update("read", read)
            yield from (filter(None, records) if slow else records)
        self.consumed[topic] += read - self.read
        self.read = read

    def shard(self, source: Source, shard: int, shards: int) -> Iterator[Any]:
        """The good records of the whole file whose queries are shard ``shard`` of ``shards``
        (the native core's, :class:`~streameval.kafka.placement.Placement`'s partition of the
        query id), in the file's order, counting the lines this shard decides: its queries'
        lines, and of the lines the native core cannot read a query id from (which every shard
        decodes alike), a good one with it and a bad one by the hash of its bytes. So every line
        is counted by one shard. Needs ``source.shard_lines``."""
        shard_lines = source.shard_lines
        assert shard_lines is not None
        topic, decode, placement = source.topic, source.decode, Placement(shards)
        counted = 0
        seen = self.read  # every line of the files, for the progress lines
        for block in blocks(source.path, 0, None):
            records, slow, everyone = shard_lines(block, shard, shards)
            counted += len(records) - len(everyone)
            seen += block.count(b"\n")
            shared = set(everyone)
            for i in slow:
                line = records[i]
                record = decode(line)
                if i in shared:  # every shard decoded it: one keeps it, or counts it
                    good = type(record) is not Rejection and type(record) is not Ignored
                    owner = placement.partition_of(record[0]) if good else partition_of_key(line, shards)
                    if owner != shard:
                        records[i] = None
                        continue
                    counted += 1
                records[i] = self._good(topic, record)
            self.progress.update("read", seen)
            yield from (filter(None, records) if slow else records)
        self.consumed[topic] += counted
        self.read = seen

    def _good(self, topic: str, record: Any) -> Any:
        """``record`` when it is a good one, else None, a rejected or ignored one counted (the
        lines the block reading leaves, decoded one by one)."""
        if type(record) is Rejection:
            self.rejected[(topic, record.reason)] += 1
            return None
        if type(record) is Ignored:
            self.ignored[(topic, record.type)] += 1
            return None
        return record

    def counts(self) -> tuple[dict[str, int], dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """The counts as plain dicts (to send to another process)."""
        return dict(self.consumed), dict(self.rejected), dict(self.ignored)

    def add(
        self, counts: tuple[dict[str, int], dict[tuple[str, str], int], dict[tuple[str, str], int]]
    ) -> None:
        """Adds another process's :meth:`counts`."""
        consumed, rejected, ignored = counts
        self.consumed.update(consumed)
        self.rejected.update(rejected)
        self.ignored.update(ignored)


def blocks(path: str, start: int, end: int | None) -> Iterator[bytes]:
    """The whole lines from byte ``start`` to ``end`` (None: the end of the file), about
    BLOCK_BYTES at a time (the last line may have no line end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            left = -1 if end is None else end - start
            rest = b""  # a line not ended yet
            while True:
                data = handle.read(BLOCK_BYTES if left < 0 else min(BLOCK_BYTES, left))
                left -= len(data)
                if data:
                    data = rest + data if rest else data
                    cut = data.rfind(b"\n") + 1
                    block, rest = data[:cut], data[cut:]
                    if not block:
                        continue
                elif rest:
                    block, rest = rest, b""  # the last line, without a line end
                else:
                    break
                yield block
    except OSError as exc:
        raise unreadable(path, exc) from None


def check_inputs(paths: Iterable[str]) -> None:
    """InputError for the first path that is not a file."""
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file" if not Path(path).exists() else f"{path}: not a file")


def unreadable(path: str, exc: OSError) -> InputError:
    """The error for an input file that cannot be read, when cutting it or reading it."""
    return InputError(f"{path}: cannot be read ({exc.strerror})")


def cuts(path: str, parts: int) -> list[int]:
    """``parts + 1`` byte offsets that cut the file at line ends into parts of about equal size."""
    found = [0]
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            for part in range(1, parts):
                at = size * part // parts
                if at <= found[-1]:
                    found.append(found[-1])
                    continue
                handle.seek(at - 1)
                handle.readline()  # to the end of the line that holds byte at - 1
                found.append(handle.tell())
    except OSError as exc:
        raise unreadable(path, exc) from None
    found.append(max(size, found[-1]))
    return found


def count_lines(handle: BinaryIO, start: int, end: int) -> int:
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
