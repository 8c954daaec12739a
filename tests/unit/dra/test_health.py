"""The health service listens where it is told: every address, or the pod IP the chart passes."""

from __future__ import annotations

import grpc

from cdriver.dra.gen.grpc_health.v1 import health_pb2, health_pb2_grpc
from cdriver.dra.health import listen_host, serve_health_tcp


def test_listen_host_of_an_address() -> None:
    assert listen_host("") == "[::]"
    assert listen_host("10.0.0.7") == "10.0.0.7"
    assert listen_host("fd00::7") == "[fd00::7]"
    assert listen_host("[fd00::7]") == "[fd00::7]"


def test_health_served_on_one_address_answers_there() -> None:
    server, port = serve_health_tcp(0, lambda: "", host=listen_host("127.0.0.1"))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0)]) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="liveness"),
                                                              timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(0)
