"""The repartitioned topics with the confluent-kafka backend (README, Repartitioning).

With kafka-python the group's own assignor gives every partition of the repartitioned topics to
one member (:class:`~streameval.kafka.assignor.CooperativeCopartitioned`), which runs the stage.
librdkafka takes no assignor of ours: the group's is the broker's ``range`` (KIP-848) or the
classic eager ``range``. So :class:`StagedConsumer` keeps the repartitioned topics out of the
group and gives them to the member that owns partition 0 of the impressions (one member at a
time, as the group's assignment is): it reads them with a second consumer that is assigned
them and never joins the group, and hands the loop an assignment, revocations and records as if
the group had assigned them, so the loop and the stage (:mod:`~streameval.kafka.stage`) are the
same on both backends.

Their offsets go into the checkpoint's transaction with the group's metadata, as the inputs'
do (the broker takes committed offsets of partitions the group does not assign): a member that
has lost partition 0 -- its generation or member epoch is over -- can no longer commit them,
and its transaction, with what its stage wrote, is aborted. A member gives them up only after
the checkpoint its listener takes when partition 0 is revoked, so their next owner reads them
from where this one stopped.
"""

from __future__ import annotations

import logging
from typing import Any

from kafka import TopicPartition

from streameval.config import Settings
from streameval.kafka.librdkafka import LibrdkafkaConsumer
from streameval.kafka.protocols import CLASSIC

log = logging.getLogger(__name__)


class StagedConsumer:
    """The group consumer (:class:`~streameval.kafka.client.Consumer`) with the repartitioned
    topics read outside the group by the member that owns ``anchor``."""

    def __init__(self, settings: Settings, group: LibrdkafkaConsumer) -> None:
        self.settings = settings
        self.group = group
        self.sources = frozenset(settings.repartition)
        self.anchor = TopicPartition(settings.impressions_topic, 0)
        #: assigned them while this member owns them, never subscribed; made at start-up, where
        #: a broker that cannot be reached is reported (not in a rebalance's callback)
        self.reader = LibrdkafkaConsumer(settings, CLASSIC)
        #: the partitions of the repartitioned topics this member owns now
        self.owned: set[TopicPartition] = set()

    def _source(self, tp: TopicPartition) -> bool:
        return tp.topic in self.sources

    def _split(self, tps: Any) -> tuple[list[TopicPartition], list[TopicPartition]]:
        mine: list[TopicPartition] = []
        group: list[TopicPartition] = []
        for tp in tps:
            (mine if self._source(tp) else group).append(tp)
        return mine, group

    # membership
    def subscribe(self, topics: list[str], listener: Any) -> None:
        consumer = self

        class Listener:
            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                if consumer.anchor in assigned and not consumer.owned:
                    consumer._own()
                listener.on_partitions_assigned(assigned | consumer.owned)

            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                given_up = consumer.anchor in revoked
                # the listener's checkpoint commits their offsets while this member still may
                listener.on_partitions_revoked(revoked | consumer.owned if given_up else revoked)
                if given_up:
                    consumer._disown()

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                listener.on_partitions_lost(lost | consumer.owned)
                consumer._disown()

        self.group.subscribe([t for t in topics if t not in self.sources], Listener())

    def _own(self) -> None:
        tps = {
            TopicPartition(topic, p)
            for topic in self.sources
            for p in self.group.partitions_for_topic(topic) or ()
        }
        self.reader.assign(tps)
        self.owned = tps
        log.info("partition 0 of %s is this member's: it reads the repartitioned topics", self.anchor.topic)

    def _disown(self) -> None:
        if self.owned:
            self.reader.unassign()
        self.owned = set()

    def assignment(self) -> set[TopicPartition]:
        return self.group.assignment() | self.owned

    def poll_round(self, timeout_ms: int, broker_silent: bool) -> dict[TopicPartition, list[Any]]:
        staged = self.reader.poll_round(0, broker_silent) if self.owned else {}
        out = self.group.poll_round(0 if staged else timeout_ms, broker_silent)
        for tp, records in staged.items():
            if tp in self.owned:  # not given up by a rebalance inside the group's poll
                out[tp] = records
        return out

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]:
        return self.poll_round(timeout_ms, False)

    def rejoining(self) -> bool:
        return self.group.rejoining()

    def group_metadata(self) -> Any:
        return self.group.group_metadata()

    def eager_generation(self) -> tuple[str, int] | None:
        return self.group.eager_generation()

    # positions: a repartitioned topic's on the reader (only while owned), the others' on the group
    def _on(self, tp: TopicPartition) -> LibrdkafkaConsumer:
        if self._source(tp) and tp in self.owned:
            return self.reader
        return self.group

    def known_position(self, tp: TopicPartition) -> int | None:
        return self._on(tp).known_position(tp)

    def position(self, tp: TopicPartition) -> int:
        return self._on(tp).position(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._on(tp).highwater(tp)

    def pause(self, *tps: TopicPartition) -> None:
        mine, group = self._split(tps)
        self.group.pause(*group)
        self.reader.pause(*(tp for tp in mine if tp in self.owned))

    def resume(self, *tps: TopicPartition) -> None:
        mine, group = self._split(tps)
        self.group.resume(*group)
        self.reader.resume(*(tp for tp in mine if tp in self.owned))

    def paused(self) -> set[TopicPartition]:
        return self.group.paused() | self.reader.paused()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._on(tp).seek(tp, offset)

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._on(tp).seek_to_beginning(tp)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._on(tp).seek_to_end(tp)

    # offsets and metadata: the group consumer's admin requests, for any topic
    def beginning_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return self.group.beginning_offsets(tps, timeout_ms)

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return self.group.end_offsets(tps, timeout_ms)

    def request_end_offsets(self, tps: list[TopicPartition], timeout_ms: int) -> Any:
        return self.group.request_end_offsets(tps, timeout_ms)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self.group.partitions_for_topic(topic)

    def close(self, autocommit: bool = False, timeout_ms: int = 0) -> None:
        self.group.close(autocommit, timeout_ms)  # its listener gives them up first
        self.reader.close()
