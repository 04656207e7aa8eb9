"""Feeding the join: fetched records decoded into each partition's aligner, handed out in
event-time order to its pipeline, rejected ones copied to the dead-letter topic, records of a
partition other than murmur2 of their query_id gives counted as misrouted; records of the
repartitioned topics handed to the stage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafka import TopicPartition
from kafka.errors import KafkaError

from streameval.config import Settings
from streameval.kafka.align import Entry, kafka_seconds
from streameval.kafka.client import CheckpointProducer
from streameval.kafka.deadletter import dead_letter_record
from streameval.kafka.ends import EndOffsets
from streameval.kafka.partitions import PartitionState
from streameval.kafka.placement import Placement
from streameval.kafka.sources import Sources
from streameval.kafka.stage import Stage
from streameval.pipeline import Pipeline
from streameval.records import Ignored, Rejection
from streameval.view import Latency

log = logging.getLogger("streameval.kafka.loop")

QUIET_MARGIN_S = 2.0  # beyond a commit interval, before a repartition topic counts as complete
DEAD_LETTER_LIMIT = 1_000_000


class Feed:
    def __init__(
        self,
        settings: Settings,
        transactions: CheckpointProducer,
        ends: EndOffsets,
        stage: Stage | None,
        partition_count: int | None,
        wall_clock: Callable[[], float],
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        position: Callable[[TopicPartition], int | None] | None = None,
        sources: Sources | None = None,
    ) -> None:
        self.settings = settings
        self.transactions = transactions
        self.ends = ends
        self.stage = stage
        self.wall_clock = wall_clock
        self.topics = settings.join_topics
        #: the name a repartition topic's records count under: their source topic's
        self.counted_as = {settings.repartition_topic(t): t for t in settings.repartition}
        #: where the default partitioner puts each query (records elsewhere count as misrouted)
        self.placement = Placement(partition_count) if partition_count else None
        self.latency = Latency()
        #: bytes a dead-letter record may take (the smaller of the producer's max_request_size and
        #: the topic's max.message.bytes; halved when the broker still refuses one)
        self.dead_letter_limit = dead_letter_limit
        #: the consumer's position in a partition, known without a request
        self.position = position
        #: whether every record of the repartitioned topics has been committed into theirs
        self.sources = sources
        #: the last feed left nothing to do: every active partition processed all it fetched
        #: and each of its inputs is caught up (the loop then publishes its view at once)
        self.idle = False

    def feed(self, batches: dict[TopicPartition, list[Any]], partitions: dict[int, PartitionState]) -> int:
        """A poll's records into the stage and the aligners, then everything they let go through
        the stage and the pipelines; returns the records the pipelines processed."""
        stage = self.stage
        for tp, messages in batches.items():
            if stage is not None and tp.topic in self.settings.repartition:
                stage.push(tp, messages)
                continue
            ps = partitions.get(tp.partition)
            if ps is None or not ps.active or not messages:
                continue
            ps.aligner.extend(tp.topic, self._decode(ps.pipeline, tp.topic, messages))  # type: ignore[arg-type]
            ps.fetched[tp.topic] = messages[-1].offset + 1
        if stage is not None:
            stage.drain()
        self.idle = True  # until a partition is left with something to do (_drain)
        return sum(self._drain(p, ps) for p, ps in partitions.items() if ps.active)

    def _decode(self, pipeline: Pipeline, topic: str, messages: list[Any]) -> list[Entry]:
        """A partition's fetched records of ``topic``, decoded: in one call to the native core
        where it is installed, one at a time where each needs its Kafka timestamp."""
        counted_as = self.counted_as.get(topic, topic)
        if pipeline.decoder.wants_kafka_ts:
            records = [
                pipeline.decode(counted_as, m.value if m.value is not None else b"", kafka_seconds(m))
                for m in messages
            ]
        else:
            records = pipeline.decode_values(counted_as, [m.value for m in messages])
        return [Entry(topic, m.offset, r, m) for m, r in zip(messages, records, strict=True)]

    def _drain(self, partition: int, ps: PartitionState) -> int:
        """Feeds the pipeline what the aligner lets go, in order; ticks it when all is caught up."""
        pipeline = ps.pipeline
        assert pipeline is not None  # active
        caught_up = self._caught_up(partition, ps)
        behind = self._behind(partition, ps)
        processed = 0
        placement, counted_as = self.placement, self.counted_as
        handle, next_offsets = pipeline.handle, ps.next_offsets  # looked up once, not per record
        stamps: list[int] = []  # the records' Kafka timestamps (ms), for the latency histogram
        for entry in ps.aligner.take(caught_up, behind):
            record, topic = entry.record, counted_as.get(entry.topic, entry.topic)
            if type(record) is Rejection:
                self._dead_letter(partition, entry, record)
                pipeline.counters.dead_lettered[(topic, record.reason)] += 1
            elif placement is not None and type(record) is not Ignored:
                if placement.partition_of(record.query_id) != partition:  # type: ignore[union-attr]
                    pipeline.counters.misrouted[topic] += 1
            handle(topic, record)
            timestamp = getattr(entry.message, "timestamp", None)
            if timestamp is not None and timestamp > 0:
                stamps.append(timestamp)
            next_offsets[entry.topic] = entry.offset + 1
            processed += 1
        if stamps:
            now = self.wall_clock()
            self.latency.observe_all([now - timestamp / 1000.0 for timestamp in stamps])
        if not len(ps.aligner) and all(caught_up(t) for t in self.topics):
            pipeline.tick()
        else:
            self.idle = False
        return processed

    def _caught_up(self, partition: int, ps: PartitionState) -> Callable[[str], bool]:
        """A topic of this partition is caught up when what was fetched reaches its known end; a
        repartition topic, also only while every source record is committed into it
        (:mod:`~streameval.kafka.sources`), the stage here has nothing pending and its end has
        not grown for a commit interval."""
        fetched_all = self.ends.caught_up(partition, ps)
        if self.stage is None:
            return fetched_all
        stage, quiet_for = self.stage, self.settings.commit_interval + QUIET_MARGIN_S
        sources = self.sources
        assert sources is not None  # made with the stage

        def caught_up(topic: str) -> bool:
            if topic not in self.counted_as:
                return fetched_all(topic)
            tp = TopicPartition(topic, partition)
            if not fetched_all(topic) and not self._past_the_end(tp):
                return False
            return not sources.pending and stage.idle() and self.ends.quiet(tp, quiet_for)

        return caught_up

    def _behind(self, partition: int, ps: PartitionState) -> Callable[[str], bool]:
        """A topic of this partition has committed records on the broker not fetched yet; a
        repartition topic also while some source record is not committed into it yet."""
        sources, rekeyed = self.sources, self.counted_as

        def behind(topic: str) -> bool:
            tp = TopicPartition(topic, partition)
            if sources is not None and topic in rekeyed and sources.pending:
                return True
            return self.ends.behind(tp, ps.fetched.get(topic), self._position(tp))

        return behind

    def _position(self, tp: TopicPartition) -> int | None:
        try:
            return self.position(tp) if self.position is not None else None
        except KafkaError:
            return None

    def _past_the_end(self, tp: TopicPartition) -> bool:
        """The consumer's position has reached the end: a repartition topic is written in
        transactions and ends on a commit marker, which the position passes but no fetched
        record covers."""
        end = self.ends.end(tp)
        position = self._position(tp) if end is not None else None
        return position is not None and end is not None and position >= end

    def _dead_letter(self, partition: int, entry: Entry, rejection: Rejection) -> None:
        key, value, headers = dead_letter_record(
            entry.message.key,
            entry.message.value,
            rejection.reason,
            rejection.detail,
            entry.topic,
            partition,
            entry.offset,
            self.dead_letter_limit,
        )
        self.transactions.send_dead_letter(
            self.settings.dead_letter_topic, value, key, headers, self.dead_letter_limit
        )
        log.debug("rejected %s[%d]@%d: %s", entry.topic, partition, entry.offset, rejection.detail)
