"""``streameval demo``: the simulator and the pipeline in one process, on a compressed clock.

No Kafka: the simulated records go straight into one :class:`~streameval.pipeline.Pipeline`
(the daemon's, with the same decoding and counters), whose clock is the simulated one; the same
HTTP app as ``run`` serves the result. Signals only set a flag; the loop stops at its next round.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace

from streameval.config import Settings
from streameval.detect import Detectors
from streameval.errors import InputError
from streameval.exporter import registry
from streameval.history import History
from streameval.http import Health, make_app, serve
from streameval.pipeline import Pipeline
from streameval.signals import stop_on_signals
from streameval.simulate import Record, topic_of
from streameval.simulate_io import SimulationOptions, duration_flag, simulator_from
from streameval.view import View, empty_view, merge_snapshots

log = logging.getLogger(__name__)

DEFAULT_REGRESS = "candidate-a:0.4@10m"
ROUND_S = 0.1  # wall seconds per round
PUBLISH_S = 0.5  # wall seconds between published views


def demo(settings: Settings, args: SimulationOptions) -> int:
    if args.speed <= 0:
        raise InputError(f"--speed: must be > 0, got {args.speed:g}")
    wall0 = time.time()
    start = float(int(wall0))
    duration = duration_flag("--duration", args.duration) if args.duration else None
    # engagement comes sooner than in `simulate`, so that most of it falls inside the demo's
    # short horizon (DEMO_DEFAULTS)
    sim = simulator_from(args, start, DEFAULT_REGRESS, click_delay=10.0, purchase_delay=40.0)
    records = iter(sim.records(until=start + duration if duration else float("inf")))

    def sim_now() -> float:
        return start + (time.time() - wall0) * args.speed

    pipeline = Pipeline(settings, wall_clock=sim_now)
    pipeline.detectors = Detectors.of(settings)  # one pipeline: it runs them itself
    history = History(every=args.speed)  # one point per wall-clock second
    clock = f"simulated, {args.speed:g}x the wall clock, started at the current time" + "".join(
        f"; {r.model} loses {r.drop:.0%} of its quality at {r.at / 60:g} simulated minutes"
        for r in sim.regressions
    )
    current: list[View] = [_view(settings, pipeline, sim_now())]

    def summary() -> dict:
        return history.summary(current[0], clock)

    health = Health()
    app = make_app(registry(lambda: current[0]), health, lambda: current[0], summary)
    server = serve(settings.metrics_host, settings.metrics_port, app, "; pick another with --metrics-port")
    host = "localhost" if settings.metrics_host in ("0.0.0.0", "::", "") else settings.metrics_host
    sys.stderr.write(
        f"streameval demo: simulated traffic of {', '.join(sim.models)} on event time running "
        f"{args.speed:g}x;\n"
        + "".join(
            f"  {r.model} loses {r.drop:.0%} of its quality at {r.at / 60:g} simulated minutes\n"
            for r in sim.regressions
        )
        + f"  live page  http://{host}:{server.port}/\n"
        f"  metrics    http://{host}:{server.port}/metrics\n"
        "Stop with Ctrl-C.\n"
    )
    pending: Record | None = None
    next_publish = 0.0
    try:
        with stop_on_signals() as stop:
            while not stop.requested:
                now = sim_now()
                while True:
                    record = pending if pending is not None else next(records, None)
                    pending = None
                    if record is None:
                        break
                    if record.ts > now:
                        pending = record
                        break
                    topic = topic_of(settings, record.kind)
                    pipeline.handle(topic, pipeline.decode(topic, record.value))
                pipeline.tick()
                if time.monotonic() >= next_publish:
                    next_publish = time.monotonic() + PUBLISH_S
                    current[0] = _view(settings, pipeline, now)
                    history.record(current[0])
                health.beat()
                if pending is None and duration is not None and now >= start + duration:
                    break
                time.sleep(ROUND_S)
    finally:
        server.stop()
    sys.stderr.write(f"streameval demo: stopped after {sum(pipeline.counters.consumed.values())} records\n")
    return 0


def _view(settings: Settings, pipeline: Pipeline, now: float) -> View:
    snapshot = merge_snapshots([pipeline.snapshot()])
    return replace(
        empty_view(settings, now), snapshot=snapshot, partition_watermarks={0: snapshot.watermark}, ready=True
    )
