"""``kafka_client = "confluent-kafka"`` on a broker without KIP-848 (Apache Kafka 3.9): the
consumer joins with the classic protocol and eager range assignment, and every guarantee of
README, Guarantees holds -- shown with members joining, killed and leaving under live traffic,
compared with `streameval replay` on the same logs -- and a member keeps the state of the
partitions each rebalance hands back to it.

The broker is a second one that ``.ci/run`` starts (``KAFKA_VERSION=3.9.1 deploy/kafka/local.sh
start`` on ``KAFKA_CLASSIC_TEST_BOOTSTRAP``, 127.0.0.1:39192 unless set).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from kafka.admin import KafkaAdminClient

from streameval.kafka.protocols import CLASSIC, protocol_for
from tests.integration.conftest import Daemon, Topics, _reachable, value
from tests.integration.test_daemon import (
    assert_metrics_equal_replay,
    produce_flush,
    replay_report,
    settled_with_flush,
)
from tests.integration.test_recovery import Feed, config_with_kafka, live_log, owned

pytestmark = pytest.mark.integration

CLASSIC_BOOTSTRAP = os.environ.get("KAFKA_CLASSIC_TEST_BOOTSTRAP", "127.0.0.1:39192")


@pytest.fixture(scope="module")
def classic_admin() -> Iterator[KafkaAdminClient]:
    if not _reachable(CLASSIC_BOOTSTRAP):
        message = (
            f"no Kafka 3.9 broker at {CLASSIC_BOOTSTRAP}: start one with "
            "KAFKA_VERSION=3.9.1 KAFKA_PORT=39192 deploy/kafka/local.sh start"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    client = KafkaAdminClient(bootstrap_servers=CLASSIC_BOOTSTRAP)
    yield client
    client.close()


@pytest.fixture
def classic_topics(classic_admin: KafkaAdminClient) -> Topics:
    topics = Topics(classic_admin, CLASSIC_BOOTSTRAP)
    topics.kafka_client = "confluent-kafka"
    return topics


def test_the_broker_is_one_without_the_consumer_protocol(classic_admin: KafkaAdminClient) -> None:
    assert protocol_for(classic_admin.api_versions()) == CLASSIC


def test_members_joining_killed_and_leaving_under_eager_rebalances_end_exact(
    tmp_path, classic_topics: Topics, daemons
) -> None:
    topics = classic_topics
    impressions, events = live_log(21, n_queries=500)
    total = len(impressions) + len(events)
    topics.create(partitions=4)
    configs = [config_with_kafka(topics, tmp_path / f"{name}.toml") for name in "abc"]
    a = Daemon(configs[0])
    daemons.append(a)
    a.wait_until(lambda m: value(m, "streameval_ready") == 1 and len(owned(m)) == 4, what="a holds all")
    assert "classic protocol" in a.output()
    feed = Feed(topics, impressions, events, seconds=24)
    feed.start()
    a.wait_until(lambda m: value(m, "streameval_records_consumed_total") >= 0.15 * total, what="a consumed")
    b = Daemon(configs[1])  # joins: every partition revoked, two of them assigned to b
    daemons.append(b)
    b.wait_until(lambda m: len(owned(m)) == 2, what="b holds two")
    a.wait_until(lambda m: len(owned(m)) == 2, what="a gave two partitions to b")
    b.wait_until(lambda m: value(m, "streameval_records_consumed_total") >= 0.05 * total, what="b consumed")
    time.sleep(1.0)
    b.proc.send_signal(signal.SIGKILL)  # its two come back to a after the session timeout
    b.proc.wait()
    c = Daemon(configs[2])  # and a third member joins and leaves cleanly meanwhile
    daemons.append(c)
    c.wait_until(lambda m: len(owned(m)) >= 1, timeout=60, what="c holds a partition")
    time.sleep(1.0)
    assert c.stop(signal.SIGTERM) == 0
    feed.join()
    # flush once a holds everything again (test_recovery says why)
    a.wait_until(lambda m: len(owned(m)) == 4, timeout=120, what="a holds all four")
    produce_flush(topics)
    metrics = a.wait_until(
        settled_with_flush(topics, total), timeout=150, what="a settled everything after b and c"
    )
    assert len(owned(metrics)) == 4
    assert_metrics_equal_replay(metrics, replay_report(tmp_path, configs[0], impressions, events))
    assert a.stop(signal.SIGTERM) == 0
    # the partitions a member got back in an eager rebalance kept their state
    assert "state kept through the rebalance, not restored" in a.output()
    assert "Traceback" not in a.output() + c.output()
