"""replay with several worker processes gives the report of one process (README, `streameval replay`)."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streameval.config import load_settings
from streameval.replay import _cuts, _Reader, build_report, run_replay
from tests.logs import random_log


def write_log(directory: Path, seed: int, blank_lines: bool, last_newline: bool) -> tuple[str, list[str]]:
    """A random log with bad records, duplicates and orphans, its events in two files (clicks
    and purchases, the second typed by its name), blank lines here and there."""
    rng = random.Random(seed)
    log = random_log(rng, n_queries=rng.randint(1, 120))
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


def replayed(imps: str, events: list[str], workers: int) -> tuple[dict, object, list]:
    pipeline = run_replay(load_settings(None, {}, {"max_groups": 3}), imps, events, workers=workers)
    return build_report(pipeline), pipeline.counters, list(pipeline.group_cap.known)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    workers=st.integers(2, 5),
    blank_lines=st.booleans(),
    last_newline=st.booleans(),
)
def test_any_number_of_workers_gives_the_report_of_one_process(seed, workers, blank_lines, last_newline):
    with tempfile.TemporaryDirectory() as tmp:
        imps, events = write_log(Path(tmp), seed, blank_lines, last_newline)
        assert replayed(imps, events, workers) == replayed(imps, events, 1)


def test_a_worker_that_dies_leaves_its_parts_to_the_parent(tmp_path, monkeypatch) -> None:
    imps, events = write_log(tmp_path, 7, True, True)
    alone = replayed(imps, events, 1)
    serve = _Reader.serve

    def first_file_only(self, index, out):  # runs in the worker: it sends one file's part and exits
        self.sources, self.cuts = self.sources[:1], self.cuts[:1]
        serve(self, index, out)

    monkeypatch.setattr(_Reader, "serve", first_file_only)
    assert replayed(imps, events, 3) == alone
    monkeypatch.setattr(_Reader, "serve", lambda self, index, out: os._exit(9))
    assert replayed(imps, events, 2) == alone


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
