"""``streameval run``: start-up checks, the HTTP server, the loop, signals, shutdown.

Signal handlers only set a flag; the loop checks it between polls. On the first SIGTERM or
SIGINT the daemon stops consuming, commits a final checkpoint, closes its clients and returns:
exit code 0 when the final checkpoint committed, 1 when it did not (the next owner then resumes
from the one before, so nothing is lost). Shutdown takes at most ``shutdown_timeout``. A second
SIGINT forces the exit at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka.errors import KafkaError

from streameval.collector import FullCollections
from streameval.config import Settings
from streameval.errors import InputError
from streameval.exporter import registry
from streameval.history import History
from streameval.http import Health, make_app, serve
from streameval.kafka import compat
from streameval.kafka.backends import Backend, backend_for
from streameval.kafka.client import CheckpointProducer
from streameval.kafka.clients import transactional_id
from streameval.kafka.loop import ConsumerLoop
from streameval.kafka.topics import Topics
from streameval.signals import stop_on_signals
from streameval.view import View, empty_view

log = logging.getLogger(__name__)


def run(settings: Settings) -> int:
    """Run until a signal; returns the exit code."""
    log.info(
        "starting: brokers %s, group %s, topics %s + %s, kafka settings %s",
        settings.bootstrap_servers,
        settings.group_id,
        settings.impressions_topic,
        ", ".join(settings.events_topics),
        settings.redacted_kafka(),
    )
    compat.drop_timeout_tracebacks()  # else kafka-python's polls keep their records until a full GC
    initial = empty_view(settings, time.time())
    running: list[ConsumerLoop] = []  # the loop, once the clients are up

    def view() -> View:
        return (running[0].view if running else None) or initial

    health = Health()
    history = History()

    def summary() -> dict[str, Any]:
        return history.summary(view(), "wall")

    # bind first: a taken port stops start-up before anything touches Kafka
    server = serve(
        settings.metrics_host, settings.metrics_port, make_app(registry(view), health, view, summary)
    )
    collections = FullCollections(young_after_rounds=True)  # from here: the restore builds the state
    try:
        with stop_on_signals() as stop:
            running.append(_connect(settings))
            loop = running[0]
            log.info("serving /metrics on http://%s:%d/", settings.metrics_host, server.port)
            clean = False
            try:
                loop.subscribe()
                while not stop.requested:
                    loop.run_once()
                    health.beat()
                    history.record(loop.view)
                    collections.tick()
            finally:
                log.info(
                    "stopping: final checkpoint, closing clients (at most %.0f s)", settings.shutdown_timeout
                )
                clean = loop.close()
    finally:
        collections.end()
        server.stop()
    if not clean:
        log.error("stopped, but the final checkpoint did not commit")
        return 1
    log.info("stopped cleanly")
    return 0


def _connect(settings: Settings) -> ConsumerLoop:
    """Clients, topic checks, the dead-letter and changelog topics; raises with a clear message."""
    backend: Backend = backend_for(settings)
    consumer = backend.consumer(settings)
    transactions: CheckpointProducer | None = None
    topics = Topics(settings)
    try:
        start = topics.prepare(consumer)
        txn_id = transactional_id(settings)
        transactions = backend.transactions(settings, txn_id, start.transaction_timeout_ms)
        try:
            transactions.connect()
        except KafkaError as exc:
            raise InputError(
                f"cannot start the checkpoint transactions (transactional id {txn_id}): "
                f"{type(exc).__name__}: {exc}; the broker must allow transactions for this client"
            ) from None
        restorer = backend.changelog_reader(settings)
    except BaseException:
        if transactions is not None:
            transactions.close(timeout=1)
        consumer.close(autocommit=False)
        raise
    log.info("%d partition(s) per input topic; state in %s", start.partitions, settings.changelog_topic)
    return ConsumerLoop(
        settings,
        consumer,
        transactions,
        restorer,
        dead_letter_limit=start.dead_letter_limit,
        partition_count=start.partitions,
        topics=topics,
        transaction_timeout=start.transaction_timeout_ms / 1000,
        detectors=start.detectors,
    )
