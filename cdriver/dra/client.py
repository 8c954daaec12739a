"""Kubelet's side of the DRA gRPC services: the node-service client and registration calls.

`DRAPluginClient` calls NodePrepareResources / NodeUnprepareResources of one registered
plugin with a deadline and answers in the node service's own terms (`ClaimRef`,
`PreparedDevice`, `PrepareResult`). `get_info` and `notify_registration` are the two calls
kubelet's plugin watcher makes on a registration socket. Socket paths longer than a Unix
address allows are dialled through ``/proc/self/fd/<dir fd>/<name>``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from cdriver.dra.node_service import ClaimRef, PreparedDevice, PrepareResult
from cdriver.errors import CdriverError

MAX_UNIX_PATH = 107
DEFAULT_CALL_TIMEOUT = 45.0
CANCEL_POLL = 0.05  # seconds between looks at a cancellable call's cancel event


class DRAError(CdriverError):
    """A DRA plugin call failed as a whole (connection, deadline, bad answer); `code` is the
    call's gRPC status when the call itself failed."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class UnixTarget:
    """A gRPC target for a Unix socket path of any length (closes its helper fd on close)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._dir_fd: int | None = None
        text = str(self.path)
        if len(os.fsencode(text)) <= MAX_UNIX_PATH:
            self.target = f"unix:{text}"
        else:
            self._dir_fd = os.open(self.path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.target = f"unix:/proc/self/fd/{self._dir_fd}/{self.path.name}"

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def open_channel(path: Path) -> tuple[grpc.Channel, UnixTarget]:
    target = UnixTarget(path)
    return grpc.insecure_channel(target.target, options=[("grpc.enable_http_proxy", 0)]), target


def _stubs(service: str) -> tuple[Any, Any]:
    """(pb module, stub class) of a node-service version."""
    if service == "v1.DRAPlugin":
        from cdriver.dra.gen.dra.v1 import api_pb2, api_pb2_grpc
    else:
        from cdriver.dra.gen.dra.v1beta1 import api_pb2, api_pb2_grpc
    return api_pb2, api_pb2_grpc.DRAPluginStub


def rpc_details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return str(details() if callable(details) else exc)


def _rpc_error(call: str, driver: str, exc: grpc.RpcError) -> DRAError:
    code = exc.code() if hasattr(exc, "code") else None
    return DRAError(f"{call} on DRA driver {driver}: {getattr(code, 'name', code)}: {rpc_details(exc)}",
                    code if isinstance(code, grpc.StatusCode) else None)


@dataclass
class PluginEndpoint:
    """A registered plugin."""

    driver: str
    endpoint: Path
    registration_socket: Path
    service: str
    registered_at: float


class DRAPluginClient:
    """The node service of one registered plugin."""

    def __init__(self, plugin: PluginEndpoint) -> None:
        self.plugin = plugin
        self._pb, stub = _stubs(plugin.service)
        self._channel, self._target = open_channel(plugin.endpoint)
        self._stub = stub(self._channel)

    def close(self) -> None:
        self._channel.close()
        self._target.close()

    def _claims(self, claims: list[ClaimRef]) -> list[Any]:
        return [self._pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def prepare(self, claims: list[ClaimRef], timeout: float = DEFAULT_CALL_TIMEOUT,
                cancel: threading.Event | None = None) -> dict[str, PrepareResult]:
        """NodePrepareResources; per-claim outcomes keyed by UID (a missing claim is an error).
        Setting `cancel` cancels the call, as kubelet cancels a pod's sync when the pod goes
        (the plugin sees its context cancelled; the result is a CANCELLED DRAError)."""
        request = self._pb.NodePrepareResourcesRequest(claims=self._claims(claims))
        try:
            if cancel is None:
                resp = self._stub.NodePrepareResources(request, timeout=timeout)
            else:
                resp = self._cancellable(self._stub.NodePrepareResources.future(request, timeout=timeout), cancel)
        except grpc.RpcError as exc:
            raise _rpc_error("NodePrepareResources", self.plugin.driver, exc) from None
        wanted = {c.uid for c in claims}
        unknown = set(resp.claims) - wanted
        if unknown:
            raise DRAError(f"NodePrepareResources on DRA driver {self.plugin.driver} returned results for "
                           f"unknown claim UIDs {sorted(unknown)}")
        out: dict[str, PrepareResult] = {}
        for claim in claims:
            if claim.uid not in resp.claims:
                out[claim.uid] = PrepareResult(error=f"NodePrepareResources skipped claim {claim.name}")
                continue
            result = resp.claims[claim.uid]
            if result.error:
                out[claim.uid] = PrepareResult(error=result.error)
                continue
            out[claim.uid] = PrepareResult(devices=[
                PreparedDevice(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
                for d in result.devices])
        return out

    def _cancellable(self, call: Any, cancel: threading.Event) -> Any:
        """The call's response, or a CANCELLED DRAError once `cancel` is set first."""
        done = threading.Event()
        call.add_done_callback(lambda _: done.set())
        while not done.wait(CANCEL_POLL):
            if cancel.is_set():
                call.cancel()
                break
        if call.cancelled():
            raise DRAError(f"NodePrepareResources on DRA driver {self.plugin.driver}: CANCELLED: "
                           "the call was cancelled (its pod is going away)", grpc.StatusCode.CANCELLED)
        return call.result()

    def unprepare(self, claims: list[ClaimRef], timeout: float = DEFAULT_CALL_TIMEOUT) -> dict[str, str]:
        """NodeUnprepareResources; UID -> error ("" = done)."""
        try:
            resp = self._stub.NodeUnprepareResources(
                self._pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=timeout)
        except grpc.RpcError as exc:
            raise _rpc_error("NodeUnprepareResources", self.plugin.driver, exc) from None
        return {c.uid: (resp.claims[c.uid].error if c.uid in resp.claims
                        else f"NodeUnprepareResources skipped claim {c.name}") for c in claims}


def get_info(socket_path: Path, timeout: float) -> Any:
    from cdriver.dra.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

    channel, target = open_channel(socket_path)
    try:
        return api_pb2_grpc.RegistrationStub(channel).GetInfo(api_pb2.InfoRequest(), timeout=timeout)
    finally:
        channel.close()
        target.close()


def notify_registration(socket_path: Path, registered: bool, error: str, timeout: float) -> str:
    """NotifyRegistrationStatus; "" when the plugin took it, else why not."""
    from cdriver.dra.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

    channel, target = open_channel(socket_path)
    try:
        api_pb2_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
            api_pb2.RegistrationStatus(plugin_registered=registered, error=error), timeout=timeout)
        return ""
    except grpc.RpcError as exc:
        return rpc_details(exc)
    finally:
        channel.close()
        target.close()


