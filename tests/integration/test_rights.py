"""A daemon whose Kafka user may not create the changelog topic: exit 2 and a message naming it.

Against a broker of its own that deploy/kafka/local.sh starts with KAFKA_SASL=1: SASL/PLAIN
logins and an authorizer that denies what no ACL allows. The user ``limited`` may read and
write every topic, use every group and transactional id -- everything but create topics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourceType,
)

from streameval.config import load_settings
from tests.integration.conftest import ROOT, Daemon, free_port

pytestmark = pytest.mark.integration

SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}


@pytest.fixture(scope="module")
def sasl_broker(bootstrap: str) -> Iterator[str]:
    """A broker with an authorizer, started (and deleted afterwards) for this module. Needs the
    jars that the test broker's start resolved (``bootstrap`` makes sure it runs)."""
    port = free_port()
    env = os.environ | {
        "KAFKA_SASL": "1",
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    command = [str(ROOT / "deploy" / "kafka" / "local.sh")]
    subprocess.run([*command, "reset"], env=env, check=True, capture_output=True)
    started = subprocess.run([*command, "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"the SASL broker did not start:\n{started.stderr}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([*command, "stop"], env=env, capture_output=True)
        subprocess.run([*command, "reset"], env=env, capture_output=True)


def super_user(broker: str) -> KafkaAdminClient:
    """An admin client logged in as local.sh's super user."""
    return KafkaAdminClient(
        bootstrap_servers=broker, sasl_plain_username="admin", sasl_plain_password="admin-secret", **SASL
    )


def test_a_user_without_the_right_to_create_topics_gets_exit_2_naming_the_changelog(
    sasl_broker: str, tmp_path, daemons: list[Daemon]
) -> None:
    admin = super_user(sasl_broker)
    try:
        admin.create_topics(
            [
                NewTopic(name, num_partitions=2, replication_factor=1)
                for name in ("impressions", "clicks", "purchases", "dead-letters")
            ],
            wait_for_metadata=True,
        )
        grants = [
            (ResourceType.TOPIC, op) for op in (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE)
        ]
        grants += [(ResourceType.GROUP, ACLOperation.ALL), (ResourceType.TRANSACTIONAL_ID, ACLOperation.ALL)]
        admin.create_acls(
            [
                ACL(
                    principal="User:limited",
                    host="*",
                    operation=operation,
                    permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(resource, "*", ACLResourcePatternType.LITERAL),
                )
                for resource, operation in grants
            ]
        )
    finally:
        admin.close()
    config = tmp_path / "limited.toml"
    config.write_text(
        f'bootstrap_servers = "{sasl_broker}"\n'
        'group_id = "limited-group"\n'
        'dead_letter_topic = "dead-letters"\n'
        f"metrics_port = {free_port()}\n"
        'metrics_host = "127.0.0.1"\n'
        "[kafka]\n"
        'security_protocol = "SASL_PLAINTEXT"\n'
        'sasl_mechanism = "PLAIN"\n'
        'sasl_plain_username = "limited"\n'
    )
    env = os.environ | {"STREAMEVAL_KAFKA_SASL_PLAIN_PASSWORD": "limited-secret"}
    run = subprocess.run(
        [sys.executable, "-m", "streameval", "run", "--config", str(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    changelog = load_settings(str(config), {}, {}).changelog_topic
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert changelog in run.stderr and "could not be created" in run.stderr, run.stderr
    assert "limited-secret" not in run.stderr + run.stdout  # the password is never logged

    # the operator creates the changelog as the message says: the same user now runs
    admin = super_user(sasl_broker)
    try:
        admin.create_topics(
            [NewTopic(changelog, 2, 1, topic_configs={"cleanup.policy": "compact"})], wait_for_metadata=True
        )
    finally:
        admin.close()
    os.environ["STREAMEVAL_KAFKA_SASL_PLAIN_PASSWORD"] = "limited-secret"
    try:
        daemon = Daemon(config)
        daemons.append(daemon)
    finally:
        del os.environ["STREAMEVAL_KAFKA_SASL_PLAIN_PASSWORD"]
    deadline = time.time() + 90
    while True:
        assert daemon.proc.poll() is None, daemon.output()
        assert time.time() < deadline, daemon.output()
        try:
            if daemon.get("/readyz")[0] == 200:
                break
        except OSError:  # not listening yet
            pass
        time.sleep(0.5)
    assert daemon.stop(signal.SIGTERM) == 0, daemon.output()
    assert "Traceback" not in daemon.output()
    # the minutes topic could not be created either: the daemon ran with its detectors off
    assert "the regression detectors are off" in daemon.output()
