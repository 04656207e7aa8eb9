"""Sequential regression detectors (README, Regression detectors): a CUSUM per group against the
control on the same surface, and one against the group's own reference period.

Pure and deterministic: :meth:`Detectors.minute` takes one event-time minute's settled queries
per group (count, sum and sum of squares of the first metric's per-query values, as the query
counts under ``no_relevant``), and the minutes must come in order. The state is plain numbers
(:meth:`Detectors.to_dict`), so a checkpoint holds it and ``replay`` computes the same values.

Per minute m, group g and its comparison r (the control group's minute m, or the reference: the
same group's hour one reference period earlier):

- ``d = mean_g(m) - mean_r``, ``v = var_g / n_g(m) + var_r / n_r``, where the variances come
  from an exponentially weighted baseline of each group (half-life ``HALF_LIFE_MIN`` minutes)
  and, for a reference hour of N queries, ``n_r = N / 60`` (a minute's worth: the same
  reference error enters 60 minutes, so its variance counts as a minute's);
- ``theta = min_effect * mean_r``, the smallest drop the detector is for, and the log
  likelihood ratio of "drop theta" against "no drop" for a normal d: ``llr = theta (-d -
  theta / 2) / v``;
- ``C(m) = min(h, max(0, C(m-1) + llr))``, ``h = ln(arl in minutes)``: the alarm goes on when C
  reaches h and off when C is back at 0 (Page's CUSUM, held at h while alarmed, re-armed at 0).

A minute where either side has no counted query, or a baseline is still warming up (fewer than
``WARMUP`` queries of weight), leaves C as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from streameval.scoring.measures import MEASURES

MINUTE = 60.0
HOUR_MIN = 60
#: half-life of a group's baseline (mean and variance of its per-query values), in minutes
HALF_LIFE_MIN = 60.0
DECAY = 0.5 ** (1.0 / HALF_LIFE_MIN)
#: queries of weight a baseline needs before its group is compared
WARMUP = 30.0

Group = tuple[str, ...]
#: count, sum, sum of squares of per-query values
Moments = list[float]

QUIET, WATCHING, ALARM, WARMING = "quiet", "watching", "alarm", "warming up"
#: the detector kinds, as the ``versus`` label of the gauges shows them
KINDS = ("control", "reference")


class DetectorRow(NamedTuple):
    """One detector as the exporter, the live page and replay's report show it."""

    versus: str  # "control" or "reference"
    group: Group
    state: str
    statistic: float
    threshold: float
    alarms: int
    difference: float | None
    stderr: float | None
    onset: int | None  # the minute whose data raised the last alarm


def threshold(arl_minutes: float, information: float) -> float:
    """The threshold h at which a CUSUM of normal log likelihood ratios, gaining ``information``
    (the Kullback-Leibler divergence I of the design drop) a minute, runs ``arl_minutes`` on
    average between false alarms, by Siegmund's approximation ARL = (e^b - b - 1) / I with
    b = h + 1.166 sqrt(2 I). At least 1."""
    if information <= 0.0:
        return math.inf
    shift = 1.166 * math.sqrt(2.0 * information)
    b = math.log(max(arl_minutes * information, 1.0))
    for _ in range(4):  # b = ln(ARL I + b + 1) converges in a few steps
        b = math.log(arl_minutes * information + b + 1.0)
    return max(1.0, b - shift)


def mean_var(m: Moments) -> tuple[float, float]:
    """Mean and sample variance of moments with weight m[0] > 1."""
    n, s, q = m
    mean = s / n
    return mean, max(0.0, (q - s * mean) / (n - 1.0))


