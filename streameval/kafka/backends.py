"""Backends: the Kafka client libraries that can make the daemon's clients (the interface of
:mod:`~streameval.kafka.client`), chosen by ``kafka_client``: kafka-python (the default) or
confluent-kafka (:mod:`~streameval.kafka.librdkafka`: its consumer and checkpoint producer; the
changelog reader stays kafka-python's). Either way kafka-python's record batches are read by the
native core where it is installed (:mod:`~streameval.kafka.batches`)."""

from __future__ import annotations

from dataclasses import dataclass

from streameval.config import Settings
from streameval.kafka import batches
from streameval.kafka.changelog import Restorer
from streameval.kafka.checkpoint import Transactions
from streameval.kafka.client import ChangelogReader, CheckpointProducer, Consumer
from streameval.kafka.clients import make_consumer, make_producer


@dataclass(frozen=True)
class Backend:
    """How one Kafka client library makes the daemon's three clients."""

    name: str

    def consumer(self, settings: Settings) -> Consumer:
        """The group member reading the inputs."""
        return make_consumer(settings)

    def transactions(self, settings: Settings, txn_id: str, timeout_ms: int) -> CheckpointProducer:
        """The checkpoints' transactional producer, not connected yet (``connect()``)."""
        return Transactions(lambda: make_producer(settings, txn_id, timeout_ms), group_id=settings.group_id)

    def changelog_reader(self, settings: Settings) -> ChangelogReader:
        """The reader of the changelog and of the group's committed offsets."""
        return Restorer(settings)


class Librdkafka(Backend):
    """confluent-kafka's consumer and transactional producer (librdkafka)."""

    def consumer(self, settings: Settings) -> Consumer:
        from streameval.kafka.librdkafka import LibrdkafkaConsumer
        from streameval.kafka.protocols import broker_protocol

        consumer = LibrdkafkaConsumer(settings, broker_protocol(settings))
        if not settings.repartition:
            return consumer
        from streameval.kafka.rdstage import StagedConsumer

        return StagedConsumer(settings, consumer)

    def transactions(self, settings: Settings, txn_id: str, timeout_ms: int) -> CheckpointProducer:
        from streameval.kafka.rdproducer import LibrdkafkaTransactions

        return LibrdkafkaTransactions(settings, txn_id, timeout_ms)


KAFKA_PYTHON = Backend("kafka-python")
CONFLUENT_KAFKA = Librdkafka("confluent-kafka")


def backend_for(settings: Settings) -> Backend:
    """The backend ``kafka_client`` names; a ConfigError naming the key when it cannot run."""
    batches.install()
    if settings.kafka_client == KAFKA_PYTHON.name:
        return KAFKA_PYTHON
    from streameval.kafka import librdkafka

    librdkafka.check_available()
    return CONFLUENT_KAFKA
