from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How pytest-xdist shares the tests between its workers (pyproject.toml: -n 2): every test
    under tests/integration/ in one unit of work, the others one by one. The integration tests
    share the test broker and some stop or stall it, so they run one at a time, on one worker,
    while the other worker runs the tests that need no broker."""
    from xdist.scheduler import LoadScopeScheduling

    class BrokerTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/integration" if nodeid.startswith("tests/integration/") else nodeid

    return BrokerTestsTogether(config, log)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def replay(tmp_path: Path):
    """Run the public replay pipeline over records (dicts or bytes) with config overrides."""
    import orjson

    from streameval.config import load_settings
    from streameval.replay import build_report, run_replay

    def run(impressions, events, **config):
        imps = tmp_path / "impressions.jsonl"
        evs = tmp_path / "events.jsonl"
        for path, records in ((imps, impressions), (evs, events)):
            path.write_bytes(
                b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in records)
            )
        flags = {k: v for k, v in config.items()}
        settings = load_settings(None, {}, flags)
        return build_report(run_replay(settings, str(imps), [str(evs)]))

    return run


@pytest.fixture
def demos():
    """Demo processes a test started; killed if still running at its end."""
    started: list = []
    yield started
    for demo in started:
        if demo.proc.poll() is None:
            demo.proc.kill()
            demo.proc.wait()
