"""DRA node service (kubelet -> plugin), v1 and v1beta1, on top of a plain-Python driver.

The servicers translate protobuf messages to the dataclasses below and back, so the
driver never sees protobuf. Every claim UID in a request gets an entry in the response:
a driver failure becomes that claim's `error`, never an RPC failure or a traceback.
The gRPC server runs handlers on a thread pool, so calls proceed concurrently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from cdriver.dra import sockets
from cdriver.dra.gen.dra.v1 import api_pb2 as v1_pb2
from cdriver.dra.gen.dra.v1 import api_pb2_grpc as v1_grpc
from cdriver.dra.gen.dra.v1beta1 import api_pb2 as v1beta1_pb2
from cdriver.dra.gen.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimRef:
    """A claim as kubelet names it."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


@dataclass
class PreparedDevice:
    """One device handed to kubelet for a claim."""

    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str] = field(default_factory=list)
    share_id: str | None = None

    def to_dict(self) -> dict:
        out = {
            "request_names": list(self.request_names),
            "pool_name": self.pool_name,
            "device_name": self.device_name,
            "cdi_device_ids": list(self.cdi_device_ids),
        }
        if self.share_id:
            out["share_id"] = self.share_id
        return out

    @classmethod
    def from_dict(cls, d: dict) -> PreparedDevice:
        return cls(
            request_names=list(d.get("request_names", [])),
            pool_name=d.get("pool_name", ""),
            device_name=d.get("device_name", ""),
            cdi_device_ids=list(d.get("cdi_device_ids", [])),
            share_id=d.get("share_id") or None,
        )


@dataclass
class PrepareResult:
    """Outcome for one claim: devices, or a non-empty error."""

    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class NodeDriver(Protocol):
    """What the servicers call. Must be thread-safe and never raise for a single claim."""

    def prepare_claims(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]: ...

    def unprepare_claims(self, claims: list[ClaimRef]) -> dict[str, str]: ...


def strip_subrequest(request_name: str) -> str:
    """Kubelet matches container requests by top-level name: "req/sub" -> "req"."""
    return request_name.split("/", 1)[0]


def _claims(request) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in request.claims]


def _call_prepare(driver: NodeDriver, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
    if not claims:
        return {}
    try:
        results = driver.prepare_claims(claims)
    except Exception as exc:  # noqa: BLE001 - reported per claim, never as a traceback to kubelet
        log.exception("prepare failed for %s", [str(c) for c in claims])
        results = {c.uid: PrepareResult(error=f"internal error preparing claim: {exc}") for c in claims}
    out: dict[str, PrepareResult] = {}
    for c in claims:
        out[c.uid] = results.get(c.uid) or PrepareResult(error=f"claim {c} was not processed by the driver")
        log.debug("NodePrepareResources %s: %s", c, out[c.uid].error or f"{len(out[c.uid].devices)} devices")
    return out


def _call_unprepare(driver: NodeDriver, claims: list[ClaimRef]) -> dict[str, str]:
    if not claims:
        return {}
    try:
        results = driver.unprepare_claims(claims)
    except Exception as exc:  # noqa: BLE001
        log.exception("unprepare failed for %s", [str(c) for c in claims])
        results = {c.uid: f"internal error unpreparing claim: {exc}" for c in claims}
    out = {c.uid: results.get(c.uid, f"claim {c} was not processed by the driver") for c in claims}
    for c in claims:
        log.debug("NodeUnprepareResources %s: %s", c, out[c.uid] or "done")
    return out


def _devices_to_pb(pb, devices: list[PreparedDevice], with_share_id: bool) -> list:
    out = []
    for d in devices:
        msg = pb.Device(
            request_names=[strip_subrequest(r) for r in d.request_names],
            pool_name=d.pool_name,
            device_name=d.device_name,
            cdi_device_ids=list(d.cdi_device_ids),
        )
        if with_share_id and d.share_id:
            msg.share_id = d.share_id
        out.append(msg)
    return out


class InFlight:
    """The node-service calls being served now; a stopping plugin waits for them (`wait_idle`)
    before it withdraws its sockets, so that kubelet never sees a call cut off."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._calls = 0

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._cond:
            self._calls += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls -= 1
                self._cond.notify_all()

    @property
    def calls(self) -> int:
        with self._cond:
            return self._calls

    def wait_idle(self, timeout: float) -> bool:
        """True once no call is being served; False if some still are after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._calls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True


class _Servicer:
    """Shared translation for both API versions."""

    pb = v1_pb2
    with_share_id = True

    def __init__(self, driver: NodeDriver, inflight: InFlight | None = None):
        self.driver = driver
        self.inflight = inflight or InFlight()

    def NodePrepareResources(self, request, context: grpc.ServicerContext):
        with self.inflight.call():
            return self._prepare(request)

    def NodeUnprepareResources(self, request, context: grpc.ServicerContext):
        with self.inflight.call():
            return self._unprepare(request)

    def _prepare(self, request):
        results = _call_prepare(self.driver, _claims(request))
        resp = self.pb.NodePrepareResourcesResponse()
        for uid, res in results.items():
            entry = resp.claims[uid]
            if res.error:
                entry.error = res.error
            else:
                entry.devices.extend(_devices_to_pb(self.pb, res.devices, self.with_share_id))
        return resp

    def _unprepare(self, request):
        results = _call_unprepare(self.driver, _claims(request))
        resp = self.pb.NodeUnprepareResourcesResponse()
        for uid, err in results.items():
            resp.claims[uid].error = err or ""
        return resp


class DRAPluginV1Servicer(_Servicer, v1_grpc.DRAPluginServicer):
    """k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin."""

    pb = v1_pb2
    with_share_id = True


class DRAPluginV1beta1Servicer(_Servicer, v1beta1_grpc.DRAPluginServicer):
    """k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin (no share_id)."""

    pb = v1beta1_pb2
    with_share_id = False


def serve_node_service(socket_path: Path, driver: NodeDriver, max_workers: int = 16,
                       extra: list[Callable[[grpc.Server], None]] | None = None,
                       inflight: InFlight | None = None) -> grpc.Server:
    """Serve both DRA node service versions on `socket_path` with a thread pool (and the services
    `extra` adds to the same socket, e.g. the resource health service); `inflight` counts the
    calls being served."""
    v1 = DRAPluginV1Servicer(driver, inflight)
    v1beta1 = DRAPluginV1beta1Servicer(driver, inflight)
    return sockets.serve_unix(
        Path(socket_path),
        [
            lambda s: v1_grpc.add_DRAPluginServicer_to_server(v1, s),
            lambda s: v1beta1_grpc.add_DRAPluginServicer_to_server(v1beta1, s),
            *(extra or []),
        ],
        max_workers=max_workers,
    )
