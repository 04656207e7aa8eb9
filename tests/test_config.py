from __future__ import annotations

import pytest

from streameval.config import Settings, load_settings, parse_duration
from streameval.errors import ConfigError


def test_defaults_are_the_spec_defaults() -> None:
    s = load_settings(None, {}, {})
    assert s == Settings()
    assert [str(m) for m in s.metrics] == ["map@10", "ndcg@10", "recall@10", "mrr@10"]
    assert [w.name for w in s.windows] == ["5m", "1h", "24h"]
    assert (s.horizon, s.allowed_lateness, s.orphan_ttl, s.max_horizon) == (1800, 10, 300, 1800)


def test_precedence_flag_over_env_over_file(tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'group_id = "file"\nmetrics_port = 1\nap_denominator = "g"\n[kafka]\nsecurity_protocol = "SSL"\n'
    )
    s = load_settings(
        str(path),
        {
            "STREAMEVAL_GROUP_ID": "env",
            "STREAMEVAL_METRICS_PORT": "2",
            "STREAMEVAL_KAFKA_SASL_PLAIN_PASSWORD": "hunter2",
        },
        {"group_id": "flag"},
    )
    assert (s.group_id, s.metrics_port, s.ap_denominator) == ("flag", 2, "g")
    assert dict(s.kafka) == {"security_protocol": "SSL", "sasl_plain_password": "hunter2"}
    assert "hunter2" not in repr(s.redacted_kafka())


def test_env_lists_and_tables() -> None:
    s = load_settings(
        None,
        {
            "STREAMEVAL_WINDOWS": "5m,1h",
            "STREAMEVAL_METRICS": '["map@5"]',
            "STREAMEVAL_HORIZONS": '{purchase = "24h"}',
        },
        {},
    )
    assert [w.seconds for w in s.windows] == [300, 3600]
    assert s.horizon_for("purchase") == 86400 and s.max_horizon == 86400


def test_events_topics_table_maps_topics_to_types() -> None:
    s = load_settings(None, {}, {"events_topics": {"clicks": "click", "buys": "purchase"}})
    assert s.events_topics == ("clicks", "buys") and s.topic_types["buys"] == "purchase"


@pytest.mark.parametrize(
    "flags,names",
    [
        ({"colour": "red"}, "colour"),
        ({"metrics_port": "99999"}, "metrics_port"),
        ({"metrics_port": "http"}, "metrics_port"),
        ({"metrics": ["map@0"]}, "metrics"),
        ({"metrics": ["auc@10"]}, "metrics"),
        ({"ap_denominator": "k"}, "ap_denominator"),
        ({"horizon": "soon"}, "horizon"),
        ({"windows": []}, "windows"),
        ({"group_by": ["k"]}, "group_by"),
        ({"horizons": {"view": "1h"}}, "horizons"),
        ({"min_grade": 5}, "min_grade"),
        ({"grades": {"click": -1}}, "grades"),
        ({"grades": {"click": 1, "purchase": 1500}}, "grades: 'purchase' = 1500 is above 1000"),
        ({"max_groups": 0}, "max_groups"),
        ({"dead_letter_topic": "clicks"}, "dead_letter_topic"),
    ],
)
def test_bad_values_name_the_key(flags, names) -> None:
    with pytest.raises(ConfigError, match=names):
        load_settings(None, {}, flags)


def test_a_grade_past_exp_gains_floats_is_refused_only_where_an_ndcg_reads_it() -> None:
    high = {"grades": {"click": 1, "purchase": 1500}}
    assert load_settings(None, {}, {**high, "ndcg_gain": "linear"}).grades["purchase"] == 1500
    assert load_settings(None, {}, {**high, "metrics": ["map@10", "recall@10"]}).grades["purchase"] == 1500
    assert load_settings(None, {}, {"grades": {"click": 1, "purchase": 1000}}).grades["purchase"] == 1000


