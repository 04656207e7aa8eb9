"""Metric names: ``name@k`` strings such as ``map@10``, parsed into :class:`MetricSpec`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streameval.scoring.measures import MEASURES

#: Every metric family streameval computes, in report order (README, Metrics of one query).
METRIC_NAMES = tuple(MEASURES)

_SPEC_RE = re.compile(r"^([a-z]+)@([0-9]+)$")


@dataclass(frozen=True, order=True)
class MetricSpec:
    """One configured metric: a family name and its cut-off k."""

    name: str
    k: int

    @classmethod
    def parse(cls, text: str) -> MetricSpec:
        """Parse ``"map@10"``; raise ValueError with a readable reason otherwise."""
        match = _SPEC_RE.match(text.strip().lower())
        if match is None:
            raise ValueError(f"{text!r} is not of the form name@k (e.g. map@10)")
        name, k = match.group(1), int(match.group(2))
        if name not in METRIC_NAMES:
            raise ValueError(f"unknown metric {name!r} in {text!r}; known: {', '.join(METRIC_NAMES)}")
        if k < 1:
            raise ValueError(f"cut-off k must be at least 1 in {text!r}")
        return cls(name, k)

    def __str__(self) -> str:
        return f"{self.name}@{self.k}"
