"""Kubelet plugin registration service (pluginregistration.Registration).

Kubelet finds the registration socket in its registry directory, calls GetInfo, and then
reports the outcome through NotifyRegistrationStatus.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cdriver.dra import sockets
from cdriver.dra.gen.pluginregistration.v1 import api_pb2 as reg_pb2
from cdriver.dra.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc

KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"

log = logging.getLogger(__name__)

PLUGIN_TYPE_DRA = "DRAPlugin"
#: gRPC services served on the DRA socket, in kubelet's order of preference.
DRA_SERVICE_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclass
class RegistrationState:
    """What kubelet last told us about our registration."""

    registered: bool = False
    error: str = ""
    notifications: int = 0
    changed: threading.Event = field(default_factory=threading.Event)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers GetInfo and records NotifyRegistrationStatus."""

    def __init__(self, driver_name: str, endpoint: str, versions: tuple[str, ...] = DRA_SERVICE_VERSIONS):
        self.info = reg_pb2.PluginInfo(
            type=PLUGIN_TYPE_DRA, name=driver_name, endpoint=endpoint, supported_versions=list(versions)
        )
        self.state = RegistrationState()
        self._lock = threading.Lock()

    def GetInfo(self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext) -> reg_pb2.PluginInfo:
        return self.info

    def NotifyRegistrationStatus(
        self, request: reg_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg_pb2.RegistrationStatusResponse:
        with self._lock:
            first = self.state.notifications == 0 or self.state.registered != request.plugin_registered
            self.state.registered = request.plugin_registered
            self.state.error = request.error
            self.state.notifications += 1
            self.state.changed.set()
        if request.plugin_registered:
            if first:
                log.info("kubelet registered plugin %s (endpoint %s)", self.info.name, self.info.endpoint)
            return reg_pb2.RegistrationStatusResponse()
        log.error("kubelet rejected plugin registration: %s", request.error or "(no reason given)")
        context.abort(grpc.StatusCode.UNKNOWN, f"plugin registration failed: {request.error}")
        raise AssertionError("unreachable")  # context.abort raises


def serve_registration(
    socket_path: Path, servicer: RegistrationServicer, max_workers: int = 2
) -> grpc.Server:
    """Serve the registration service on `socket_path` (stale socket replaced)."""
    return sockets.serve_unix(
        Path(socket_path),
        [lambda s: reg_grpc.add_RegistrationServicer_to_server(servicer, s)],
        max_workers=max_workers,
    )
