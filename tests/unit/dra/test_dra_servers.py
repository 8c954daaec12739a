"""Registration, DRA node and health servers over real Unix sockets."""

from __future__ import annotations

import os
import stat
import threading
import uuid
from pathlib import Path

import grpc
import pytest

from cdriver.dra import health, node_service, registration, sockets
from cdriver.dra.gen.dra.v1 import api_pb2 as v1
from cdriver.dra.gen.dra.v1 import api_pb2_grpc as v1_grpc
from cdriver.dra.gen.dra.v1beta1 import api_pb2 as v1beta1
from cdriver.dra.gen.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from cdriver.dra.gen.grpc_health.v1 import health_pb2, health_pb2_grpc
from cdriver.dra.gen.pluginregistration.v1 import api_pb2 as reg_pb2
from cdriver.dra.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from cdriver.dra.node_service import ClaimRef, PreparedDevice, PrepareResult


@pytest.fixture
def sockdir():
    # Short path: Unix socket names are limited to 107 bytes.
    d = Path("/tmp") / f"cdt-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    yield d
    for p in sorted(d.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() else p.rmdir()
    d.rmdir()


class RecordingDriver:
    """A NodeDriver with programmable answers; records what it was asked."""

    def __init__(self):
        self.prepared: list[list[ClaimRef]] = []
        self.answers: dict[str, PrepareResult] = {}
        self.raise_exc: Exception | None = None
        self.barrier: threading.Barrier | None = None

    def prepare_claims(self, claims):
        self.prepared.append(list(claims))
        if self.barrier is not None:
            self.barrier.wait(timeout=5)
        if self.raise_exc:
            raise self.raise_exc
        return {c.uid: self.answers[c.uid] for c in claims if c.uid in self.answers}

    def unprepare_claims(self, claims):
        return {c.uid: ("" if c.uid != "bad" else "cannot remove spec") for c in claims}


def test_registration_get_info_and_versions_order(sockdir):
    path = sockdir / "compute-domain.nvidia.com-reg.sock"
    servicer = registration.RegistrationServicer("compute-domain.nvidia.com", "/x/dra.sock")
    server = registration.serve_registration(path, servicer)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with grpc.insecure_channel(f"unix://{path}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=5)
            assert info.type == "DRAPlugin"
            assert info.name == "compute-domain.nvidia.com"
            assert info.endpoint == "/x/dra.sock"
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
            stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
            assert servicer.state.registered
            with pytest.raises(grpc.RpcError) as err:
                stub.NotifyRegistrationStatus(
                    reg_pb2.RegistrationStatus(plugin_registered=False, error="version mismatch"), timeout=5
                )
            assert "version mismatch" in err.value.details()
            assert not servicer.state.registered and servicer.state.error == "version mismatch"
    finally:
        sockets.stop_server(server, path)
    assert not path.exists()


def test_stale_socket_file_is_replaced(sockdir):
    path = sockdir / "dra.sock"
    path.write_text("left over by a crashed process")
    server = node_service.serve_node_service(path, RecordingDriver())
    try:
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    finally:
        sockets.stop_server(server, path)


def test_socket_path_too_long_is_a_clear_error(sockdir):
    path = sockdir / ("d" * 120) / "dra.sock"
    with pytest.raises(sockets.SocketError, match="at most 107"):
        node_service.serve_node_service(path, RecordingDriver())


def test_directory_in_the_way_is_reported_not_removed(sockdir):
    path = sockdir / "dra.sock"
    path.mkdir()
    with pytest.raises(sockets.SocketError, match="is a directory"):
        node_service.serve_node_service(path, RecordingDriver())
    assert path.is_dir()


@pytest.fixture
def dra(sockdir):
    driver = RecordingDriver()
    path = sockdir / "dra.sock"
    server = node_service.serve_node_service(path, driver)
    ch = grpc.insecure_channel(f"unix://{path}")
    yield driver, ch, path
    ch.close()
    sockets.stop_server(server, path)


@pytest.mark.parametrize("pb,grpc_mod", [(v1, v1_grpc), (v1beta1, v1beta1_grpc)])
def test_prepare_translates_results_for_both_versions(dra, pb, grpc_mod):
    driver, ch, _ = dra
    driver.answers = {
        "u1": PrepareResult(
            devices=[
                PreparedDevice(
                    ["channel/sub"],
                    "node-a",
                    "channel-0",
                    ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"],
                    share_id="s1",
                )
            ]
        ),
        "u2": PrepareResult(error="ComputeDomain not ready"),
    }
    req = pb.NodePrepareResourcesRequest(
        claims=[
            pb.Claim(namespace="ns", name="c1", uid="u1"),
            pb.Claim(namespace="ns", name="c2", uid="u2"),
            pb.Claim(namespace="ns", name="c3", uid="u3"),
        ]
    )
    resp = grpc_mod.DRAPluginStub(ch).NodePrepareResources(req, timeout=5)
    assert set(resp.claims) == {"u1", "u2", "u3"}
    dev = resp.claims["u1"].devices[0]
    assert list(dev.request_names) == ["channel"]
    assert (dev.pool_name, dev.device_name) == ("node-a", "channel-0")
    assert list(dev.cdi_device_ids) == ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"]
    assert resp.claims["u1"].error == ""
    if pb is v1:
        assert dev.share_id == "s1"
    assert resp.claims["u2"].error == "ComputeDomain not ready"
    assert "not processed" in resp.claims["u3"].error
    assert driver.prepared[0] == [
        ClaimRef("ns", "c1", "u1"),
        ClaimRef("ns", "c2", "u2"),
        ClaimRef("ns", "c3", "u3"),
    ]


def test_empty_prepare_returns_empty_map_without_calling_driver(dra):
    driver, ch, _ = dra
    resp = v1beta1_grpc.DRAPluginStub(ch).NodePrepareResources(
        v1beta1.NodePrepareResourcesRequest(), timeout=5
    )
    assert len(resp.claims) == 0
    assert driver.prepared == []


def test_driver_exception_becomes_per_claim_error(dra):
    driver, ch, _ = dra
    driver.raise_exc = RuntimeError("boom")
    resp = v1_grpc.DRAPluginStub(ch).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="n", name="c", uid="u")]), timeout=5
    )
    assert "boom" in resp.claims["u"].error


