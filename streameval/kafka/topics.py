"""The topics, owned in one place: at start-up the inputs checked, the dead-letter topic and the
changelog ensured, the limits read (the size of a dead-letter record, the broker's longest
transaction); while running, an assignment checked against the layout the state was built for,
and the dead-letter topic created again when it went away.

Each refusal says what to do, and names a missing right when the broker says so (the rights the
daemon needs: README, `streameval run`, "Rights").
"""

from __future__ import annotations

import logging
import math
import time
from typing import NamedTuple

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from streameval.config import Settings
from streameval.errors import InputError, StreamevalError
from streameval.kafka.client import Consumer
from streameval.kafka.clients import (
    BROKER_MAX_TRANSACTION_TIMEOUT_MS,
    failure,
    make_admin,
    transaction_timeout_ms,
)

log = logging.getLogger(__name__)

LOST_STATE_CHECK_INTERVAL_S = 5.0

#: Topic settings of a new changelog: compaction, and segments that roll often enough for
#: compaction to keep a restore close to the size of the live state.
CHANGELOG_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.3",
}


class StartUp(NamedTuple):
    """What the topics tell the daemon at start-up."""

    partitions: int  # of every input topic, and of the changelog
    dead_letter_limit: int  # bytes a dead-letter record may take
    transaction_timeout_ms: int  # the checkpoint producer's
    detectors: bool = True  # the minutes topic exists: the regression detectors run


class Topics:
    """The owner of the topics for one daemon."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lost_state_checked = -math.inf

    def prepare(self, consumer: Consumer) -> StartUp:
        """The start-up checks, in order: the inputs, the dead-letter topic, the transaction
        timeout, the changelog. Raises InputError or ConfigError saying what to do."""
        settings = self.settings
        partitions = check_topics(settings, consumer)
        admin = make_admin(settings)
        try:
            ensure_topic(admin, settings.dead_letter_topic, 1)
            dead_letter_limit = max_message_bytes(admin, settings, settings.dead_letter_topic)
            timeout_ms = transaction_timeout_ms(settings, broker_max_transaction_timeout_ms(admin))
            ensure_changelog(admin, consumer, settings, partitions)
            ensure_repartition_topics(admin, consumer, settings, partitions)
            detectors = ensure_minutes_topic(admin, consumer, settings)
        finally:
            admin.close()
        return StartUp(partitions, dead_letter_limit, timeout_ms, detectors)

    def exists(self, topic: str) -> bool | None:
        """Whether the cluster has ``topic`` now; None when it cannot be asked."""
        try:
            admin = make_admin(self.settings)
        except StreamevalError:
            return None
        try:
            return _exists(admin, topic)
        except KafkaError:
            return None
        finally:
            admin.close()

    def ensure_dead_letter(self) -> None:
        """Create the dead-letter topic again when a send to it failed (it may have been
        deleted); a failure here is logged, and the next failed send tries again."""
        try:
            admin = make_admin(self.settings)
        except StreamevalError as exc:
            log.warning("cannot check the dead-letter topic: %s", exc)
            return
        try:
            ensure_topic(admin, self.settings.dead_letter_topic, 1)
        except StreamevalError as exc:
            log.warning("%s", exc)
        finally:
            admin.close()

    def check_lost_state(self) -> None:
        """After a failure that may be a deleted changelog: InputError when it is gone, as its
        state is lost and going on would give wrong numbers. Asks at most every few seconds."""
        now = time.monotonic()
        if now - self._lost_state_checked < LOST_STATE_CHECK_INTERVAL_S:
            return
        self._lost_state_checked = now
        if self.exists(self.settings.changelog_topic) is False:
            raise InputError(lost_state_message(self.settings))


def check_topics(settings: Settings, consumer: Consumer) -> int:
    """The input topics must exist, and those the join reads directly be co-partitioned (the
    repartitioned ones may have any partition count); returns their partition count."""
    counts: dict[str, int] = {}
    missing = []
    for topic in (settings.impressions_topic, *settings.events_topics):
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            missing.append(topic)
        elif topic not in settings.repartition:
            counts[topic] = len(partitions)
    if missing:
        raise InputError(
            f"input topic(s) {', '.join(missing)} do not exist on {settings.bootstrap_servers}; "
            "create them with the same partition count as the others"
        )
    if len(set(counts.values())) > 1:
        described = ", ".join(f"{t}: {n}" for t, n in counts.items())
        raise InputError(
            f"the input topics are not co-partitioned ({described} partitions); impressions and "
            "events must be keyed by query_id into topics with the same partition count, or name "
            "the events topics that are not in repartition (README, Repartitioning)"
        )
    return next(iter(counts.values()))


def ensure_repartition_topics(
    admin: KafkaAdminClient, consumer: Consumer, settings: Settings, partitions: int
) -> None:
    """Create each missing repartition topic (one partition per impressions partition,
    ``repartition_retention``); refuse one with another partition count."""
    for source in settings.repartition:
        topic = settings.repartition_topic(source)
        existing = partitions_of(admin, consumer, topic)
        if not existing:
            configs = {
                "cleanup.policy": "delete",
                "retention.ms": str(int(settings.repartition_retention * 1000)),
            }
            existing = _create(admin, consumer, settings, "repartition", topic, partitions, configs)
        if existing and len(existing) != partitions:
            raise InputError(
                f"repartition topic {topic} has {len(existing)} partitions but the impressions have "
                f"{partitions}; delete it (and the group's offsets on it) or use another group_id"
            )


def ensure_minutes_topic(admin: KafkaAdminClient, consumer: Consumer, settings: Settings) -> bool:
    """Create the minutes topic (one partition, ``repartition_retention``) if it is missing;
    False, with a warning, when it cannot be: the regression detectors are then off, the rest
    runs (they are an addition to the metrics, not a part of them)."""
    topic = settings.minutes_topic
    if not partitions_of(admin, consumer, topic):
        configs = {
            "cleanup.policy": "delete",
            "retention.ms": str(int(settings.repartition_retention * 1000)),
        }
        try:
            _create(admin, consumer, settings, "minutes", topic, 1, configs)
        except InputError as exc:
            log.warning("the regression detectors are off: %s (README, Regression detectors)", exc)
            return False
    return True


def max_message_bytes(admin: KafkaAdminClient, settings: Settings, topic: str) -> int:
    """The largest record ``topic`` takes from our producer: the smaller of the producer's
    ``max_request_size`` and the topic's ``max.message.bytes`` (when it can be read)."""
    limit = int(settings.kafka.get("max_request_size", 1_048_576))
    try:
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, ["max.message.bytes"])]
        )
        value = described.get("topic", {}).get(topic, {}).get("max.message.bytes", {}).get("value")
    except (KafkaError, AttributeError, TypeError) as exc:
        log.info("cannot read max.message.bytes of %s (%s); assuming %d", topic, type(exc).__name__, limit)
        return limit
    # no value listed: the topic has no override, and the broker's default is above the producer's
    return min(limit, int(value)) if isinstance(value, str) and value.isdigit() else limit


