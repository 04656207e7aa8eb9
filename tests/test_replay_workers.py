"""replay with several worker processes gives the report of one process (README, `streameval replay`)."""

from __future__ import annotations

import os
import random
import tempfile
from io import StringIO
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streameval.config import load_settings
from streameval.kafka.placement import Placement
from streameval.replay import Progress, build_report, run_replay
from streameval.replay.files import cuts as _cuts
from tests.logs import random_log


def write_log(
    directory: Path, seed: int, blank_lines: bool, last_newline: bool, id_copies: bool = True
) -> tuple[str, list[str]]:
    """A random log with bad records, duplicates and orphans, its events in two files (clicks
    and purchases, the second typed by its name), blank lines here and there."""
    rng = random.Random(seed)
    log = random_log(rng, n_queries=rng.randint(1, 120))
    # copies of an event id under other queries (and other items, times, types): one counts
    with_ids = [ev for ev in log.valid_events if "event_id" in ev]
    for ev in rng.sample(with_ids, min(len(with_ids), rng.randint(0, 8) if id_copies else 0)):
        other = rng.choice(log.valid_impressions)
        ts = ev["ts"] + rng.choice([-60.0, -1.0, 0.0, 1.0, 60.0])
        copy = dict(ev, query_id=other["query_id"], item=rng.choice(other["items"]), ts=ts)
        log.events.insert(rng.randrange(len(log.events) + 1), orjson.dumps(copy))
    clicks, purchases = [], []
    for line in log.events:
        event = orjson.loads(line) if line.startswith(b"{") else None
        if event is not None and event.get("type") == "purchase" and rng.random() < 0.5:
            del event["type"]  # the file's name gives it
            purchases.append(orjson.dumps(event))
        else:
            clicks.append(line)

    def write(name: str, lines: list[bytes]) -> str:
        out = []
        for line in lines:
            out.append(line)
            if blank_lines and rng.random() < 0.05:
                out.append(b"  ")
        text = b"\n".join(out) + (b"\n" if last_newline else b"")
        path = directory / name
        path.write_bytes(text)
        return str(path)

    return write("impressions.jsonl", log.impressions), [
        write("clicks.jsonl", clicks),
        write("purchases.jsonl", purchases),
    ]


def replayed(imps: str, events: list[str], workers: int, max_groups: int = 1000) -> tuple[dict, object, list]:
    settings = load_settings(None, {}, {"max_groups": max_groups})
    pipeline = run_replay(settings, imps, events, Progress(StringIO()), workers=workers)
    # the groups admitted: in one process in the order they first settle (test_join); across
    # processes first settling at one time may come in another order
    return build_report(pipeline), pipeline.counters, sorted(pipeline.group_cap.known)


def records_passed(patch: pytest.MonkeyPatch) -> None:
    """Replays in several processes as without the native core: each process decodes a part
    of the lines and they pass each other the records, instead of each reading every line and
    decoding its shard's."""
    from streameval.decoding import Decoder

    patch.setattr(Decoder, "impression_shard_lines", lambda self, labels: None)
    patch.setattr(Decoder, "event_shard_lines", lambda self, topic: None)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(2, 5),
    blank_lines=st.booleans(),
    last_newline=st.booleans(),
    max_groups=st.sampled_from([1000, 3]),
    passed=st.booleans(),
)
def test_any_number_of_workers_gives_the_report_of_one_process(
    seed, workers, blank_lines, last_newline, max_groups, passed
):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        imps, events = write_log(Path(tmp), seed, blank_lines, last_newline)
        alone = replayed(imps, events, 1, max_groups)
        if passed:
            records_passed(patch)
        assert replayed(imps, events, workers, max_groups) == alone


def why_alone(imps: str, events: list[str], workers: int, max_groups: int = 1000) -> str | None:
    """Why the replay was done again in one process; None when it was not."""
    stream = StringIO()
    settings = load_settings(None, {}, {"max_groups": max_groups})
    run_replay(settings, imps, events, Progress(stream, every=0.0), workers=workers)
    why = [line for line in stream.getvalue().splitlines() if "replaying in one process: " in line]
    return why[0].split(": ", 2)[2] if why else None


def test_what_needs_one_process_is_replayed_in_one(tmp_path) -> None:
    imps, events = write_log(tmp_path, 11, False, True, id_copies=False)
    assert why_alone(imps, events, 2) is None
    # more groups than max_groups: admitted in the order they first settle, by one process
    assert why_alone(imps, events, 2, max_groups=2) == "more groups than max_groups (2)"
    assert replayed(imps, events, 2, 2) == replayed(imps, events, 1, 2)


