"""Prometheus metrics of the kubelet plugin (names compatible with the upstream driver)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import urllib3
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from cdriver.api import constants
from cdriver.kube.ratelimit import TokenBucket
from cdriver.kube.raw import RawClient

OP_PREPARE = "prepare"
OP_UNPREPARE = "unprepare"
DURATION_BUCKETS = tuple(0.005 * 2**k for k in range(13))  # 5 ms .. 20 s
DEVICE_TYPES = (constants.DEVICE_TYPE_CHANNEL, constants.DEVICE_TYPE_DAEMON, "unknown")


class PluginMetrics:
    """All series live in a private registry so tests and several plugins can coexist."""

    def __init__(self, node_name: str, driver: str = constants.DRIVER_NAME) -> None:
        self.node_name = node_name
        self.driver = driver
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "nvidia_dra_requests",
            "Successful DRA requests by operation.",
            ["driver", "operation"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "nvidia_dra_request_duration_seconds",
            "Duration of successful DRA requests per claim.",
            ["driver", "operation"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.inflight = Gauge(
            "nvidia_dra_requests_inflight",
            "Claims being prepared or unprepared now.",
            ["driver", "operation"],
            registry=self.registry,
        )
        self.prepare_errors = Counter(
            "nvidia_dra_node_prepare_errors",
            "Failed claim preparations.",
            ["driver", "error_type"],
            registry=self.registry,
        )
        self.unprepare_errors = Counter(
            "nvidia_dra_node_unprepare_errors",
            "Failed claim unpreparations.",
            ["driver", "error_type"],
            registry=self.registry,
        )
        self.prepared_devices = Gauge(
            "nvidia_dra_prepared_devices",
            "Devices of completely prepared claims.",
            ["node", "driver", "device_type"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            "cdriver_kubelet_plugin_api_requests", "Kubernetes API requests sent.", ["verb"], registry=self.registry
        )
        for op in (OP_PREPARE, OP_UNPREPARE):
            self.requests.labels(driver, op)
            self.inflight.labels(driver, op)
            self.duration.labels(driver, op)
        for t in DEVICE_TYPES:
            self.prepared_devices.labels(node_name, driver, t).set(0)

    def observe_success(self, operation: str, seconds: float) -> None:
        self.requests.labels(self.driver, operation).inc()
        self.duration.labels(self.driver, operation).observe(seconds)

    def observe_error(self, operation: str, error_type: str) -> None:
        counter = self.prepare_errors if operation == OP_PREPARE else self.unprepare_errors
        counter.labels(self.driver, error_type).inc()

    def set_prepared_devices(self, device_types: Iterable[str]) -> None:
        counts = dict.fromkeys(DEVICE_TYPES, 0)
        for t in device_types:
            counts[t if t in counts else "unknown"] += 1
        for t, n in counts.items():
            self.prepared_devices.labels(self.node_name, self.driver, t).set(n)


class CountingRawClient(RawClient):
    """A RawClient that counts its API requests by verb (``watch`` for watch requests)."""

    def __init__(self, api_client: object, metrics: PluginMetrics,
                 rate_limiter: TokenBucket | None = None) -> None:
        super().__init__(api_client, rate_limiter=rate_limiter)
        self._counter = metrics.api_requests

    def _send(self, method: str, path: str, query: dict[str, str] | None, body: Any,
              content_type: str | None, timeout: Any, stream: bool = False) -> urllib3.BaseHTTPResponse:
        verb = "watch" if (query or {}).get("watch") == "true" else method.lower()
        self._counter.labels(verb).inc()
        return super()._send(method, path, query, body, content_type, timeout, stream)
