"""Prometheus metrics and the HTTP endpoint (``/metrics``, ``/healthz``) of the controller."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from cdriver import httpserve
from cdriver.api import constants
from cdriver.httpserve import parse_endpoint

__all__ = ["DOMAIN_INFO", "ControllerMetrics", "HttpServer", "parse_endpoint"]

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
        for status in (constants.STATUS_READY, constants.STATUS_NOT_READY):
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


class HttpServer(httpserve.HttpServer):
    """Serves the controller's ``metrics_path`` and ``/healthz`` (see `cdriver.httpserve`)."""

    def __init__(self, endpoint: str, metrics: ControllerMetrics, metrics_path: str,
                 healthy: Callable[[], tuple[bool, str]]) -> None:
        super().__init__(endpoint, metrics.registry, metrics_path, healthy)