def test_copies_of_an_event_id_under_many_queries_count_once_across_shards(tmp_path) -> None:
    imps, events = write_log(tmp_path, 11, False, True, id_copies=False)
    lines = Path(events[0]).read_bytes().splitlines()
    copies = [orjson.loads(line) for line in lines if line.startswith(b'{"query_id"')][:40]
    original = Path(events[0]).read_bytes()
    # the copies in each shard at other times: the earliest counts, wherever its query is
    with open(events[0], "ab") as out:
        for n, event in enumerate(copies):
            out.write(orjson.dumps(dict(event, event_id="shared", ts=1_700_000_000.0 + n)) + b"\n")
    assert why_alone(imps, events, 2) is None
    assert replayed(imps, events, 2) == replayed(imps, events, 1)
    # all at one time: the first in the files counts, an order the shards do not share
    Path(events[0]).write_bytes(original)
    with open(events[0], "ab") as out:
        for event in copies:
            out.write(orjson.dumps(dict(event, event_id="shared", ts=1_700_000_000.0)) + b"\n")
    assert why_alone(imps, events, 2) == "copies of an event id at one time under queries of two shards"
    assert replayed(imps, events, 2) == replayed(imps, events, 1)


def test_groups_over_max_groups_only_across_parts_are_found_too(tmp_path) -> None:
    # the main process's part of the impressions (up to the line holding its middle byte) has
    # one model, the worker's another: each part alone is within max_groups = 1, the two are not
    imps, events = write_log(tmp_path, 5, False, True, id_copies=False)
    lines = [orjson.loads(line) for line in Path(imps).read_bytes().splitlines() if line.startswith(b'{"q')]
    size = sum(len(orjson.dumps(dict(imp, model="a", surface="s"))) + 1 for imp in lines)
    out, at = [], 0
    for imp in lines:
        line = orjson.dumps(dict(imp, model="a" if at < size // 2 else "b", surface="s")) + b"\n"
        out.append(line)
        at += len(line)
    Path(imps).write_bytes(b"".join(out))
    assert why_alone(imps, events, 2, max_groups=1) == "more groups than max_groups (1)"
    assert replayed(imps, events, 2, 1) == replayed(imps, events, 1, 1)


@pytest.mark.parametrize(("passed", "dies_at"), [(False, 1), (False, 2), (True, 1), (True, 2), (True, 3)])
def test_a_worker_that_dies_leaves_the_replay_to_one_process(tmp_path, monkeypatch, passed, dies_at) -> None:
    import streameval.replay.shards

    imps, events = write_log(tmp_path, 7, True, True, id_copies=False)
    alone = replayed(imps, events, 1)
    if passed:
        records_passed(monkeypatch)
    work = streameval.replay.shards.work

    def dies(pipeline, sources, cuts, part, n, main):
        # with 2 processes a worker sends the hashes of its event ids and its answer, and
        # first, when the records are passed, its records for the other shard: it dies instead
        # of its dies_at-th send
        sends, send = [], main.send

        def send_or_die(frame):
            sends.append(frame)
            if len(sends) == dies_at:
                os._exit(9)
            return send(frame)

        main.send = send_or_die
        work(pipeline, sources, cuts, part, n, main)

    monkeypatch.setattr(streameval.replay.shards, "work", dies)
    assert why_alone(imps, events, 2) == "a worker stopped"
    assert replayed(imps, events, 2) == alone
    monkeypatch.setattr(streameval.replay.shards, "work", lambda *args: os._exit(9))
    assert why_alone(imps, events, 3) == "a worker stopped"


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    last_newline=st.booleans(),
    parts=st.integers(1, 6),
)
def test_cuts_fall_at_line_ends_and_cover_the_file(lines, last_newline, parts) -> None:
    text = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f"
        path.write_bytes(text)
        cuts = _cuts(str(path), parts)
    assert len(cuts) == parts + 1 and cuts[0] == 0 and cuts[-1] == len(text)
    assert cuts == sorted(cuts)
    assert all(at == 0 or at == len(text) or text[at - 1 : at] == b"\n" for at in cuts)
    pieces = [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    assert [line for piece in pieces for line in piece.splitlines()] == text.splitlines()


def test_a_file_that_cannot_be_cut_is_an_input_error(tmp_path) -> None:
    from streameval.errors import InputError

    with pytest.raises(InputError, match="cannot be read"):
        _cuts(str(tmp_path), 2)  # a directory: no lines to cut


#: lines the block reading must leave to the line-by-line path, or read as it does
_UNUSUAL = [
    b'{"query_id":"u1","ts":"2026-01-01T00:00:00Z","items":["a"],"item":"a","type":"click"}\r',
    b'{"query_id":"u2","ts":4102444800,"items":["a"],"item":"a","type":"click"}',  # past max_future
    b'\xef\xbb\xbf{"query_id":"u3","ts":1,"items":["a"]}',
    b'{"query_id":"u4","ts":1,"items":["\xff"],"item":"\xff","type":"click"}',
    b'{"query_id":"u5","ts":1,"items":["a\\u007fb"],"item":"a","type":"view"}',
    b"\t\x0b\x0c \r",
]


def write_unusual_log(
    directory: Path, seed: int, blank_lines: bool, last_newline: bool, unusual: list[bytes]
) -> tuple[str, list[str]]:
    """:func:`write_log` with these lines put in anywhere in every file."""
    rng = random.Random(seed)
    imps, events = write_log(directory, seed, blank_lines, last_newline)
    for path in (imps, *events):
        lines = Path(path).read_bytes().split(b"\n")
        for line in unusual:
            lines.insert(rng.randrange(len(lines) + 1), line)
        Path(path).write_bytes(b"\n".join(lines))
    return imps, events


def unusual_sources(directory: Path, seed: int, blank_lines: bool, last_newline: bool, unusual: list[bytes]):
    """The files of :func:`write_log` with these lines put in anywhere, as ``replay``'s sources
    (skips without the native core, whose block reading the tests hold to the lines')."""
    from streameval import native
    from streameval.decoding import Decoder
    from streameval.replay import files

    if native.core is None:
        pytest.skip("the native core is not installed")
    imps, events = write_unusual_log(directory, seed, blank_lines, last_newline, unusual)
    settings_ = load_settings(None, {}, {})
    return files.sources(settings_, Decoder(settings_, lambda: 1767225600.0), imps, events, {})


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    block=st.sampled_from([1, 7, 64, 1000, 1 << 22]),
    parts=st.integers(1, 4),
    blank_lines=st.booleans(),
    last_newline=st.booleans(),
)
def test_blocks_of_lines_read_as_line_by_line(seed, block, parts, blank_lines, last_newline):
    """The native core's reading of a block of lines at a time (README, Performance) gives the
    records, in order, and the counts that reading line by line gives, for any block size and
    any parts of the files."""
    from streameval.replay import files

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "BLOCK_BYTES", block)
        sources = unusual_sources(Path(tmp), seed, blank_lines, last_newline, _UNUSUAL)
        assert all(source.decode_lines is not None for source in sources)

        def read(blocks: bool) -> tuple:
            decoding = files.Decoding(Progress(StringIO()))
            got = []
            for source in sources:
                source = source if blocks else source._replace(decode_lines=None)
                cut = files.cuts(source.path, parts)
                for start, end in zip(cut, cut[1:], strict=False):
                    got.append(list(decoding.part(source, start, end)))
            return got, decoding.counts()

        assert read(True) == read(False)


