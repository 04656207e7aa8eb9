"""The regression detectors (README, Regression detectors) against the README's formulas
computed from the per-query values themselves, and their state through a checkpoint."""

from __future__ import annotations

import math
import random

import pytest

from streameval.detect import DECAY, MINUTE, WARMUP, Detectors, threshold

CONTROL, CANDIDATE = ("control", "home"), ("candidate", "home")
DAY_MIN = 1440


def control_of(group):
    return None if group[0] == "control" else ("control", group[1])


def traffic(seed, minutes, rates, drop_from=None, drop=0.0):
    """minute -> group -> per-query values: Poisson counts, values in [0, 1] with ties at 0 and 1."""
    rng = random.Random(seed)
    out = {}
    for m in range(minutes):
        per_group = {}
        for group, rate in rates.items():
            n = sum(1 for _ in range(int(rate * 3)) if rng.random() < 1 / 3)
            values = [min(1.0, max(0.0, rng.gauss(0.6, 0.35))) for _ in range(n)]
            if group == CANDIDATE and drop_from is not None and m >= drop_from:
                values = [0.0 if rng.random() < drop else v for v in values]
            if values:
                per_group[group] = values
        out[m] = per_group
    return out


def moments(values):
    return [float(len(values)), sum(values), sum(v * v for v in values)]


