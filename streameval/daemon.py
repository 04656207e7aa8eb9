"""``streameval run``: start-up checks, the HTTP server, the loop, signals, shutdown.

Signal handlers only set a flag; the loop checks it between polls. On the first SIGTERM or
SIGINT the daemon stops consuming, commits a final checkpoint, closes its clients and returns:
exit code 0 when the final checkpoint committed, 1 when it did not (the next owner then resumes
from the one before, so nothing is lost). Shutdown takes at most ``shutdown_timeout``. A second
SIGINT forces the exit at once.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from kafka.errors import KafkaError

from streameval.collector import FullCollections
from streameval.config import Settings
from streameval.errors import InputError, StreamevalError
from streameval.exporter import registry
from streameval.history import History
from streameval.http import Health, HttpServer, make_app
from streameval.kafka.changelog import Restorer, ensure_changelog
from streameval.kafka.checkpoint import Transactions
from streameval.kafka.clients import (
    broker_max_transaction_timeout_ms,
    check_topics,
    ensure_topic,
    make_admin,
    make_consumer,
    make_producer,
    max_message_bytes,
    transaction_timeout_ms,
    transactional_id,
)
from streameval.kafka.loop import ConsumerLoop
from streameval.signals import Stop
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
    initial = empty_view(settings, time.time())
    running: list[ConsumerLoop] = []  # the loop, once the clients are up

    def view() -> View:
        return (running[0].view if running else None) or initial

    health = Health()
    history = History()

    def summary() -> dict[str, Any]:
        return history.summary(view(), "wall")

    try:  # bind first: a taken port stops start-up before anything touches Kafka
        server = HttpServer(
            settings.metrics_host, settings.metrics_port, make_app(registry(view), health, view, summary)
        )
    except OSError as exc:
        raise InputError(
            f"metrics_port: cannot listen on {settings.metrics_host}:{settings.metrics_port} ({exc.strerror})"
        ) from None
    server.start()
    stop = Stop()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGTERM, signal.SIGINT)}
    collections = FullCollections()  # from here: the restore builds the state
    try:
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
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not clean:
        log.error("stopped, but the final checkpoint did not commit")
        return 1
    log.info("stopped cleanly")
    return 0


def _connect(settings: Settings) -> ConsumerLoop:
    """Clients, topic checks, the dead-letter and changelog topics; raises with a clear message."""
    consumer = make_consumer(settings)
    transactions: Transactions | None = None
    try:
        partitions = check_topics(settings, consumer)
        admin = make_admin(settings)
        try:
            ensure_topic(admin, settings.dead_letter_topic, 1)
            dead_letter_limit = max_message_bytes(admin, settings, settings.dead_letter_topic)
            timeout_ms = transaction_timeout_ms(settings, broker_max_transaction_timeout_ms(admin))
            ensure_changelog(admin, consumer, settings, partitions)
        finally:
            admin.close()
        txn_id = transactional_id(settings)
        transactions = Transactions(lambda: make_producer(settings, txn_id, timeout_ms))
        try:
            transactions.connect()
        except KafkaError as exc:
            raise InputError(
                f"cannot start the checkpoint transactions (transactional id {txn_id}): "
                f"{type(exc).__name__}: {exc}; the broker must allow transactions for this client"
            ) from None
        restorer = Restorer(settings)
    except BaseException:
        if transactions is not None:
            transactions.close(timeout=1)
        consumer.close(autocommit=False)
        raise
    log.info("%d partition(s) per input topic; state in %s", partitions, settings.changelog_topic)
    return ConsumerLoop(
        settings,
        consumer,
        transactions,
        restorer,
        dead_letter_limit=dead_letter_limit,
        ensure_dead_letter_topic=lambda: _ensure_dead_letter_topic(settings),
        partition_count=partitions,
        topic_exists=lambda topic: _topic_exists(settings, topic),
    )


def _topic_exists(settings: Settings, topic: str) -> bool | None:
    """Whether the cluster has ``topic`` now; None when it cannot be asked."""
    try:
        admin = make_admin(settings)
    except StreamevalError:
        return None
    try:
        return topic in admin.list_topics()
    except KafkaError:
        return None
    finally:
        admin.close()


def _ensure_dead_letter_topic(settings: Settings) -> None:
    """Create the dead-letter topic again when a send to it failed (it may have been deleted);
    a failure here is logged, and the next failed send tries again."""
    try:
        admin = make_admin(settings)
    except StreamevalError as exc:
        log.warning("cannot check the dead-letter topic: %s", exc)
        return
    try:
        ensure_topic(admin, settings.dead_letter_topic, 1)
    except StreamevalError as exc:
        log.warning("%s", exc)
    finally:
        admin.close()
