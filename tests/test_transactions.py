"""The checkpoint transactions' timeout is chosen from commit_interval (README, Guarantees)."""

from __future__ import annotations

import pytest

from streameval.config import load_settings
from streameval.errors import ConfigError
from streameval.kafka.clients import BROKER_MAX_TRANSACTION_TIMEOUT_MS, transaction_timeout_ms


@pytest.mark.parametrize(
    ("interval", "timeout_ms"),
    [("5s", 30_000), ("100ms", 30_000), ("10s", 40_000), ("2m", 260_000), ("7m", 860_000)],
)
def test_the_timeout_covers_the_interval_and_a_rebalance(interval: str, timeout_ms: int) -> None:
    settings = load_settings(None, {}, {"commit_interval": interval})
    assert transaction_timeout_ms(settings, BROKER_MAX_TRANSACTION_TIMEOUT_MS) == timeout_ms


def test_an_interval_no_timeout_of_the_broker_covers_is_refused_naming_commit_interval() -> None:
    settings = load_settings(None, {}, {"commit_interval": "1h"})
    with pytest.raises(ConfigError, match=r"^commit_interval: .* at most 440 s"):
        transaction_timeout_ms(settings, BROKER_MAX_TRANSACTION_TIMEOUT_MS)
    # a broker that allows longer transactions takes it
    assert transaction_timeout_ms(settings, 3 * 3600 * 1000) == 7_220_000


def test_an_explicit_timeout_must_be_longer_than_the_interval() -> None:
    settings = load_settings(None, {}, {"commit_interval": "2m", "kafka": {"transaction_timeout_ms": 60_000}})
    with pytest.raises(ConfigError, match="^commit_interval: "):
        transaction_timeout_ms(settings, BROKER_MAX_TRANSACTION_TIMEOUT_MS)
    settings = load_settings(None, {}, {"kafka": {"transaction_timeout_ms": 60_000}})
    assert transaction_timeout_ms(settings, BROKER_MAX_TRANSACTION_TIMEOUT_MS) == 60_000