class Cusum:
    """One CUSUM: its statistic and whether it is alarmed; ``alarms`` counts onsets."""

    __slots__ = ("value", "alarmed", "alarms", "h", "onset", "last")

    def __init__(
        self,
        value: float = 0.0,
        alarmed: bool = False,
        alarms: int = 0,
        h: float = 0.0,
        onset: int | None = None,
    ) -> None:
        self.value, self.alarmed, self.alarms = value, alarmed, alarms
        #: the minute whose data raised the last alarm
        self.onset = onset
        #: the threshold of the last step (0 before the first)
        self.h = h
        #: the last minute's comparison: (difference of means, its standard error), for gauges
        self.last: tuple[float, float] | None = None

    def step(self, minute: int, llr: float, h: float) -> bool:
        """Add one minute's log likelihood ratio; True when this step raised the alarm."""
        self.h = h
        self.value = min(h, max(0.0, self.value + llr))
        if not self.alarmed and self.value >= h:
            self.alarmed = True
            self.alarms += 1
            self.onset = minute
            return True
        if self.alarmed and self.value <= 0.0:
            self.alarmed = False
        return False

    def state(self) -> str:
        return ALARM if self.alarmed else WATCHING if self.value > 0.0 else QUIET


def control_lookup(group_by: Sequence[str], control: Mapping[str, str]) -> Callable[[Group], Group | None]:
    """group -> its control group (config ``control``): the same labels but the control's; None
    for the control itself, or when ``control`` names a label that is not grouped by."""

    def lookup(group: Group) -> Group | None:
        if not control or any(label not in group_by for label in control):
            return None
        other = tuple(control.get(name, value) for name, value in zip(group_by, group, strict=True))
        return None if other == group else other

    return lookup


