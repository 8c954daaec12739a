"""Prometheus metrics and the HTTP endpoint (``/metrics``, ``/healthz``) of the controller."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector

from cdriver import httpserve
from cdriver.api import constants
from cdriver.httpserve import parse_endpoint
from cdriver.kube.metrics import ApiClientMetrics
from cdriver.kube.objects import meta_of

__all__ = ["DOMAIN_INFO", "CacheViews", "ControllerMetrics", "HttpServer", "parse_endpoint"]

#: Upstream's metric name: ComputeDomains per global status.
DOMAIN_INFO = "nvidia_dra_compute_domain_info"
DOMAIN_READY = "cdriver_controller_compute_domain_ready"
CLIQUE_DAEMONS = "cdriver_controller_clique_daemons"
STALE_NODE_LABELS = "cdriver_controller_stale_node_labels"
_STATUSES = (constants.STATUS_READY, constants.STATUS_NOT_READY)


@dataclass(frozen=True)
class CacheViews:
    """What the scrape-time gauges read from the controller's caches."""

    #: ComputeDomains by global status
    domain_counts: Callable[[], dict[str, int]]
    #: every cached ComputeDomain
    domains: Callable[[], list[dict]] = list
    #: daemon entries (of cliques, or of status.nodes) by status
    daemon_counts: Callable[[], dict[str, int]] = dict
    #: nodes labelled for a domain that is gone (or deleted and otherwise cleaned up)
    stale_node_labels: Callable[[], int] = lambda: 0


class _CacheCollector:
    """Gauges computed at scrape time from the controller's caches, so the numbers are right
    after a restart or a leader change too."""

    def __init__(self, views: CacheViews) -> None:
        self._views = views

    def collect(self) -> Iterable[GaugeMetricFamily]:
        views = self._views
        family = GaugeMetricFamily(DOMAIN_INFO, "ComputeDomains by global status",
                                   labels=["status"])
        counts = views.domain_counts()
        for status in _STATUSES:
            family.add_metric([status], counts.get(status, 0))
        yield family
        ready = GaugeMetricFamily(DOMAIN_READY, "1 while the ComputeDomain is Ready, else 0",
                                  labels=["domain_namespace", "domain_name"])
        for cd in views.domains():
            meta = meta_of(cd)
            ready.add_metric([str(meta.get("namespace") or ""), str(meta.get("name") or "")],
                             1 if (cd.get("status") or {}).get("status") == constants.STATUS_READY else 0)
        yield ready
        daemons = GaugeMetricFamily(CLIQUE_DAEMONS, "IMEX daemon entries of all ComputeDomainCliques (or of "
                                    "status.nodes without cliques) by status", labels=["status"])
        counts = views.daemon_counts()
        for status in _STATUSES:
            daemons.add_metric([status], counts.get(status, 0))
        yield daemons
        yield GaugeMetricFamily(STALE_NODE_LABELS, "Nodes labelled for a ComputeDomain that no longer exists "
                                "(or is being deleted and otherwise cleaned up)", value=views.stale_node_labels())


class ControllerMetrics:
    """Metrics of one controller process, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        self.api_client = ApiClientMetrics()
        self.registry.register(self.api_client)
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
        self.node_labels_removed = Counter(
            "cdriver_controller_node_labels_removed_total", "ComputeDomain node labels removed in cleanup",
            registry=self.registry)
        self._cache_collector: _CacheCollector | None = None

    def bind(self, domain_counts: Callable[[], dict[str, int]] | CacheViews,
             queue_depth: Callable[[], int]) -> None:
        """Attach the live sources (the controller's caches, or just its domain counts, and queue)."""
        if self._cache_collector is not None:
            self.registry.unregister(self._cache_collector)
        views = domain_counts if isinstance(domain_counts, CacheViews) else CacheViews(domain_counts)
        self._cache_collector = _CacheCollector(views)
        self.registry.register(self._cache_collector)
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
