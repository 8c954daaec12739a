"""Prometheus metrics of the kubelet plugin: upstream's names (``nvidia_dra_*``), the API
client's (`cdriver.kube.metrics`) and cdriver's own (``cdriver_kubelet_plugin_*``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from cdriver.api import constants
from cdriver.kube.metrics import ApiClientMetrics
from cdriver.roles.kubelet_plugin.errors import KIND_UNKNOWN, REASON_HOST_IMEX_NOT_READY, REASON_WAITING_FOR_DAEMON
from cdriver.roles.kubelet_plugin.node_labels import LABEL_APPLIED, LABEL_REMOVED
from cdriver.roles.kubelet_plugin.waiting import WaitingClaims

OP_PREPARE = "prepare"
OP_UNPREPARE = "unprepare"
DURATION_BUCKETS = tuple(0.005 * 2**k for k in range(13))  # 5 ms .. 20 s
DEVICE_TYPES = (constants.DEVICE_TYPE_CHANNEL, constants.DEVICE_TYPE_DAEMON, KIND_UNKNOWN)
#: How a claim operation ended (``outcome`` label).
OUTCOME_OK = "ok"
OUTCOME_RETRYABLE = "retryable"
OUTCOME_PERMANENT = "permanent"
#: Why the checkpoint was rebuilt (``reason`` label of checkpoint_rebuilds_total).
REBUILD_MISSING = "missing"
REBUILD_CORRUPT = "corrupt"

CLAIMS_WAITING = "cdriver_kubelet_plugin_claims_waiting"
#: the waits of a channel claim for its node's readiness, exported as 0 while none waits so a
#: query on them (the dashboard, alerts) sees a series on every plugin
USUAL_WAITS = ((constants.DEVICE_TYPE_CHANNEL, REASON_WAITING_FOR_DAEMON),
               (constants.DEVICE_TYPE_CHANNEL, REASON_HOST_IMEX_NOT_READY))
OLDEST_WAITING = "cdriver_kubelet_plugin_oldest_waiting_claim_seconds"
LEGACY_API_REQUESTS = "cdriver_kubelet_plugin_api_requests"
#: The verbs of `LEGACY_API_REQUESTS`: the HTTP method (``watch`` for watches), as before the
#: shared API client metrics existed.
_LEGACY_VERBS = {"get": "get", "list": "get", "watch": "watch", "create": "post", "update": "put",
                 "patch": "patch", "apply": "patch", "delete": "delete"}


def kind_label(kind: str) -> str:
    """A claim kind as a label value (channel, daemon, unknown)."""
    return kind if kind in DEVICE_TYPES else KIND_UNKNOWN


class _LegacyApiRequests:
    """``cdriver_kubelet_plugin_api_requests_total{verb}``, from the shared API client counts."""

    def __init__(self, api_client: ApiClientMetrics) -> None:
        self._api_client = api_client

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(LEGACY_API_REQUESTS, "Kubernetes API requests sent.", labels=["verb"])
        counts: dict[str, int] = {}
        for verb, count in self._api_client.by_verb().items():
            legacy = _LEGACY_VERBS.get(verb, verb)
            counts[legacy] = counts.get(legacy, 0) + count
        for verb, count in sorted(counts.items()):
            family.add_metric([verb], count)
        yield family


class _WaitingCollector:
    """Claims waiting by kind and reason, and the oldest one's age per kind, at scrape time."""

    def __init__(self, waiting: WaitingClaims) -> None:
        self._waiting = waiting

    def collect(self) -> Iterable[Metric]:
        counts = GaugeMetricFamily(CLAIMS_WAITING, "Claims whose latest Prepare failed retryably and that "
                                   "are not prepared since", labels=["kind", "reason"])
        waiting = {**dict.fromkeys(USUAL_WAITS, 0), **self._waiting.counts()}
        for (kind, reason), n in sorted(waiting.items()):
            counts.add_metric([kind, reason], n)
        yield counts
        oldest = GaugeMetricFamily(OLDEST_WAITING, "Seconds since the first failed Prepare of the oldest "
                                   "waiting claim (0: none waits)", labels=["kind"])
        for kind, seconds in sorted(self._waiting.oldest(DEVICE_TYPES).items()):
            oldest.add_metric([kind], seconds)
        yield oldest


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
        self.api_client = ApiClientMetrics()
        self.registry.register(self.api_client)
        self.registry.register(_LegacyApiRequests(self.api_client))
        self.claim_operations = Counter(
            "cdriver_kubelet_plugin_claim_operations", "Per-claim Prepare and Unprepare results",
            ["operation", "kind", "outcome", "reason"], registry=self.registry)
        self.claim_duration = Histogram(
            "cdriver_kubelet_plugin_claim_operation_duration_seconds", "Per-claim Prepare and Unprepare "
            "duration, failures included", ["operation", "kind", "outcome"], buckets=DURATION_BUCKETS,
            registry=self.registry)
        self.readiness_waits = Gauge(
            "cdriver_kubelet_plugin_readiness_waits", "Prepare calls waiting now for local readiness (the "
            "node's IMEX daemon, or the host's IMEX service)", ["kind"], registry=self.registry)
        self.waiting = WaitingClaims()
        self.registry.register(_WaitingCollector(self.waiting))
        self.node_label_changes = Counter(
            "cdriver_kubelet_plugin_node_label_changes", "ComputeDomain node labels this plugin wrote",
            ["action"], registry=self.registry)
        self.domain_labels_missing = Gauge(
            "cdriver_kubelet_plugin_domain_labels_missing", "ComputeDomains with a prepared channel claim on "
            "this node whose node label is missing", registry=self.registry)
        self.checkpoint_rebuilds = Counter(
            "cdriver_kubelet_plugin_checkpoint_rebuilds", "Checkpoints rebuilt from CDI specs and the API",
            ["reason"], registry=self.registry)
        self.registered = Gauge(
            "cdriver_kubelet_plugin_registered", "1 once kubelet reported a successful registration",
            registry=self.registry)
        self.slice_published = Gauge(
            "cdriver_kubelet_plugin_resourceslice_published", "1 while this node's ResourceSlice is published "
            "and current", registry=self.registry)
        self.slice_publish_errors = Counter(
            "cdriver_kubelet_plugin_resourceslice_publish_errors", "Failed attempts to publish the "
            "ResourceSlice", registry=self.registry)
        for op in (OP_PREPARE, OP_UNPREPARE):
            self.requests.labels(driver, op)
            self.inflight.labels(driver, op)
            self.duration.labels(driver, op)
        for t in DEVICE_TYPES:
            self.prepared_devices.labels(node_name, driver, t).set(0)
        self.readiness_waits.labels(constants.DEVICE_TYPE_CHANNEL)
        for action in (LABEL_APPLIED, LABEL_REMOVED):
            self.node_label_changes.labels(action)
        for reason in (REBUILD_MISSING, REBUILD_CORRUPT):
            self.checkpoint_rebuilds.labels(reason)

    def bind(self, registered: Callable[[], bool], slice_published: Callable[[], bool],
             domain_labels_missing: Callable[[], int]) -> None:
        """Attach the live sources the gauges read at scrape time."""
        self.registered.set_function(lambda: float(registered()))
        self.slice_published.set_function(lambda: float(slice_published()))
        self.domain_labels_missing.set_function(lambda: float(domain_labels_missing()))

    def observe_claim(self, operation: str, kind: str, outcome: str, reason: str, seconds: float) -> None:
        """One per-claim Prepare or Unprepare result (``reason`` `REASON_NONE` for ok)."""
        kind = kind_label(kind)
        self.claim_operations.labels(operation, kind, outcome, reason).inc()
        self.claim_duration.labels(operation, kind, outcome).observe(seconds)

    def readiness_wait(self, kind: str) -> AbstractContextManager[object]:
        """Counts a Prepare as waiting for local readiness while the context runs."""
        return self.readiness_waits.labels(kind_label(kind)).track_inprogress()

    def node_label_changed(self, action: str) -> None:
        self.node_label_changes.labels(action).inc()

    def observe_success(self, operation: str, seconds: float) -> None:
        """Upstream's series of a successful claim operation."""
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