def partitions_of(admin: KafkaAdminClient, consumer: Consumer, topic: str) -> set[int] | None:
    """The partitions of ``topic``, None when it does not exist: :func:`described`, else the
    consumer's answer."""
    try:
        return described(admin, topic)
    except Unclear:
        return consumer.partitions_for_topic(topic)


class Unclear(Exception):
    """The broker did not say whether the topic exists (an error, no right to describe it)."""


def described(admin: KafkaAdminClient, topic: str) -> set[int] | None:
    """The partitions of ``topic``, None when the broker says it does not exist; Unclear when
    it says neither. One metadata request for this one topic, which never creates it: a
    consumer's metadata waits for a topic it does not know (0.05-0.09 s measured, at each
    start-up that creates the daemon's own topics), and listing every topic costs 0.2 s on a
    cluster of 3,700 topics (measured)."""
    try:
        found = [t for t in admin.describe_topics(topics=[topic]) if t.get("name") == topic]
    except KafkaError:
        raise Unclear(topic) from None
    if found and found[0].get("error_code", 0) == 0 and found[0].get("partitions"):
        return {p["partition_index"] for p in found[0]["partitions"]}
    if found and found[0].get("error_code") == UnknownTopicOrPartitionError.errno:
        return None
    raise Unclear(topic)


def ensure_topic(admin: KafkaAdminClient, topic: str, partitions: int) -> None:
    """Create a topic (replication 1 is not forced: the broker default applies) if it is missing.

    Only if it is missing: a broker with an authorizer refuses a create request from a client
    without the right to create topics even when the topic exists."""
    try:
        if _exists(admin, topic):
            return
        admin.create_topics([NewTopic(topic, num_partitions=partitions)], wait_for_metadata=True)
        log.info("created topic %s with %d partition(s)", topic, partitions)
    except TopicAlreadyExistsError:
        pass
    except KafkaError as exc:
        raise InputError(f"topic {topic} is missing and could not be created: {failure(exc)}") from None


def _exists(admin: KafkaAdminClient, topic: str) -> bool:
    try:
        return described(admin, topic) is not None
    except Unclear:
        return topic in admin.list_topics()


def broker_max_transaction_timeout_ms(admin: KafkaAdminClient) -> int:
    """The broker's ``transaction.max.timeout.ms`` (its default when not listed or not readable)."""
    try:
        brokers = admin.describe_cluster().get("brokers") or []
        if not brokers:
            return BROKER_MAX_TRANSACTION_TIMEOUT_MS
        broker = str(brokers[0]["broker_id"])
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, broker, ["transaction.max.timeout.ms"])]
        )
        value = described.get("broker", {}).get(broker, {}).get("transaction.max.timeout.ms", {}).get("value")
    except (KafkaError, AttributeError, TypeError, KeyError) as exc:
        log.info("cannot read transaction.max.timeout.ms (%s); assuming Kafka's default", type(exc).__name__)
        return BROKER_MAX_TRANSACTION_TIMEOUT_MS
    return int(value) if isinstance(value, str) and value.isdigit() else BROKER_MAX_TRANSACTION_TIMEOUT_MS