#: lines the native core reads no query id from: every shard gets them, and one keeps each
_EVERYONE = [
    b'{"query_id":"d1","query_id":"d2","ts":1,"items":["a"],"item":"a","type":"click"}',  # orjson: d2
    b'{"query_id":5,"ts":1,"items":["a"],"item":"a","type":"click"}',
    b"not json",
    b'{"query_id":"n1","ts":1,"items":["a"],"item":"a","type":"click","x":' + b"[" * 200 + b"]" * 200 + b"}",
]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    block=st.sampled_from([1, 64, 1000, 1 << 22]),
    shards=st.integers(1, 4),
    blank_lines=st.booleans(),
    last_newline=st.booleans(),
)
def test_each_shard_reading_every_line_keeps_its_queries_and_counts_each_line_once(
    seed, block, shards, blank_lines, last_newline
):
    """The native core's reading of every line for one shard of the queries (``replay`` in
    several processes): the shards' records are the records of their queries, in the files'
    order, and their counts add up to those of reading the lines one by one."""
    from streameval.replay import files

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "BLOCK_BYTES", block)
        sources = unusual_sources(Path(tmp), seed, blank_lines, last_newline, _UNUSUAL + _EVERYONE)
        assert all(source.shard_lines is not None for source in sources)
        one = files.Decoding(Progress(StringIO()))
        whole = [list(one.part(source._replace(decode_lines=None), 0, None)) for source in sources]
        assert any(record[0] == "d2" for record in whole[1])  # a good line every shard got
        added = files.Decoding(Progress(StringIO()))
        for shard in range(shards):
            decoding = files.Decoding(Progress(StringIO()))
            got = [list(decoding.shard(source, shard, shards)) for source in sources]
            mine = Placement(shards).partition_of
            assert got == [[r for r in records if mine(r[0]) == shard] for records in whole]
            added.add(decoding.counts())
        assert added.counts() == one.counts()


@pytest.mark.parametrize("seed", [3, 8, 21])
def test_two_processes_reading_every_line_give_the_report_of_one(tmp_path, seed) -> None:
    """With the native core, 2 processes each read every line (README, `streameval replay`):
    lines every process gets, unusual ones and copies of event ids included."""
    from streameval import native
    from streameval.replay import shards

    if native.core is None:
        pytest.skip("the native core is not installed")
    assert shards.READ_ALL >= 2
    imps, events = write_unusual_log(tmp_path, seed, True, True, _UNUSUAL + _EVERYONE)
    assert replayed(imps, events, 2) == replayed(imps, events, 1)