def brute_force(minutes, min_effect, arl, reference):
    """The README's CUSUMs from the raw values: every baseline re-summed with its weights."""
    history = []  # (minute, group, values)
    cusum = {}
    out = []
    ref_min = int(reference / MINUTE)

    def weighted(group, before):
        n = s = q = 0.0
        for m, g, values in history:
            if g == group and m < before:
                w = DECAY ** (before - 1 - m)
                n, s, q = n + w * len(values), s + w * sum(values), q + w * sum(v * v for v in values)
        return n, s, q

    def stats(n, s, q):
        mean = s / n
        return mean, max(0.0, (q - s * mean) / (n - 1))

    for m, per_group in sorted(minutes.items()):
        for group in sorted(per_group):
            x = per_group[group]
            sides = []
            other = control_of(group)
            if other is not None and other in per_group:
                base = weighted(other, m)
                sides.append(
                    ("control", base, per_group[other], len(per_group[other]), base[0] * (1 - DECAY))
                )
            hour = (m - ref_min) // 60
            ref = [v for mm, g, vs in history if g == group and mm // 60 == hour for v in vs]
            if len(ref) >= WARMUP:
                sides.append(("reference", moments(ref), ref, len(ref) / 60, len(ref) / 60))
            own = weighted(group, m)
            for kind, base, versus, n_r, rate_r in sides:
                if own[0] < WARMUP or base[0] < WARMUP:
                    continue
                _, var_g = stats(*own)
                mean_r, var_r = stats(*base)
                d = sum(x) / len(x) - sum(versus) / len(versus)
                v = var_g / len(x) + var_r / n_r
                theta = min_effect * mean_r
                h = threshold(
                    arl / MINUTE, theta**2 / (2 * (var_g / (own[0] * (1 - DECAY)) + var_r / rate_r))
                )
                value, alarmed = cusum.get((kind, group), (0.0, False))
                value = min(h, max(0.0, value + theta * (-d - theta / 2) / v))
                alarmed = value >= h or (alarmed and value > 0)
                cusum[(kind, group)] = (value, alarmed)
                out.append((m, kind, group, value, alarmed))
        history.extend((m, g, values) for g, values in per_group.items())
    return out


def run(minutes, detectors, into=None):
    out = []
    for m, per_group in sorted(minutes.items()):
        detectors.minute(m, {g: moments(v) for g, v in per_group.items()})
        for (kind, group), c in sorted(detectors.cusums.items()):
            if group in per_group and c.last is not None and into is None:
                out.append((m, kind, group, c.value, c.alarmed))
    return out


def test_the_cusums_are_the_readme_formulas_on_the_raw_values() -> None:
    minutes = traffic(3, 150, {CONTROL: 8, CANDIDATE: 5}, drop_from=100, drop=0.5)
    reference = 3600.0  # an hour back, so the reference detector runs in a short test
    ours = Detectors(0.05, 86400.0, reference, control_of)
    theirs = brute_force(minutes, 0.05, 86400.0, reference)
    got = {(m, k, g): (v, a) for m, k, g, v, a in run(minutes, ours)}
    assert theirs, "the brute force compared nothing"
    compared = 0
    for m, kind, group, value, alarmed in theirs:
        if (m, kind, group) in got:
            compared += 1
            assert got[(m, kind, group)][0] == pytest.approx(value, rel=1e-9, abs=1e-9)
            assert got[(m, kind, group)][1] == alarmed
    assert compared >= len(theirs) - 5
    assert ours.cusums[("control", CANDIDATE)].alarms >= 1
    assert ours.cusums[("reference", CANDIDATE)].alarms >= 1


def test_a_drop_raises_the_alarm_and_recovery_clears_it() -> None:
    minutes = traffic(5, 700, {CONTROL: 30, CANDIDATE: 20}, drop_from=150, drop=0.3)
    for m in range(300, 700):  # the regression is over: the candidate is the control again
        minutes[m] = traffic(100 + m, 1, {CONTROL: 30, CANDIDATE: 20})[0]
    d = Detectors(0.05, 1000 * 86400.0, 86400.0, control_of)
    states = []
    for m, per_group in sorted(minutes.items()):
        raised = d.minute(m, {g: moments(v) for g, v in per_group.items()})
        states.append((m, d.state("control", CANDIDATE), raised))
    before = [s for m, s, _ in states if m < 150]
    assert "alarm" not in before
    onsets = [m for m, _, raised in states if raised]
    assert len(onsets) == 1 and 150 < onsets[0] < 200
    # it clears about h / I minutes after the recovery: I = theta^2 / 2v, about 0.05 a minute here
    cleared = next(m for m, state, _ in states if m > 300 and state != "alarm")
    assert cleared < 600
    assert d.state("control", CONTROL) == "warming up"  # the control has no control


def test_the_state_through_a_checkpoint_gives_the_same_values() -> None:
    minutes = traffic(7, 240, {CONTROL: 10, CANDIDATE: 6}, drop_from=150, drop=0.2)
    whole = Detectors(0.05, 86400.0, 3600.0, control_of)
    run(minutes, whole)
    first = Detectors(0.05, 86400.0, 3600.0, control_of)
    run({m: v for m, v in minutes.items() if m < 120}, first)
    second = Detectors(0.05, 86400.0, 3600.0, control_of)
    second.load(first.to_dict())
    run({m: v for m, v in minutes.items() if m >= 120}, second)
    assert second.to_dict() == whole.to_dict()


def test_minutes_come_in_order() -> None:
    d = Detectors(0.05, 86400.0, 86400.0, control_of)
    d.minute(10, {CONTROL: [1.0, 0.5, 0.25]})
    with pytest.raises(ValueError):
        d.minute(10, {})


@pytest.mark.parametrize("information", [0.005, 0.05, 0.5, 3.0])
def test_the_threshold_solves_siegmunds_approximation(information: float) -> None:
    arl = 1000 * DAY_MIN
    h = threshold(arl, information)
    b = h + 1.166 * math.sqrt(2 * information)
    assert (math.exp(b) - b - 1) / information == pytest.approx(arl, rel=1e-6)


def test_replay_and_the_pipeline_give_the_same_detector_values(tmp_path) -> None:
    """The daemon's pipeline, fed record by record in time order, and replay's batch on the same
    records: the same minutes through the same detectors (sums to rounding)."""
    import dataclasses

    from streameval.config import load_settings
    from streameval.pipeline import Pipeline
    from streameval.replay import run_replay
    from streameval.simulate import Regression, Simulator, topic_of
    from tests.pipelines import remembering

    settings = load_settings(flags={"detect_reference": "1h"})
    start = 1_767_225_600.0
    sim = Simulator(
        seed=4, start=start, rate=20.0, regressions=[Regression("candidate-a", 0.5, 5400.0)], late_by=0.0
    )
    files = {kind: open(tmp_path / f"{kind}.jsonl", "wb") for kind in ("impression", "click", "purchase")}
    pipeline = Pipeline(remembering(settings))
    pipeline.detectors = Detectors.of(settings)
    for record in sim.records(until=start + 3 * 3600):
        files[record.kind].write(record.value + b"\n")
        topic = topic_of(settings, record.kind)
        pipeline.handle(topic, pipeline.decode(topic, record.value))
    pipeline.finish()
    for handle in files.values():
        handle.close()
    replayed = run_replay(
        dataclasses.replace(settings),
        str(tmp_path / "impression.jsonl"),
        [str(tmp_path / "click.jsonl"), str(tmp_path / "purchase.jsonl")],
        workers=1,
    )
    ours, theirs = pipeline.detectors, replayed.detectors
    assert ours is not None and theirs is not None
    assert ours.last_minute == theirs.last_minute
    assert sorted(ours.cusums) == sorted(theirs.cusums)
    for key, cusum in ours.cusums.items():
        other = theirs.cusums[key]
        assert (cusum.alarms, cusum.alarmed, cusum.onset) == (other.alarms, other.alarmed, other.onset), key
        assert cusum.value == pytest.approx(other.value, rel=1e-9, abs=1e-9)
        assert cusum.h == pytest.approx(other.h, rel=1e-12)
    assert theirs.cusums[("reference", ("candidate-a", "home"))].alarms == 1


def test_minutes_without_queries_age_the_baselines_as_the_readme_says() -> None:
    """Gaps (minutes in which nothing settled) between the minutes fed: the brute force weighs
    each past minute by its age, so the baselines must have aged through the gap too."""
    minutes = traffic(11, 200, {CONTROL: 8, CANDIDATE: 5}, drop_from=150, drop=0.5)
    gappy = {m: v for m, v in minutes.items() if m % 7 not in (3, 4)}
    ours = Detectors(0.05, 86400.0, 3600.0, control_of)
    got = {(m, k, g): (v, a) for m, k, g, v, a in run(gappy, ours)}
    theirs = brute_force(gappy, 0.05, 86400.0, 3600.0)
    assert theirs
    for m, kind, group, value, alarmed in theirs:
        if (m, kind, group) in got:
            assert got[(m, kind, group)][0] == pytest.approx(value, rel=1e-9, abs=1e-9)
            assert got[(m, kind, group)][1] == alarmed