def test_bad_toml_and_unknown_env(tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("metrics = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(str(path), {}, {})
    with pytest.raises(ConfigError, match="STREAMEVAL_COLOUR"):
        load_settings(None, {"STREAMEVAL_COLOUR": "red"}, {})
    with pytest.raises(ConfigError, match="not found"):
        load_settings(str(tmp_path / "missing.toml"), {}, {})


@pytest.mark.parametrize(
    "text,seconds",
    [("500ms", 0.5), ("10s", 10), ("5m", 300), ("1h", 3600), ("7d", 604800), (30, 30)],
)
def test_durations(text, seconds) -> None:
    assert parse_duration(text) == seconds


def test_kafka_env_secrets_stay_strings_and_numbers_parse() -> None:
    s = load_settings(
        None,
        {
            "STREAMEVAL_KAFKA_SASL_PLAIN_PASSWORD": "123456",
            "STREAMEVAL_KAFKA_SASL_PLAIN_USERNAME": "true",
            "STREAMEVAL_KAFKA_SESSION_TIMEOUT_MS": "10000",
            "STREAMEVAL_KAFKA_ENABLE_IDEMPOTENCE": "false",
            "STREAMEVAL_KAFKA_SSL_CAFILE": "/etc/ca.pem",
            "STREAMEVAL_KAFKA_CLIENT_ID": "42",
        },
        {},
    )
    assert s.kafka["sasl_plain_password"] == "123456" and s.kafka["sasl_plain_username"] == "true"
    assert s.kafka["session_timeout_ms"] == 10000
    assert s.kafka["enable_idempotence"] is False
    assert s.kafka["ssl_cafile"] == "/etc/ca.pem" and s.kafka["client_id"] == "42"


def test_the_readme_configuration_table_is_the_keys_descriptions() -> None:
    """README, Configuration: the table is made from each key's one description (regenerate it
    with ``python -c "from streameval.config import markdown_table; print(markdown_table())"``)."""
    from pathlib import Path

    from streameval.config import KEYS, markdown_table

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert markdown_table() in readme
    fields = {f for f in Settings.__dataclass_fields__}
    assert set(KEYS) == fields - {"topic_types"}  # every field a key, but the one events_topics gives


def test_repartition_names_events_topics_and_gives_their_repartition_topics() -> None:
    settings = load_settings(None, {}, {"repartition": ["clicks"], "group_id": "g"})
    assert settings.repartition == ("clicks",)
    assert settings.join_topics == ("impressions", "g-repartition-clicks", "purchases")
    assert load_settings(None, {"STREAMEVAL_REPARTITION": "clicks,purchases"}, {}).repartition == (
        "clicks",
        "purchases",
    )
    with pytest.raises(ConfigError, match="repartition: 'views' is not one of the events_topics"):
        load_settings(None, {}, {"repartition": ["views"]})
    with pytest.raises(ConfigError, match="repartition_retention"):
        load_settings(None, {}, {"repartition_retention": "soon"})


def test_kafka_client_chooses_the_backend_and_its_env_is_the_key_not_a_kafka_setting() -> None:
    from streameval.kafka.backends import CONFLUENT_KAFKA, KAFKA_PYTHON, backend_for

    assert backend_for(load_settings(None, {}, {})) is KAFKA_PYTHON
    s = load_settings(None, {"STREAMEVAL_KAFKA_CLIENT": "confluent-kafka"}, {})
    assert s.kafka_client == "confluent-kafka" and "client" not in s.kafka
    assert backend_for(s) is CONFLUENT_KAFKA
    with pytest.raises(ConfigError, match="kafka_client"):
        load_settings(None, {}, {"kafka_client": "librdkafka"})
    staged = load_settings(None, {}, {"kafka_client": "confluent-kafka", "repartition": ["clicks"]})
    assert backend_for(staged) is CONFLUENT_KAFKA  # the stage runs on either (README, Repartitioning)


def test_the_kafka_table_in_librdkafkas_names() -> None:
    from streameval.kafka.rdconfig import librdkafka_config

    s = load_settings(
        None,
        {},
        {
            "kafka": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "u",
                "sasl_plain_password": "p",
                "ssl_cafile": "/ca.pem",
                "ssl_check_hostname": False,
                "max_poll_records": 500,
                "linger_ms": 5,
                "socket_keepalive_enable": True,
            }
        },
    )
    assert librdkafka_config(s, {"linger_ms"}) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "socket.keepalive.enable": True,  # any other key: its dots for underscores
    }
