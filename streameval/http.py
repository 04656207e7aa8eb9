"""HTTP: ``/metrics`` (prometheus-client's WSGI app on our registry), ``/healthz``, ``/readyz``,
``/`` -- the live page -- and ``/api/summary``, the JSON it draws.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import CollectorRegistry, make_wsgi_app

from streameval.errors import InputError
from streameval.view import View

log = logging.getLogger(__name__)

#: The live page: static HTML and vanilla JavaScript that draws /api/summary (nothing fetched
#: from elsewhere, so it works offline).
PAGE = Path(__file__).with_name("page.html")

#: /healthz fails when the loop has not gone round for this long.
STALL_AFTER_S = 30.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the listen backlog (5 by default: a burst of connections waits)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or stayed idle past the timeout is not worth a traceback
        (the base class prints one to stderr for each)."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # TimeoutError, ConnectionResetError, BrokenPipeError, ...
            log.debug("http: connection from %s ended: %s", client_address, exc)
            return
        log.exception("http: request from %s failed", client_address)


class _QuietHandler(WSGIRequestHandler):
    #: an idle or slow connection is closed after this many seconds, so connections that never
    #: send a request do not hold a thread each for ever
    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("http: " + format, *args)


class Health:
    """What the loop tells the HTTP side: it is alive (a heartbeat), and whether it is ready."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last_beat = clock()

    def beat(self) -> None:
        self.last_beat = self.clock()

    def alive(self) -> bool:
        return self.clock() - self.last_beat < STALL_AFTER_S


def make_app(
    registry: CollectorRegistry,
    health: Health,
    view_source: Callable[[], View],
    summary: Callable[[], dict[str, Any]],
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)
    page = PAGE.read_bytes()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            ok = health.alive()
            return _text(
                start_response,
                "200 OK" if ok else "503 Service Unavailable",
                ("ok\n" if ok else "loop stalled\n") + _health_detail(view_source()),
            )
        if path == "/readyz":
            ready = view_source().ready
            return _text(
                start_response,
                "200 OK" if ready else "503 Service Unavailable",
                "ready\n" if ready else "not ready: waiting for partitions\n",
            )
        if path in ("/", "/index.html"):
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page]
        if path == "/api/summary":
            body = orjson.dumps(summary(), option=orjson.OPT_SERIALIZE_NUMPY)
            start_response("200 OK", [("Content-Type", "application/json"), ("Cache-Control", "no-store")])
            return [body]
        return _text(
            start_response, "404 Not Found", "not found: try /, /metrics, /healthz, /readyz or /api/summary\n"
        )

    return app


def _health_detail(view: View) -> str:
    """Lines after the verdict: the checkpoints, and why they fail when they do. A failing
    checkpoint does not make the daemon unhealthy (it retries from the last committed one;
    restarting would not help), so it is shown here and in the metrics instead."""
    ops, now = view.ops, view.wall_time
    lines = [
        "last checkpoint: "
        + ("none yet" if ops.last_checkpoint is None else f"{now - ops.last_checkpoint:.0f} s ago"),
        f"partitions restoring: {ops.partitions_restoring}",
        f"records consumed: {sum(view.snapshot.counters.consumed.values())}",
    ]
    misrouted = view.snapshot.counters.misrouted
    if misrouted:
        lines.append(
            "misrouted records (not in the partition murmur2 of their query_id gives): "
            + ", ".join(f"{topic} {n}" for topic, n in sorted(misrouted.items()))
            + "; fix the producer's partitioner or key (query_id), or name the topic in repartition"
        )
    if ops.failing() and ops.last_failure is not None:
        lines.append(
            f"degraded: checkpoints failing ({ops.checkpoint_failures} failures so far), the last "
            f"{now - ops.last_failure:.0f} s ago: {ops.last_failure_reason}"
        )
    return "".join(line + "\n" for line in lines)


def _text(start_response: Callable[..., Any], status: str, body: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


class HttpServer:
    """The WSGI app on ``host:port`` in a daemon thread."""

    def __init__(self, host: str, port: int, app: Any) -> None:
        self.server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, name="streameval-http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(host: str, port: int, app: Any, hint: str = "") -> HttpServer:
    """The app served on ``host:port``, started; InputError naming ``metrics_port`` when the
    address cannot be bound (before anything else starts)."""
    try:
        server = HttpServer(host, port, app)
    except OSError as exc:
        raise InputError(f"metrics_port: cannot listen on {host}:{port} ({exc.strerror}){hint}") from None
    server.start()
    return server
