"""The detectors' input across partitions (README, Regression detectors): each partition's
minutes handed on as records, combined in any interleaving into the same detectors."""

from __future__ import annotations

import random

import orjson

from streameval.detect import Detectors
from streameval.minutes import Combiner, MinuteSums
from tests.test_detect import CANDIDATE, CONTROL, control_of

PARTITIONS = 3


def detectors() -> Detectors:
    return Detectors(0.05, 86400.0, 3600.0, control_of)


def partition_records(seed: int, minutes: int = 200) -> tuple[list[list[bytes]], dict[int, dict]]:
    """Each partition's minutes-topic records (one per simulated checkpoint), and the minutes
    summed over the partitions in partition order."""
    rng = random.Random(seed)
    sums = [MinuteSums("skip") for _ in range(PARTITIONS)]
    records: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    total: dict[int, dict] = {}
    for m in range(minutes):
        for p in range(PARTITIONS):
            for group in (CONTROL, CANDIDATE):
                for _ in range(rng.randrange(0, 6)):
                    x = 0.0 if group == CANDIDATE and m > 120 and rng.random() < 0.4 else rng.random()
                    sums[p].open.setdefault(m, {}).setdefault(group, [0.0, 0.0, 0.0])
                    moments = sums[p].open[m][group]
                    moments[0] += 1
                    moments[1] += x
                    moments[2] += x * x
            sums[p].first = min(sums[p].open) if sums[p].open else None
        if m % 3 == 2:  # a checkpoint: the frontier has passed the end of minute m - 1
            for p in range(PARTITIONS):
                sums[p].handed_on = True
                record = sums[p].hand_on(p, m * 60.0 + rng.random() * 59)
                if record is not None:
                    records[p].append(orjson.dumps(record))
                    for minute, groups in record["minutes"]:
                        for labels, moments in groups:
                            group = tuple(labels)
                            into = total.setdefault(minute, {}).setdefault(p, {})
                            into[group] = moments
    return records, total


def reference(total: dict[int, dict]) -> Detectors:
    d = detectors()
    for minute in sorted(total):
        merged: dict = {}
        for p in sorted(total[minute]):
            for group, moments in total[minute][p].items():
                if group in merged:
                    merged[group] = [a + b for a, b in zip(merged[group], moments, strict=True)]
                else:
                    merged[group] = list(moments)
        d.minute(minute, merged)
    return d


def test_any_interleaving_gives_the_detectors_of_the_summed_minutes() -> None:
    records, total = partition_records(1)
    want = reference(total)
    assert want.cusums[("control", CANDIDATE)].alarms >= 1
    for seed in range(5):
        rng = random.Random(seed)
        queues = [list(r) for r in records]
        combiner = Combiner(detectors(), PARTITIONS)
        offset = 0
        while any(queues):
            p = rng.choice([i for i, q in enumerate(queues) if q])
            combiner.add(offset, orjson.loads(queues[p].pop(0)))
            offset += 1
        # the last minutes wait for the slowest partition's "through"; all partitions are done
        assert combiner.detectors.last_minute == want.last_minute
        assert combiner.detectors.to_dict() == want.to_dict()


def test_a_restart_from_the_state_reads_on_without_repeating() -> None:
    records, total = partition_records(2)
    stream = [r for trio in zip(*records, strict=False) for r in trio]
    whole = Combiner(detectors(), PARTITIONS)
    for offset, raw in enumerate(stream):
        whole.add(offset, orjson.loads(raw))
    first = Combiner(detectors(), PARTITIONS)
    for offset, raw in enumerate(stream[:40]):
        first.add(offset, orjson.loads(raw))
    second = Combiner(detectors(), PARTITIONS)
    second.load(orjson.loads(orjson.dumps(first.to_dict())))
    for offset, raw in enumerate(stream):  # read from the start again: the first 40 are skipped
        second.add(offset, orjson.loads(raw))
    assert second.to_dict() == whole.to_dict()


def test_a_minute_is_handed_on_once_its_end_is_settled() -> None:
    sums = MinuteSums("skip")
    sums.handed_on = True
    sums.add(100.0, CONTROL, (0.5,))
    sums.add(130.0, CONTROL, (1.0,))
    sums.add(130.0, CONTROL, None)  # no relevant item: not counted under skip
    assert sums.hand_on(0, 119.0) == {"p": 0, "through": 0, "minutes": []}
    assert sums.hand_on(0, 119.5) is None  # nothing moved
    record = sums.hand_on(0, 180.0)
    assert record == {
        "p": 0,
        "through": 2,
        "minutes": [[1, [[list(CONTROL), [1.0, 0.5, 0.25]]]], [2, [[list(CONTROL), [1.0, 1.0, 1.0]]]]],
    }
    assert not sums.open
