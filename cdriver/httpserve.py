"""The roles' HTTP endpoint (``--http-endpoint``): Prometheus metrics and, optionally, health."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

HEALTH_PATHS = ("/healthz", "/readyz", "/livez")
READYZ = "/readyz"
LIVEZ = "/livez"
#: a startup probe's path (served only where the role gives it a check)
STARTUPZ = "/startupz"

#: a health source: (healthy, why) — 200 or 503 with the text
HealthCheck = Callable[[], tuple[bool, str]]


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``":8080"``, ``"0.0.0.0:8080"`` or ``"[::1]:8080"`` -> (host, port).

    Raises ValueError naming ``--http-endpoint``, the value and the expected form.
    """
    text = endpoint.strip()
    if ":" not in text:
        raise ValueError(f"--http-endpoint {endpoint!r}: use HOST:PORT or :PORT (e.g. :8080)")
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--http-endpoint {endpoint!r}: port {port_text!r} is not a number "
                         "(e.g. :8080)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--http-endpoint {endpoint!r}: port must be 0..65535")
    return host, port


def normalise_path(path: str) -> str:
    """``"metrics/"`` -> ``"/metrics"``; empty stays empty (no metrics served)."""
    return "/" + path.strip("/") if path else ""


class HttpServer:
    """Serves ``registry`` at ``metrics_path`` (none when empty) and, with ``healthy``, the health
    paths (200 or 503 with its text); ``checks`` gives a path its own source (it wins over
    ``healthy``). Anything else is 404. Runs on a daemon thread after `start()`.

    Raises ValueError for a malformed endpoint and OSError when the address cannot be bound.
    """

    def __init__(self, endpoint: str, registry: CollectorRegistry, metrics_path: str = "/metrics",
                 healthy: HealthCheck | None = None, checks: Mapping[str, HealthCheck] | None = None) -> None:
        host, port = parse_endpoint(endpoint)
        metrics_path = normalise_path(metrics_path)
        sources: dict[str, HealthCheck] = dict.fromkeys(HEALTH_PATHS, healthy) if healthy is not None else {}
        sources.update(checks or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                path = self.path.split("?", 1)[0]
                if metrics_path and path.rstrip("/") == metrics_path:
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path in sources:
                    ok, text = sources[path]()
                    self._send(200 if ok else 503, (text + "\n").encode(), "text/plain")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("http: " + fmt, *args)

        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        self.server = server_class((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="http",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6
