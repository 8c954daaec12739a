"""gRPC health service (grpc.health.v1.Health) that checks the plugin's own sockets.

A Check dials the registration socket (GetInfo) and the DRA socket (an empty v1beta1
NodePrepareResources), exactly what kubelet relies on; both must answer for SERVING. The
"readiness" service asks one more thing, cheaply: whether kubelet has confirmed the
registration (a new pod of a rolling update is Ready, and its old pod is stopped, only once
kubelet can send it calls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from cdriver.dra.gen.dra.v1beta1 import api_pb2 as v1beta1_pb2
from cdriver.dra.gen.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from cdriver.dra.gen.grpc_health.v1 import health_pb2, health_pb2_grpc
from cdriver.dra.gen.pluginregistration.v1 import api_pb2 as reg_pb2
from cdriver.dra.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

#: Service names a probe may ask for.
KNOWN_SERVICES = ("", "liveness", "readiness")
READINESS = "readiness"


def probe_plugin_sockets(registration_socket: Path, dra_socket: Path, timeout: float = 5.0) -> str:
    """Return "" if both sockets answer, else a description of the first failure."""
    try:
        with grpc.insecure_channel(f"unix://{registration_socket}") as ch:
            reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        return f"registration socket {registration_socket}: GetInfo failed: {exc.code().name} {exc.details()}"
    try:
        with grpc.insecure_channel(f"unix://{dra_socket}") as ch:
            v1beta1_grpc.DRAPluginStub(ch).NodePrepareResources(
                v1beta1_pb2.NodePrepareResourcesRequest(), timeout=timeout
            )
    except grpc.RpcError as exc:
        return f"DRA socket {dra_socket}: NodePrepareResources failed: {exc.code().name} {exc.details()}"
    return ""


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Answers Check for "" and "liveness" by running `check`, and for "readiness" by running
    `ready` (each returns "" when healthy; without `ready`, readiness is `check`)."""

    def __init__(self, check: Callable[[], str], ready: Callable[[], str] | None = None):
        self.check = check
        self.ready = ready or check

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext):
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        problem = self.ready() if request.service == READINESS else self.check()
        if problem:
            log.warning("health check failed: %s", problem)
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def listen_host(address: str) -> str:
    """The gRPC listen host for `address`: every address when empty, IPv6 in brackets."""
    if not address:
        return "[::]"
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def serve_health_tcp(port: int, check: Callable[[], str], host: str = "[::]",
                     ready: Callable[[], str] | None = None) -> tuple[grpc.Server, int]:
    """Serve the health service on TCP `port` (0 = random); returns (server, bound port)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="grpc-health"))
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(check, ready), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot listen on {host}:{port} for the health service")
    server.start()
    log.info("serving gRPC health on port %d", bound)
    return server, bound