class Detectors:
    """Both detectors of every group, fed one complete minute at a time."""

    def __init__(
        self, min_effect: float, arl: float, reference: float, control_of: Callable[[Group], Group | None]
    ) -> None:
        self.min_effect = min_effect
        self.arl_minutes = arl / MINUTE
        self.reference_min = int(round(reference / MINUTE))
        #: group -> its control group (None for the control itself), looked up once per group
        self.control_of = control_of
        self.controls: dict[Group, Group | None] = {}
        self.last_minute: int | None = None
        self.baselines: dict[Group, Moments] = {}
        #: group -> hour index -> moments of that hour (kept for one reference period)
        self.hours: dict[Group, dict[int, Moments]] = {}
        self.cusums: dict[tuple[str, Group], Cusum] = {}

    @classmethod
    def of(cls, settings: Any) -> Detectors | None:
        """The detectors ``settings`` configure; None when the first metric is weighted
        (``wmap``: no per-query value to test)."""
        if MEASURES[settings.metrics[0].name].weighted:
            return None
        return cls(
            settings.detect_min_effect,
            settings.detect_arl,
            settings.detect_reference,
            control_lookup(settings.group_by, settings.control),
        )

    # --- input ---------------------------------------------------------------------------------

    def minute(self, minute: int, sums: Mapping[Group, Moments]) -> list[tuple[str, Group]]:
        """One complete minute (impression time in [60 minute, 60 minute + 60)): per group the
        moments of its counted queries. Returns the (kind, group) alarms it raised."""
        if self.last_minute is not None and minute <= self.last_minute:
            raise ValueError(f"minute {minute} after minute {self.last_minute}")
        if self.last_minute is not None and minute - 1 > self.last_minute:
            self._age(minute - 1 - self.last_minute)  # the minutes without a settled query
        raised = []
        for group in sorted(sums):
            moments = sums[group]
            if moments[0] <= 0:
                continue
            control = self._control(group)
            if control is not None:
                other = sums.get(control)
                if other is not None and other[0] > 0:
                    base = self.baselines.get(control)
                    rate = None if base is None else base[0] * (1.0 - DECAY)
                    if self._compare("control", minute, group, moments, base, other, other[0], rate):
                        raised.append(("control", group))
            ref_hour = (minute - self.reference_min) // HOUR_MIN
            ref = self.hours.get(group, {}).get(ref_hour)
            if ref is not None and ref[0] >= WARMUP:
                if self._compare(
                    "reference", minute, group, moments, ref, ref, ref[0] / HOUR_MIN, ref[0] / HOUR_MIN
                ):
                    raised.append(("reference", group))
        self._remember(minute, sums)
        self.last_minute = minute
        return raised

    def _control(self, group: Group) -> Group | None:
        if group not in self.controls:
            self.controls[group] = self.control_of(group)
        return self.controls[group]

    def _compare(
        self,
        kind: str,
        minute: int,
        group: Group,
        moments: Moments,
        base_r: Moments | None,
        minute_r: Moments,
        n_r: float,
        rate_r: float | None,
    ) -> bool:
        """One step of a CUSUM: ``moments`` against ``minute_r``, worth ``n_r`` queries, whose
        side has the baseline ``base_r`` and ``rate_r`` counted queries a minute."""
        base_g = self.baselines.get(group)
        if base_g is None or base_r is None or rate_r is None or base_g[0] < WARMUP or base_r[0] < WARMUP:
            return False
        _, var_g = mean_var(base_g)
        mean_r, var_r = mean_var(base_r)
        d = moments[1] / moments[0] - minute_r[1] / minute_r[0]
        v = var_g / moments[0] + var_r / n_r
        theta = self.min_effect * mean_r
        cusum = self.cusums.get((kind, group))
        if cusum is None:
            cusum = self.cusums[(kind, group)] = Cusum()
        cusum.last = (d, math.sqrt(v))
        if v <= 0.0 or theta <= 0.0 or var_g + var_r <= 0.0:
            return False
        usual = var_g / (base_g[0] * (1.0 - DECAY)) + var_r / rate_r  # v at the usual traffic
        h = threshold(self.arl_minutes, theta * theta / (2.0 * usual))
        return cusum.step(minute, theta * (-d - theta / 2.0) / v, h)

    def _age(self, minutes: int) -> None:
        """Every baseline ``minutes`` older."""
        decay = DECAY**minutes
        for base in self.baselines.values():
            for i in range(3):
                base[i] *= decay

    def _remember(self, minute: int, sums: Mapping[Group, Moments]) -> None:
        """Age every baseline by a minute, add this minute (weight 1), and keep each group's
        hours for one reference period. So when minute m is compared, a minute m' < m weighs
        2^(-(m - 1 - m') / 60)."""
        self._age(1)
        hour = minute // HOUR_MIN
        oldest = (minute - self.reference_min) // HOUR_MIN
        for group, moments in sums.items():
            base = self.baselines.setdefault(group, [0.0, 0.0, 0.0])
            hours = self.hours.setdefault(group, {})
            current = hours.setdefault(hour, [0.0, 0.0, 0.0])
            for i in range(3):
                base[i] += moments[i]
                current[i] += moments[i]
        for hours in self.hours.values():
            for gone in [h for h in hours if h < oldest]:
                del hours[gone]

    # --- output --------------------------------------------------------------------------------

    def rows(self) -> list[DetectorRow]:
        """Every detector, for the exporter, the live page and replay's report."""
        out = []
        for (kind, group), c in sorted(self.cusums.items()):
            d, se = c.last if c.last is not None else (None, None)
            state = self.state(kind, group)
            out.append(DetectorRow(kind, group, state, c.value, c.h, c.alarms, d, se, c.onset))
        return out

    def state(self, kind: str, group: Group) -> str:
        cusum = self.cusums.get((kind, group))
        return WARMING if cusum is None or cusum.last is None else cusum.state()

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers, for a checkpoint."""
        return {
            "last_minute": self.last_minute,
            "baselines": [[list(g), b] for g, b in self.baselines.items()],
            "hours": [[list(g), [[h, m] for h, m in hours.items()]] for g, hours in self.hours.items()],
            "cusums": [
                [
                    k,
                    list(g),
                    c.value,
                    c.alarmed,
                    c.alarms,
                    c.h,
                    c.onset,
                    None if c.last is None else list(c.last),
                ]
                for (k, g), c in self.cusums.items()
            ],
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """Take the state :meth:`to_dict` gave."""
        self.last_minute = data["last_minute"]
        self.baselines = {tuple(g): list(b) for g, b in data["baselines"]}
        self.hours = {tuple(g): {h: list(m) for h, m in hours} for g, hours in data["hours"]}
        self.cusums = {}
        for kind, g, value, alarmed, alarms, h, onset, last in data["cusums"]:
            cusum = self.cusums[(kind, tuple(g))] = Cusum(value, alarmed, alarms, h, onset)
            cusum.last = None if last is None else (last[0], last[1])


def run_minutes(detectors: Detectors, minutes: Iterable[tuple[int, Mapping[Group, Moments]]]) -> int:
    """Feed complete minutes in order; returns how many alarms they raised."""
    return sum(len(detectors.minute(m, sums)) for m, sums in minutes)
