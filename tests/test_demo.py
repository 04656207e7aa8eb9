"""`streameval demo` as a new user meets it: metrics within seconds, the live page in a real
browser (headless Chromium), SIGTERM ends it with exit 0."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.demo_process import ROOT, Demo
from tests.promtool import check_metrics


def _models(text: str) -> set[str]:
    return {
        sample.labels["model"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "streameval_map"
    }


def test_demo_shows_map_of_three_models_within_30_s_and_stops_on_sigterm(tmp_path, demos) -> None:
    demo = Demo(tmp_path)
    demos.append(demo)
    demo.wait(lambda: len(_models(demo.get("/metrics"))) >= 3, timeout=30, what="streameval_map of 3 models")
    assert check_metrics(demo.get("/metrics")) == ""
    assert demo.get("/healthz").startswith("ok") and demo.get("/readyz").startswith("ready")
    summary = json.loads(demo.get("/api/summary"))
    assert summary["clock"].startswith("simulated") and summary["points"]
    assert demo.stop() == 0
    out = Path(demo.log.name).read_text()
    assert f"http://127.0.0.1:{demo.port}/" in out and "Traceback" not in out


def _series(dom: str, chart: str = "main") -> dict[str, list[float]]:
    """The values behind each line of a chart, as the page put them in the DOM."""
    main = dom.split(f'id="{chart}"', 1)[1].split("</svg>", 1)[0]
    return {
        html.unescape(name): json.loads(html.unescape(values))
        for name, values in re.findall(r'class="line" data-series="([^"]*)" data-values="([^"]*)"', main)
    }


@pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("CI"), reason="no chromium")
def test_live_page_in_chromium_shows_the_regression(tmp_path, demos) -> None:
    """At 120x, candidate-a loses 40% at 10 simulated minutes (5 s); by 30 minutes its lines
    in the page are well below where they were, and below every other model's."""
    demo = Demo(tmp_path, "--speed", "120")
    demos.append(demo)
    demo.wait(
        lambda: (s := json.loads(demo.get("/api/summary")))["now"] - s["points"][0]["t"] >= 30 * 60,
        timeout=60,
        what="30 simulated minutes",
    )
    browser = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*browser, "--virtual-time-budget=8000", "--dump-dom", demo.url + "/"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    lines = _series(dom)
    regressed = {name: v for name, v in lines.items() if "candidate-a" in name}
    others = {name: v for name, v in lines.items() if "candidate-a" not in name}
    assert len(regressed) == 2 and len(others) == 4, lines.keys()
    for name, values in regressed.items():
        assert max(values) - values[-1] > 0.15, (name, values)
        assert values[-1] < min(v[-1] for v in others.values()), (name, values[-1])
    assert dom.count('class="band"') >= 6
    # versus control: candidate-a ends below control on both surfaces; candidate-b is compared too
    versus = _series(dom, "diff")
    assert {name for name in versus if "candidate-a" in name} == {
        "model=candidate-a, surface=home",
        "model=candidate-a, surface=search",
    }, versus.keys()
    assert len(versus) == 4 and not any("model=control" in name for name in versus)
    for name, values in versus.items():
        if "candidate-a" in name:
            assert values[-1] < -0.1 < values[0], (name, values)
    assert "time (UTC)" in dom and 'class="axis-title"' in dom
    # the detectors' table: candidate-a's detectors against control are in alarm
    alarmed = re.findall(r'<tr class="detector alarm"><td>([^<]*)</td><td>([^<]*)</td>', dom)
    assert {
        ("model=candidate-a, surface=home", "control"),
        ("model=candidate-a, surface=search", "control"),
    } <= set(alarmed), alarmed
    screenshot = tmp_path / "demo.png"
    subprocess.run(
        [*browser, "--virtual-time-budget=8000", "--window-size=1300,1150", f"--screenshot={screenshot}"]
        + [demo.url + "/"],
        capture_output=True,
        timeout=60,
    )
    assert screenshot.stat().st_size > 20_000
    if os.environ.get("UPDATE_SCREENSHOT"):
        shutil.copy(screenshot, ROOT / "docs" / "demo.png")
    assert demo.stop() == 0