def test_unprepare_reports_every_uid(dra):
    _, ch, _ = dra
    resp = v1_grpc.DRAPluginStub(ch).NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(
            claims=[v1.Claim(namespace="n", name="a", uid="ok"), v1.Claim(namespace="n", name="b", uid="bad")]
        ),
        timeout=5,
    )
    assert resp.claims["ok"].error == ""
    assert resp.claims["bad"].error == "cannot remove spec"


def test_calls_are_handled_concurrently(dra):
    driver, ch, _ = dra
    # Two calls must be inside the driver at the same time to pass the barrier.
    driver.barrier = threading.Barrier(2)
    driver.answers = {"a": PrepareResult(), "b": PrepareResult()}
    stub = v1_grpc.DRAPluginStub(ch)
    futs = [
        stub.NodePrepareResources.future(
            v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="n", name=u, uid=u)]), timeout=10
        )
        for u in ("a", "b")
    ]
    for f in futs:
        assert f.result().claims
    assert not driver.barrier.broken


def test_health_reports_serving_then_not_serving(sockdir):
    reg_path = sockdir / "reg.sock"
    dra_path = sockdir / "dra.sock"
    reg_server = registration.serve_registration(
        reg_path, registration.RegistrationServicer("d", str(dra_path))
    )
    dra_server = node_service.serve_node_service(dra_path, RecordingDriver())
    hserver, port = health.serve_health_tcp(
        0, lambda: health.probe_plugin_sockets(reg_path, dra_path, 2), host="127.0.0.1"
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            for service in ("", "liveness"):
                assert (
                    stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
                    == health_pb2.HealthCheckResponse.SERVING
                )
            with pytest.raises(grpc.RpcError) as err:
                stub.Check(health_pb2.HealthCheckRequest(service="other"), timeout=5)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            sockets.stop_server(dra_server, dra_path)
            assert (
                stub.Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10).status
                == health_pb2.HealthCheckResponse.NOT_SERVING
            )
    finally:
        hserver.stop(0)
        sockets.stop_server(reg_server, reg_path)