def ensure_changelog(
    admin: KafkaAdminClient, consumer: Consumer, settings: Settings, partitions: int
) -> None:
    """Create the changelog topic if it is missing; refuse one with another partition count."""
    topic = settings.changelog_topic
    existing = partitions_of(admin, consumer, topic)
    if not existing:
        _refuse_lost_state(admin, settings)
        existing = _create(admin, consumer, settings, "changelog", topic, partitions, CHANGELOG_CONFIGS)
    if existing and len(existing) != partitions:
        raise InputError(
            f"changelog topic {topic} has {len(existing)} partitions but the input topics have "
            f"{partitions}; it belongs to another layout: use another group_id, or delete the topic "
            "and the group's offsets to rebuild the state from the input"
        )


def _create(
    admin: KafkaAdminClient,
    consumer: Consumer,
    settings: Settings,
    kind: str,
    topic: str,
    partitions: int,
    configs: dict[str, str],
) -> set[int] | None:
    """Create a topic of the daemon's own (replication ``changelog_replication_factor``); None
    when created, its partitions when it existed after all."""
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=settings.changelog_replication_factor,
        topic_configs=configs,
    )
    try:
        admin.create_topics([new], wait_for_metadata=True)
    except TopicAlreadyExistsError:
        return partitions_of(admin, consumer, topic)
    except KafkaError as exc:
        raise InputError(
            f"{kind} topic {topic} is missing and could not be created: {failure(exc)}; create "
            f"it (cleanup.policy={configs['cleanup.policy']}, {partitions} partitions) or grant this "
            "client the right to create topics"
        ) from None
    log.info("created %s topic %s with %d partition(s)", kind, topic, partitions)
    return None


def lost_state_message(settings: Settings) -> str:
    """What to do when the group's offsets exist but the changelog that holds its state does not."""
    return (
        f"the state of consumer group {settings.group_id} is lost: changelog topic "
        f"{settings.changelog_topic} is missing (deleted?) while the group has committed offsets on "
        "the input topics, so going on would give wrong numbers. To rebuild the state from the "
        f"input, delete the group (kafka-consumer-groups.sh --delete --group {settings.group_id}) and "
        "start again -- exact if the input topics still hold the records of the open queries -- or "
        "use a new group_id (README, Guarantees)"
    )


def _refuse_lost_state(admin: KafkaAdminClient, settings: Settings) -> None:
    """A missing changelog is created only for a group that has committed nothing yet."""
    try:
        offsets = admin.list_group_offsets(settings.group_id).get(settings.group_id, {})
    except KafkaError as exc:
        log.info("cannot read the offsets of group %s (%s)", settings.group_id, type(exc).__name__)
        return
    inputs = {settings.impressions_topic, *settings.events_topics}
    if any(tp.topic in inputs and meta.offset >= 0 for tp, meta in offsets.items()):
        raise InputError(lost_state_message(settings))


def check_layout(
    settings: Settings, consumer: Consumer, expected: int | None, assignment: set[TopicPartition]
) -> None:
    """The input topics as the cluster has them now must be the layout the state was built
    for: every topic there, each with the partition count of the changelog (``expected``), and
    every partition number assigned with all its topics."""
    topics = settings.join_topics
    try:
        counts = {t: len(consumer.partitions_for_topic(t) or ()) for t in topics}
    except KafkaError as exc:  # the brokers cannot say now: checked again at the next assignment
        log.warning("input topics not checked (%s): no answer from the brokers", type(exc).__name__)
        counts = {}
    _check_counts(settings, counts, expected)
    for p in sorted({tp.partition for tp in assignment if tp.topic in topics}):
        missing = [t for t in topics if TopicPartition(t, p) not in assignment]
        if missing:
            raise InputError(
                f"partition {p} of {', '.join(missing)} went to another member: the input topics "
                "are no longer co-partitioned (partitions added to one of them?), or a member of "
                f"another application holds group {settings.group_id}; give every input topic the "
                "same partition count, stop any other member of the group, and restart"
            )


def _check_counts(settings: Settings, counts: dict[str, int], expected: int | None) -> None:
    """Every input topic there, each with ``expected`` partitions (the changelog's)."""
    if not counts:
        return
    gone = [t for t, n in counts.items() if n == 0]
    if gone:
        raise InputError(
            f"input topic(s) {', '.join(gone)} no longer exist (deleted while running?); "
            "create them again with the partition count of the others and restart"
        )
    expected = expected or max(counts.values())
    if any(n != expected for n in counts.values()):
        described = ", ".join(f"{t}: {n}" for t, n in counts.items())
        raise InputError(
            f"the input topics now have {described} partitions, but the state in "
            f"{settings.changelog_topic} was built for {expected} each: a query's records no "
            "longer meet in one partition number. Give every input topic the same partition count, "
            "then rebuild the state (README, Guarantees)"
        )
