"""What a node's pod workers share: timing options and the node runtime (identity, API
access, plugins, the claim record, CDI resolution, token requests)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cdriver.cdi.reader import CDIRegistry
from cdriver.errors import CdriverError
from cdriver.kube.events import EventRecorder
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.sim.node.simulated.claim_cache import ClaimCache
from cdriver.sim.node.simulated.container_store import ContainerStore
from cdriver.sim.node.simulated.images import ImageContent
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.node.simulated.plugins import PluginManager
from cdriver.sim.node.simulated.pod_addresses import PodAddresses
from cdriver.sim.node.simulated.resource_health import HealthCache


@dataclass
class NodeOptions:
    """Timing of a node; `fast()` scales everything down for tests."""

    heartbeat_interval: float = 10.0
    status_interval: float = 60.0
    backoff_base: float = 10.0
    backoff_max: float = 300.0
    setup_retry_base: float = 1.0
    setup_retry_max: float = 30.0
    plugin_scan_interval: float = 1.0
    prepare_timeout: float = 45.0
    volume_refresh_interval: float = 60.0
    slice_wipe_delay: float = 30.0
    shutdown_grace: float = 5.0
    wait_schedulable: float = 60.0
    #: watch the DRA plugins' resource health and show it in pod status (kubelet 1.36+; off: older)
    resource_health: bool = True

    @classmethod
    def fast(cls) -> NodeOptions:
        return cls(heartbeat_interval=2.0, status_interval=10.0, backoff_base=0.3, backoff_max=3.0,
                   setup_retry_base=0.3, setup_retry_max=2.0, plugin_scan_interval=0.2,
                   prepare_timeout=45.0, volume_refresh_interval=5.0,
                   slice_wipe_delay=5.0, shutdown_grace=2.0)


@dataclass
class NodeRuntime:
    """What pod workers share: the node's identity, API access, plugins and options."""

    node_name: str
    node_ip: str
    layout: NodeLayout
    raw: RawClient
    recorder: EventRecorder
    plugins: PluginManager
    api_host: str
    api_port: int
    allocatable: dict[str, str]
    options: NodeOptions
    path_prefix: list[str]
    log: logging.Logger
    claims: ClaimCache
    #: the DRA plugins' device health (kubelet's health info cache)
    health: HealthCache = field(default_factory=HealthCache)
    #: containers kept running while the agent restarts
    containers: ContainerStore = field(default_factory=ContainerStore)
    #: what the node provides for container images (executables on PATH, image files)
    images: tuple[ImageContent, ...] = ()
    #: the pods' own addresses (host-network pods use node_ip)
    pod_addresses: PodAddresses = field(default_factory=PodAddresses)
    cdi_lock: threading.Lock = field(default_factory=threading.Lock)
    _cdi: CDIRegistry | None = None

    def resolve_cdi(self, ids: list[str]) -> Any:
        with self.cdi_lock:
            if self._cdi is None:
                self._cdi = CDIRegistry(self.layout.cdi_dirs)
            return self._cdi.resolve(ids)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.raw.get_or_none(RESOURCES["configmaps"], name, namespace)

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.raw.get_or_none(RESOURCES["secrets"], name, namespace)

    def services(self, namespace: str) -> list[dict[str, Any]]:
        return self.raw.list(RESOURCES["services"], namespace)["items"]

    def request_token(self, namespace: str, sa: str, audience: str, seconds: int,
                      pod: dict[str, Any]) -> tuple[str, float]:
        """A pod-bound service-account token from the TokenRequest API: (token, seconds valid)."""
        meta = pod["metadata"]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else [], "expirationSeconds": seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                            "uid": meta["uid"]}}}
        resp = self.raw.create_subresource(RESOURCES["serviceaccounts"], sa, "token", body, namespace)
        status = resp.get("status") or {}
        token = status.get("token")
        if not token:
            raise CdriverError(f"TokenRequest for {namespace}/{sa} returned no token")
        valid = float(seconds)
        expires = status.get("expirationTimestamp")
        if expires:
            try:
                when = dt.datetime.strptime(expires, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
                valid = max(when.timestamp() - time.time(), 1.0)
            except ValueError:
                pass
        return token, valid
