"""Prometheus metrics and the HTTP endpoint (``/metrics``, ``/healthz``) of the controller."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.process_collector import ProcessCollector

from cdriver.api import constants as C

log = logging.getLogger(__name__)

#: Upstream's metric name: ComputeDomains per global status.
DOMAIN_INFO = "nvidia_dra_compute_domain_info"


class _DomainStatusCollector:
    """Counts ComputeDomains by status at scrape time, from the controller's cache, so the
    numbers are right after a restart or a leader change too."""

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(DOMAIN_INFO, "ComputeDomains by global status",
                                   labels=["status"])
        counts = self._counts()
        for status in (C.STATUS_READY, C.STATUS_NOT_READY):
            family.add_metric([status], counts.get(status, 0))
        yield family


class ControllerMetrics:
    """Metrics of one controller process, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.reconciles = Counter(
            "cdriver_controller_reconcile_total", "ComputeDomain reconciles by result",
            ["result"], registry=self.registry)
        self.reconcile_seconds = Histogram(
            "cdriver_controller_reconcile_duration_seconds", "Duration of one reconcile",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry)
        self.api_writes = Counter(
            "cdriver_controller_api_writes_total", "Write requests sent to the API server",
            ["verb", "resource"], registry=self.registry)
        self.leader = Gauge(
            "cdriver_controller_leader", "1 while this replica leads (or election is off)",
            registry=self.registry)
        self._queue_depth = Gauge(
            "cdriver_controller_queue_depth", "Keys waiting in the work queue",
            registry=self.registry)
        self._queue_depth.set_function(lambda: 0)
        self._status_collector: _DomainStatusCollector | None = None

    def bind(self, domain_counts: Callable[[], dict[str, int]],
             queue_depth: Callable[[], int]) -> None:
        """Attach the live sources (the controller's cache and queue)."""
        if self._status_collector is not None:
            self.registry.unregister(self._status_collector)
        self._status_collector = _DomainStatusCollector(domain_counts)
        self.registry.register(self._status_collector)
        self._queue_depth.set_function(lambda: float(queue_depth()))

    def write(self, verb: str, resource: str) -> None:
        self.api_writes.labels(verb, resource).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HttpServer:
    """Serves ``metrics_path`` and ``/healthz`` on a thread."""

    def __init__(self, endpoint: str, metrics: ControllerMetrics, metrics_path: str,
                 healthy: Callable[[], tuple[bool, str]]) -> None:
        host, port = parse_endpoint(endpoint)
        metrics_path = "/" + metrics_path.strip("/") if metrics_path else ""

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server API
                path = self.path.split("?", 1)[0]
                if metrics_path and path == metrics_path:
                    self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/readyz", "/livez"):
                    ok, text = healthy()
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

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="http",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``":8080"``, ``"0.0.0.0:8080"`` or ``"[::1]:8080"`` -> (host, port)."""
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
