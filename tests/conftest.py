from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=150, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci")

FIXTURES = Path(__file__).parent / "fixtures"


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
