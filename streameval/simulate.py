"""Simulated traffic: impressions, clicks and purchases of several models, in event-time order.

Pure and deterministic for a seed: :class:`Simulator` yields :class:`Record` objects; writing
them to files or Kafka is the caller's business (``streameval simulate``, ``streameval demo``).

The model of a query (README, "Simulated traffic"):

- a user wants 1-3 items of a 2,000-item catalogue; the model ranks 30 candidates (the wanted
  ones among them) by a score in which the wanted items get a boost that grows with the model's
  quality, plus noise, and serves the top 10-20;
- the user looks at rank r with probability 1 / r^0.7 (position bias), clicks a wanted item seen
  with probability 0.9 and an unwanted one with 0.02, and buys 30% of the wanted items clicked;
  5% of queries also end in a purchase of a wanted item that was not shown;
- ``--regress MODEL:DROP@AT``: from AT on, a share DROP of MODEL's lists miss every wanted item;
  where the user would have engaged, they then buy a wanted item elsewhere (an unshown purchase),
  so such a query still counts, with AP 0. MODEL's expected MAP therefore falls by the share DROP;
- a small share of bad records: not JSON, missing fields, unknown event types, duplicates,
  events of unknown queries, and events later than the allowed lateness.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import orjson

from streameval.config import Settings, parse_duration
from streameval.errors import ConfigError

#: model -> quality in [0, 1]; "control" is the model the others are compared with
MODELS: dict[str, float] = {"control": 0.55, "candidate-a": 0.7, "candidate-b": 0.4}
SURFACES = ("home", "search")
#: share of each model's traffic
SPLIT = {"control": 0.5, "candidate-a": 0.25, "candidate-b": 0.25}
CATALOGUE = 2_000
CANDIDATES = 30
EXAMINE_POWER = 0.7
CLICK_WANTED, CLICK_OTHER, BUY_AFTER_CLICK, BUY_UNSHOWN = 0.9, 0.02, 0.3, 0.05
#: share of records of each bad kind
BAD_SHARE = 0.002
RECORDS_PER_QUERY = 2.4  # an impression and ~1.4 events, measured on the default models


@dataclass(frozen=True)
class Regression:
    """From ``at`` seconds after the start, a share ``drop`` of ``model``'s lists miss every
    wanted item."""

    model: str
    drop: float
    at: float

    @classmethod
    def parse(cls, text: str) -> Regression:
        """``MODEL:DROP@AT``, e.g. ``candidate-a:0.3@10m``."""
        try:
            model, rest = text.rsplit(":", 1)
            drop_text, at_text = rest.split("@", 1)
            drop = float(drop_text)
            at = parse_duration(at_text)
        except (ValueError, ConfigError):
            raise ConfigError(
                f"--regress: {text!r} is not MODEL:DROP@AT (e.g. candidate-a:0.3@10m)"
            ) from None
        if not model or not 0.0 < drop <= 1.0:
            raise ConfigError(f"--regress: {text!r}: DROP must be a share in (0, 1], the model non-empty")
        return cls(model, drop, at)


@dataclass(frozen=True, slots=True)
class Record:
    """One record: ``kind`` is "impression", "click" or "purchase"; ``value`` the bytes."""

    ts: float
    kind: str
    key: bytes
    value: bytes


class Simulator:
    """Traffic from ``start`` (epoch seconds) at ``rate`` records per second of event time."""

    def __init__(
        self,
        seed: int = 1,
        start: float = 0.0,
        rate: float = 100.0,
        regressions: Sequence[Regression] = (),
        models: dict[str, float] | None = None,
        bad_share: float = BAD_SHARE,
        click_delay: float = 20.0,
        purchase_delay: float = 120.0,
        late_by: float = 600.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.start = start
        self.models = dict(models or MODELS)
        unknown = [r.model for r in regressions if r.model not in self.models]
        if unknown:
            raise ConfigError(
                f"--regress: no model {unknown[0]!r}; the simulated models are {', '.join(self.models)}"
            )
        weights = [SPLIT.get(m, 1.0 / len(self.models)) for m in self.models]
        self.choices = list(self.models)
        self.weights = weights
        self.query_gap = RECORDS_PER_QUERY / rate  # mean seconds between queries
        self.regressions = list(regressions)
        self.bad_share = bad_share
        self.click_delay, self.purchase_delay, self.late_by = click_delay, purchase_delay, late_by
        self.queries = 0

    # --- the stream ----------------------------------------------------------------------------

    def records(self, until: float = math.inf) -> Iterator[Record]:
        """Every record with event time before ``until``, in event-time order (but for the
        deliberately late ones, which come late)."""
        pending: list[tuple[float, int, Record]] = []  # heap of records not yet due
        seq = 0
        t = self.start
        while True:
            t += self.rng.expovariate(1.0 / self.query_gap)
            while pending and pending[0][0] <= t:
                yield heapq.heappop(pending)[2]
            if t >= until:
                break
            for record in self.query(t):
                seq += 1
                heapq.heappush(pending, (record.ts, seq, record))
        while pending and pending[0][0] < until:
            yield heapq.heappop(pending)[2]

    def query(self, ts: float) -> list[Record]:
        """One query's impression and events (some of them bad, duplicated or late)."""
        rng = self.rng
        self.queries += 1
        qid = f"q{self.queries:09d}-{rng.getrandbits(24):06x}"
        model = rng.choices(self.choices, self.weights)[0]
        surface = SURFACES[0] if rng.random() < 0.6 else SURFACES[1]
        wanted = rng.sample(range(CATALOGUE), rng.choice((1, 1, 2, 2, 3)))
        others = [i for i in rng.sample(range(CATALOGUE), CANDIDATES + 3) if i not in wanted]
        candidates = wanted + others[: CANDIDATES - len(wanted)]
        length = rng.randint(10, 20)
        quality = self.models[model]
        boost = 2.5 * quality
        scored = sorted(candidates, key=lambda i: -((boost if i in wanted else 0.0) + rng.gauss(0.0, 1.0)))
        served = scored[:length]
        broken = any(
            r.model == model and ts - self.start >= r.at and rng.random() < r.drop for r in self.regressions
        )
        if broken:  # the list misses every wanted item (the engagement is drawn as if it did not)
            missing = [i for i in scored if i not in wanted][:length]
        events: list[tuple[float, str, int]] = []
        for rank, item in enumerate(served, start=1):
            if rng.random() >= 1.0 / rank**EXAMINE_POWER:
                continue
            if rng.random() < (CLICK_WANTED if item in wanted else CLICK_OTHER):
                click_ts = ts + rng.expovariate(1.0 / self.click_delay)
                events.append((click_ts, "click", item))
                if item in wanted and rng.random() < BUY_AFTER_CLICK:
                    events.append((click_ts + rng.expovariate(1.0 / self.purchase_delay), "purchase", item))
        unshown = [i for i in wanted if i not in served]
        if unshown and rng.random() < BUY_UNSHOWN:
            events.append((ts + rng.expovariate(1.0 / self.purchase_delay), "purchase", unshown[0]))
        if broken:
            served = missing
            if events:  # the user would have engaged: they buy what they wanted elsewhere
                first = min(e[0] for e in events)
                events = [(first + rng.expovariate(1.0 / self.purchase_delay), "purchase", wanted[0])]
        key = qid.encode()
        impression = {
            "query_id": qid,
            "ts": round(ts, 3),
            "model": model,
            "surface": surface,
            "items": [f"i{i:04d}" for i in served],
        }
        out = [Record(ts, "impression", key, orjson.dumps(impression))]
        for n, (ets, kind, item) in enumerate(events):
            body = {
                "query_id": qid,
                "item": f"i{item:04d}",
                "type": kind,
                "ts": round(ets, 3),
                "event_id": f"{qid}-{n}",
            }
            out.append(Record(ets, kind, key, orjson.dumps(body)))
        return out + self._trouble(ts, out)

    def _trouble(self, ts: float, good: list[Record]) -> list[Record]:
        """Now and then a bad, duplicated, orphan or late record."""
        rng = self.rng
        if rng.random() >= self.bad_share * 6:
            return []
        kind = rng.randrange(6)
        base = good[-1]
        if kind == 0:
            return [Record(ts, "impression", b"malformed", b'{"query_id": "x", "ts": ')]
        if kind == 1:
            return [Record(ts, "click", base.key, orjson.dumps({"query_id": base.key.decode(), "ts": ts}))]
        if kind == 2:
            value = orjson.dumps({"query_id": base.key.decode(), "item": "i0000", "type": "hover", "ts": ts})
            return [Record(ts, "click", base.key, value)]
        if kind == 3:  # a duplicate (the same bytes again, a moment later)
            return [Record(base.ts + 1.0, base.kind, base.key, base.value)]
        if kind == 4:  # an event of a query that was never served
            qid = f"unknown-{rng.getrandbits(32):08x}"
            value = orjson.dumps({"query_id": qid, "item": "i0001", "type": "click", "ts": round(ts, 3)})
            return [Record(ts, "click", qid.encode(), value)]
        if not self.late_by:
            return []
        # a click that arrives long after its time: it shows up `late_by` seconds later
        value = orjson.dumps(
            {"query_id": base.key.decode(), "item": "i0002", "type": "click", "ts": round(ts, 3)}
        )
        return [Record(ts + self.late_by, "click", base.key, value)]


def topic_of(settings: Settings, kind: str) -> str:
    """The topic a record of ``kind`` goes to: purchases to the second events topic if any."""
    if kind == "impression":
        return settings.impressions_topic
    topics = settings.events_topics
    return topics[1] if kind == "purchase" and len(topics) > 1 else topics[0]
