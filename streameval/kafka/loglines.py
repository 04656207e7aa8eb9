"""The loop's log lines that repeat: at most one a minute each, so a long backlog or a lasting
fault shows in the log without flooding it."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

from streameval.view import View

log = logging.getLogger("streameval.kafka.loop")

INTERVAL_S = 60.0


class LoopLog:
    def __init__(self, topics: Sequence[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.topics = tuple(topics)
        self.clock = clock
        self.next_status = clock() + INTERVAL_S
        self.processed = 0  # since the last status line
        self.failures_logged_at = -math.inf
        self.failures_unlogged = 0
        self.misrouted_logged: dict[str, int] = {}
        self.misrouted_next = 0.0

    def failure(self, message: str) -> None:
        """The first failure in a minute is logged; the rest are counted into one line a minute."""
        now = self.clock()
        if now - self.failures_logged_at < INTERVAL_S:
            self.failures_unlogged += 1
            return
        more = (
            f" ({self.failures_unlogged} more failures in the last minute)" if self.failures_unlogged else ""
        )
        log.warning("checkpoint failed, rewinding to the last committed checkpoint: %s%s", message, more)
        self.failures_logged_at = now
        self.failures_unlogged = 0

    def status(self, view: View, processed: int) -> None:
        """Counts the records processed; one line a minute with the progress."""
        self.processed += processed
        if self.clock() < self.next_status:
            return
        self.next_status = self.clock() + INTERVAL_S
        watermark = view.snapshot.watermark
        log.info(
            "processed %d records in the last %.0f s; lag %d; %d open queries, %d orphans; watermark %s",
            self.processed,
            INTERVAL_S,
            sum(view.consumer_lag.values()),
            view.snapshot.open_queries,
            view.snapshot.orphans_held,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(watermark)) if math.isfinite(watermark) else "-",
        )
        self.processed = 0

    def misrouted(self, view: View) -> None:
        """The topics whose records are not where murmur2 of their query id puts them, and what
        to do: when first seen, then at most once a minute while the counts grow."""
        if self.clock() < self.misrouted_next:
            return
        misrouted = view.snapshot.counters.misrouted
        if not any(n > self.misrouted_logged.get(t, 0) for t, n in misrouted.items()):
            return
        self.misrouted_logged = dict(misrouted)
        self.misrouted_next = self.clock() + INTERVAL_S
        # the impressions placed one way and some events another: their records need not meet
        # in one partition, and the join misses them (that is what breaks the numbers)
        placed_apart = len({topic in misrouted for topic in self.topics}) > 1
        log.warning(
            "misrouted records (not in the partition murmur2 of their query_id gives), so far: %s.%s "
            "Fix the producer's partitioner (librdkafka's default is CRC32: set "
            "partitioner=murmur2_random) or its key (query_id), or name the topic in repartition and "
            "the daemon re-keys it (README, Repartitioning)",
            ", ".join(f"{t} {n}" for t, n in sorted(misrouted.items())),
            " The impressions and the events are placed differently, so a query's records may not "
            "meet: the join counts them unknown_query."
            if placed_apart
            else "",
        )
