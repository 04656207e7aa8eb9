"""HTTP: ``/metrics`` (prometheus-client's WSGI app on our registry), ``/healthz``, ``/readyz``,
and ``/`` -- a small human page with the settled and provisional MAP per group.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from streameval.view import View

log = logging.getLogger(__name__)

#: /healthz fails when the loop has not gone round for this long.
STALL_AFTER_S = 30.0


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
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


def _page(view: View) -> str:
    s = view.settings
    rows = []
    for group in sorted(set(view.snapshot.settled) | set(view.snapshot.provisional), key=str):
        labels = ", ".join(f"{k}={v}" for k, v in zip(s.group_by, group, strict=True)) or "(all)"
        cells = [html.escape(labels)]
        for table in (view.snapshot.settled, view.snapshot.provisional):
            sums = table.get(group)
            means = sums.means(s.metrics, s.no_relevant) if sums else [None] * len(s.metrics)
            cells += ["-" if m is None else f"{m:.4f}" for m in means]
            cells.append(str(sums.queries if sums else 0))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    names = [html.escape(str(m)) for m in s.metrics]
    header = (
        "<tr><th>group</th>"
        + "".join(f"<th>settled {n}</th>" for n in names)
        + "<th>settled queries</th>"
        + "".join(f"<th>provisional {n}</th>" for n in names)
        + "<th>open queries</th></tr>"
    )
    state = "ready" if view.ready else "starting"
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>streameval</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
        "td:first-child{text-align:left}</style></head><body>"
        f"<h1>streameval</h1><p>{state}; all settled queries since start, and open queries. "
        "Windowed values: <a href='/metrics'>/metrics</a>.</p>"
        f"<table>{header}{''.join(rows)}</table></body></html>"
    )


def make_app(
    registry: CollectorRegistry, health: Health, view_source: Callable[[], View]
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            ok = health.alive()
            return _text(
                start_response,
                "200 OK" if ok else "503 Service Unavailable",
                "ok\n" if ok else "loop stalled\n",
            )
        if path == "/readyz":
            ready = view_source().ready
            return _text(
                start_response,
                "200 OK" if ready else "503 Service Unavailable",
                "ready\n" if ready else "not ready: waiting for partitions\n",
            )
        if path in ("/", "/index.html"):
            body = _page(view_source()).encode()
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [body]
        return _text(start_response, "404 Not Found", "not found: try /metrics, /healthz, /readyz or /\n")

    return app


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
