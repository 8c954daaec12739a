"""Prometheus metrics of one IMEX daemon: nvidia-imex's life, this daemon's place in its clique,
its writes, and the API client's series (`cdriver.kube.metrics`).

Counts the supervisor and the daemon loop keep are read at scrape time (`DaemonViews`), so no
thread but the scrape touches the registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from cdriver.kube.metrics import ApiClientMetrics

from .clique import WRITE_CONFLICT, WRITE_ERROR, WRITE_OK

#: Why nvidia-imex was started again (``reason`` of imex_restarts_total).
RESTART_EXITED = "exited"  # it exited unexpectedly (or was held back after it did)
RESTART_CONFIG_CHANGED = "config_changed"  # its peers or its own index changed
RESTARTS = "cdriver_imex_daemon_imex_restarts"


@dataclass(frozen=True)
class DaemonViews:
    """What the scrape-time series read from the daemon and its supervisor."""

    ready: Callable[[], bool]
    running: Callable[[], bool]
    starts: Callable[[], int]
    crash_restarts: Callable[[], int]
    spawn_failures: Callable[[], int]
    index: Callable[[], int | None]
    peers: Callable[[], int]


class _ViewsCollector:
    def __init__(self, views: DaemonViews, restarts: Callable[[], dict[str, int]]) -> None:
        self._views = views
        self._restarts = restarts

    def collect(self) -> Iterable[Metric]:
        views = self._views
        yield GaugeMetricFamily("cdriver_imex_daemon_ready", "1 while nvidia-imex answers READY",
                                value=int(views.ready()))
        yield GaugeMetricFamily("cdriver_imex_daemon_imex_running", "1 while the supervised nvidia-imex "
                                "process is alive", value=int(views.running()))
        yield CounterMetricFamily("cdriver_imex_daemon_imex_starts", "nvidia-imex processes started",
                                  value=views.starts())
        restarts = CounterMetricFamily(RESTARTS, "nvidia-imex restarts after the first start by reason",
                                       labels=["reason"])
        for reason, count in sorted(self._restarts().items()):
            restarts.add_metric([reason], count)
        yield restarts
        index = views.index()
        yield GaugeMetricFamily("cdriver_imex_daemon_index", "This daemon's index in its clique (-1: none yet)",
                                value=-1 if index is None else index)
        yield GaugeMetricFamily("cdriver_imex_daemon_peers", "Peers nvidia-imex is configured with "
                                "(this daemon included)", value=views.peers())


class DaemonMetrics:
    """The daemon's series in their own registry; `bind` attaches the live sources."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.api_client = ApiClientMetrics()
        self.registry.register(self.api_client)
        self._lock = threading.Lock()
        self._restarts = {RESTART_EXITED: 0, RESTART_CONFIG_CHANGED: 0}
        self._exits_before_ready = 0
        self._held_back = 0
        self._index_seconds = 0.0
        self._views: DaemonViews | None = None
        self.clique_updates = Counter("cdriver_imex_daemon_clique_updates", "Writes of this daemon's clique "
                                      "(or ComputeDomain status) entry by result", ["result"],
                                      registry=self.registry)
        self.clique_conflicts = Counter("cdriver_imex_daemon_clique_update_conflicts", "409 conflicts writing "
                                        "this daemon's clique (or ComputeDomain status) entry",
                                        registry=self.registry)
        for result in (WRITE_OK, WRITE_CONFLICT, WRITE_ERROR):
            self.clique_updates.labels(result)
        self.index_assignment = Gauge("cdriver_imex_daemon_index_assignment_seconds", "Seconds from the "
                                      "daemon's start to its index assigned (0 before)", registry=self.registry)
        self.registry.register(_StartFailures(self))

    def bind(self, views: DaemonViews) -> None:
        """Attach the daemon and its supervisor (once)."""
        self._views = views
        self.registry.register(_ViewsCollector(views, self.restart_counts))

    # -- events of the daemon loop ---------------------------------------------------------
    def clique_write(self, result: str) -> None:
        """One write of the membership entry (`cdriver.roles.imex_daemon.clique.update_with_retry`)."""
        self.clique_updates.labels(result).inc()
        if result == WRITE_CONFLICT:
            self.clique_conflicts.inc()

    def restarted(self, reason: str, times: int = 1) -> None:
        with self._lock:
            self._restarts[reason] = self._restarts.get(reason, 0) + times

    def exited_before_ready(self) -> None:
        with self._lock:
            self._exits_before_ready += 1

    def start_held_back(self) -> None:
        """A start of nvidia-imex that did not happen: another process holds its port."""
        with self._lock:
            self._held_back += 1

    def index_assigned(self, seconds: float) -> None:
        """The first index this daemon got, ``seconds`` after it started (kept once set)."""
        with self._lock:
            if self._index_seconds:
                return
            self._index_seconds = max(seconds, 1e-6)
        self.index_assignment.set(self._index_seconds)

    # -- reads at scrape time ----------------------------------------------------------------
    def restart_counts(self) -> dict[str, int]:
        """Restarts by reason: the supervisor's after crashes count as exited."""
        with self._lock:
            counts = dict(self._restarts)
        if self._views is not None:
            counts[RESTART_EXITED] += self._views.crash_restarts()
        return counts

    def start_failures(self) -> int:
        """Exits before READY, starts held back by a taken port, and starts that could not spawn
        nvidia-imex."""
        with self._lock:
            failed = self._exits_before_ready + self._held_back
        return failed + (self._views.spawn_failures() if self._views is not None else 0)


class _StartFailures:
    def __init__(self, metrics: DaemonMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily("cdriver_imex_daemon_imex_start_failures", "nvidia-imex starts that failed: "
                                  "it could not be spawned, another process held its port, or it exited "
                                  "before it answered READY",
                                  value=self._metrics.start_failures())
