"""The DRA resource health service (``v1.DRAResourceHealth``, and ``v1alpha1`` for kubelets that
speak only that): a stream of the health of every device the plugin reports on.

`HealthFeed` holds the plugin's latest report; each kubelet stream gets it at once, again on
every change, and again every `resend_interval` seconds unchanged (kubelet reads a device as
Unknown when no report came within its timeout, which every device states as `timeout_seconds`).
A stream ends when kubelet cancels it or the feed is closed (the plugin stopping).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from cdriver.dra.gen.dra_health.v1 import api_pb2 as v1_pb2
from cdriver.dra.gen.dra_health.v1 import api_pb2_grpc as v1_grpc
from cdriver.dra.gen.dra_health.v1alpha1 import api_pb2 as v1alpha1_pb2
from cdriver.dra.gen.dra_health.v1alpha1 import api_pb2_grpc as v1alpha1_grpc

#: the registration versions that tell kubelet the DRA socket serves this service, best first
HEALTH_SERVICE_VERSIONS = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
#: an unchanged report is sent again this often ...
RESEND_INTERVAL = 10.0
#: ... and each device says kubelet may wait this long for the next one before it reads Unknown
TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class DeviceHealthReport:
    """One device's health as the plugin sees it."""

    pool: str
    device: str
    health: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str = ""
    #: what a received report said kubelet may wait for the next one (0: not stated)
    timeout_seconds: int = 0


class HealthFeed:
    """The latest report and a generation counter; streams wait on it."""

    def __init__(self, resend_interval: float = RESEND_INTERVAL, timeout_seconds: int = TIMEOUT_SECONDS) -> None:
        self.resend_interval = resend_interval
        self.timeout_seconds = timeout_seconds
        self._cond = threading.Condition()
        self._report: tuple[DeviceHealthReport, ...] = ()
        self._checked = 0.0
        self._generation = 0
        self._closed = False
        self.streams = 0

    def publish(self, report: list[DeviceHealthReport]) -> bool:
        """Set the current report (checked now); True when it differs from the previous one."""
        new = tuple(report)
        with self._cond:
            self._checked = time.time()
            if new == self._report:
                return False
            self._report = new
            self._generation += 1
            self._cond.notify_all()
            return True

    def current(self) -> tuple[DeviceHealthReport, ...]:
        with self._cond:
            return self._report

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def updates(self, active: Callable[[], bool] = lambda: True
                ) -> Iterator[tuple[tuple[DeviceHealthReport, ...], float]]:
        """(report, checked at) now, on every change and every resend interval, while `active()`."""
        seen = -1
        while True:
            with self._cond:
                if self._closed or not active():
                    return
                if self._generation == seen:
                    self._cond.wait(self.resend_interval)
                    if self._closed or not active():
                        return
                seen = self._generation
                report, checked = self._report, self._checked
            yield report, checked


def _response(pb: object, report: tuple[DeviceHealthReport, ...], checked: float, timeout: int) -> object:
    status = {HEALTHY: pb.HEALTHY, UNHEALTHY: pb.UNHEALTHY}  # type: ignore[attr-defined]
    return pb.NodeWatchResourcesResponse(devices=[  # type: ignore[attr-defined]
        pb.DeviceHealth(  # type: ignore[attr-defined]
            device=pb.DeviceIdentifier(pool_name=d.pool, device_name=d.device),  # type: ignore[attr-defined]
            health=status.get(d.health, pb.UNKNOWN),  # type: ignore[attr-defined]
            last_updated_time=int(checked), health_check_timeout_seconds=timeout, message=d.message)
        for d in report])


class _Servicer:
    pb: object

    def __init__(self, feed: HealthFeed) -> None:
        self.feed = feed

    def NodeWatchResources(self, request: object, context: grpc.ServicerContext) -> Iterator[object]:
        with self.feed._cond:
            self.feed.streams += 1
        try:
            for report, checked in self.feed.updates(context.is_active):
                yield _response(self.pb, report, checked, self.feed.timeout_seconds)
        finally:
            with self.feed._cond:
                self.feed.streams -= 1


class ResourceHealthV1Servicer(_Servicer, v1_grpc.DRAResourceHealthServicer):
    """v1.DRAResourceHealth."""

    pb = v1_pb2


class ResourceHealthV1alpha1Servicer(_Servicer, v1alpha1_grpc.DRAResourceHealthServicer):
    """v1alpha1.DRAResourceHealth (same messages)."""

    pb = v1alpha1_pb2


def health_registrations(feed: HealthFeed) -> list:
    """Functions adding both versions of the service to a gRPC server (see `sockets.serve_unix`)."""
    v1, v1alpha1 = ResourceHealthV1Servicer(feed), ResourceHealthV1alpha1Servicer(feed)
    return [lambda s: v1_grpc.add_DRAResourceHealthServicer_to_server(v1, s),
            lambda s: v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(v1alpha1, s)]


def watch_resource_health(channel: grpc.Channel, service: str) -> Iterator[list[DeviceHealthReport]]:
    """Kubelet's side: open `service`'s stream on `channel` and yield each response as reports (the
    update time dropped: the caller keeps its own clock, as kubelet does)."""
    stub: object
    if service == HEALTH_SERVICE_VERSIONS[0]:
        stub, pb = v1_grpc.DRAResourceHealthStub(channel), v1_pb2
    elif service == HEALTH_SERVICE_VERSIONS[1]:
        stub, pb = v1alpha1_grpc.DRAResourceHealthStub(channel), v1alpha1_pb2
    else:
        raise ValueError(f"unknown health service {service!r}")
    names = {pb.HEALTHY: HEALTHY, pb.UNHEALTHY: UNHEALTHY}
    for resp in stub.NodeWatchResources(pb.NodeWatchResourcesRequest()):  # type: ignore[attr-defined]
        yield [DeviceHealthReport(d.device.pool_name, d.device.device_name, names.get(d.health, UNKNOWN), d.message,
                                  int(d.health_check_timeout_seconds)) for d in resp.devices]
