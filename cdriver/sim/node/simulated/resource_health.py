"""Device health on a simulated node, as kubelet's DRA manager keeps it (ResourceHealthStatus, 1.36+).

For a registered plugin that advertises ``v1.DRAResourceHealth`` (or ``v1alpha1``), a watcher
holds its `NodeWatchResources` stream open, re-opening it 5 s after it ends, as kubelet does.
`HealthCache` keeps kubelet's rules: each report lists the devices the plugin watches; a device
reads Unknown (no message) once its report is older than the timeout it stated (30 s when it
stated none); a device missing from reports is dropped once it has timed out; a stream that ends
clears its driver. `allocated_resources_status` renders a container's
``status.containerStatuses[].allocatedResourcesStatus`` from it: one entry per claim the
container uses (``claim:<name>``, or ``claim:<name>/<request>``), each device of the claim as a
resource ID (its first CDI device ID), its health and its message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cdriver.dra.client import open_channel
from cdriver.dra.resource_health import HEALTH_SERVICE_VERSIONS, UNKNOWN, DeviceHealthReport, watch_resource_health
from cdriver.sim.node.simulated.claim_cache import ClaimCache

#: kubelet's timeout for a device whose report stated none
DEFAULT_TIMEOUT = 30.0
#: kubelet re-opens an ended stream after this long
RETRY_INTERVAL = 5.0
#: kubelet's health statuses as the pod status spells them
HEALTH_STATUS = {"Healthy": "Healthy", "Unhealthy": "Unhealthy", UNKNOWN: "Unknown"}


def pick_health_service(versions: list[str]) -> str:
    """The newest health service the plugin advertises ("" for none), kubelet's rule."""
    return next((s for s in HEALTH_SERVICE_VERSIONS if s in versions), "")


@dataclass
class _Entry:
    health: str
    message: str
    timeout: float
    updated: float


class HealthCache:
    """Per driver, the last reported health of each pool/device (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._drivers: dict[str, dict[tuple[str, str], _Entry]] = {}

    def update(self, driver: str, reports: list[DeviceHealthReport]) -> list[tuple[str, str]]:
        """Take one report of `driver`; the (pool, device) pairs whose state changed."""
        now = self.clock()
        changed = []
        with self._lock:
            devices = self._drivers.setdefault(driver, {})
            seen = set()
            for r in reports:
                key = (r.pool, r.device)
                seen.add(key)
                timeout = float(r.timeout_seconds) if r.timeout_seconds > 0 else DEFAULT_TIMEOUT
                old = devices.get(key)
                if old is None or (old.health, old.message, old.timeout) != (r.health, r.message, timeout):
                    changed.append(key)
                devices[key] = _Entry(r.health, r.message, timeout, now)
            for key, entry in list(devices.items()):
                if key not in seen and now - entry.updated > entry.timeout:
                    if entry.health != UNKNOWN:
                        changed.append(key)
                    del devices[key]
        return changed

    def get(self, driver: str, pool: str, device: str) -> tuple[str, str]:
        """(health, message) of a device now: Unknown and no message when its report is too old."""
        with self._lock:
            entry = self._drivers.get(driver, {}).get((pool, device))
            if entry is None or self.clock() - entry.updated > entry.timeout:
                return UNKNOWN, ""
            return entry.health, entry.message

    def clear(self, driver: str) -> None:
        with self._lock:
            self._drivers.pop(driver, None)


class HealthWatcher:
    """Holds one plugin's health stream open (a thread), feeding `cache`."""

    def __init__(self, driver: str, endpoint: Path, service: str, cache: HealthCache,
                 logger: logging.Logger, retry: float = RETRY_INTERVAL) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.service = service
        self.cache = cache
        self.log = logger
        self.retry = retry
        self._stop = threading.Event()
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"health-{driver}", daemon=True)

    def start(self) -> HealthWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._channel is not None:
                self._channel.close()  # cancels the stream
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            channel, target = open_channel(self.endpoint)  # a node path may be longer than a socket address
            with self._lock:
                self._channel = channel
            try:
                for report in watch_resource_health(channel, self.service):
                    changed = self.cache.update(self.driver, report)
                    if changed:
                        self.log.info("DRA driver %s: health of %s changed", self.driver,
                                      ", ".join(f"{p}/{d}" for p, d in changed))
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # advertised but not served: stop watching
                    self.log.info("DRA driver %s does not serve %s; not watching its health", self.driver,
                                  self.service)
                    self.cache.clear(self.driver)
                    return
                self.log.debug("DRA driver %s: health stream ended: %s", self.driver, exc.code())
            finally:
                channel.close()
                target.close()
            self.cache.clear(self.driver)
            self._stop.wait(self.retry)


def allocated_resources_status(namespace: str, claim_names: dict[str, str | None], container: dict[str, Any],
                               claims: ClaimCache, health: HealthCache) -> list[dict[str, Any]]:
    """The container's allocatedResourcesStatus (empty when it uses no prepared claim); `claim_names`
    maps the pod's claim names to their ResourceClaims (`claims.pod_claim_names`)."""
    out = []
    for use in (container.get("resources") or {}).get("claims") or []:
        name = claim_names.get(use.get("name", ""))
        info = claims.get(namespace, name) if name else None
        if info is None:
            continue
        request = use.get("request") or ""
        resources: list[dict[str, Any]] = []
        seen: set[str] = set()
        for driver in sorted(info.devices):
            for device in info.devices[driver]:
                if request and device.request_names and request.split("/", 1)[0] not in device.request_names:
                    continue
                resource_id = (device.cdi_device_ids[0] if device.cdi_device_ids
                               else f"{driver}/{device.pool_name}/{device.device_name}")
                if resource_id in seen:
                    continue
                seen.add(resource_id)
                state, message = health.get(driver, device.pool_name, device.device_name)
                entry = {"resourceID": resource_id, "health": HEALTH_STATUS.get(state, "Unknown")}
                if message:
                    entry["message"] = message
                resources.append(entry)
        if resources:
            out.append({"name": f"claim:{use['name']}" + (f"/{request}" if request else ""), "resources": resources})
    return out
