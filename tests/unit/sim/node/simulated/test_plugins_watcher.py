"""Plugin registration on simulated nodes follows kubelet's plugin manager: GetInfo deadline,
de-registration when NotifyRegistrationStatus fails, re-registration of a replaced socket."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cdriver.dra import registration, sockets
from cdriver.dra.gen.pluginregistration.v1 import api_pb2
from cdriver.sim.node.simulated import plugins
from cdriver.sim.node.simulated.layout import NodeLayout


class SlowInfo(registration.RegistrationServicer):
    """Answers GetInfo after `delay` seconds (a busy plugin)."""

    delay = 2.0

    def GetInfo(self, request: api_pb2.InfoRequest, context: grpc.ServicerContext) -> api_pb2.PluginInfo:
        time.sleep(self.delay)
        return super().GetInfo(request, context)


class RefusesNotify(registration.RegistrationServicer):
    """Fails every NotifyRegistrationStatus."""

    def NotifyRegistrationStatus(self, request: api_pb2.RegistrationStatus,
                                 context: grpc.ServicerContext) -> api_pb2.RegistrationStatusResponse:
        context.abort(grpc.StatusCode.UNAVAILABLE, "shutting down")
        raise AssertionError("unreachable")


class InfoOnce(registration.RegistrationServicer):
    """Answers GetInfo once, then fails it (a plugin that expects no further probes)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.calls = 0
        self.calls_lock = threading.Lock()

    def GetInfo(self, request: api_pb2.InfoRequest, context: grpc.ServicerContext) -> api_pb2.PluginInfo:
        with self.calls_lock:
            self.calls += 1
            if self.calls > 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "GetInfo answered already")
        return super().GetInfo(request, context)


@pytest.fixture
def layout() -> Iterator[NodeLayout]:
    root = tempfile.mkdtemp(prefix="cdw-")  # Unix socket paths must stay short
    yield NodeLayout.at(root).ensure()
    shutil.rmtree(root, ignore_errors=True)


def serve(layout: NodeLayout, servicer: registration.RegistrationServicer, name: str = "drv-reg.sock",
          sub: str = "") -> tuple[grpc.Server, Path]:
    directory = layout.registry_dir / sub if sub else layout.registry_dir
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    return registration.serve_registration(path, servicer), path


def test_getinfo_has_kubelets_one_second_deadline(layout: NodeLayout) -> None:
    servicer = SlowInfo("slow.example.com", "/var/lib/kubelet/plugins/slow/dra.sock")
    server, path = serve(layout, servicer)
    manager = plugins.PluginManager(layout)
    try:
        manager.scan()
        assert manager.drivers() == []
        assert "GetInfo failed" in manager.rejected()[path] and "Deadline" in manager.rejected()[path]
    finally:
        sockets.stop_server(server, path, grace=0)
        manager.stop()


def test_failed_registration_confirmation_deregisters_the_plugin(layout: NodeLayout) -> None:
    server, path = serve(layout, RefusesNotify("refuses.example.com", "/var/lib/kubelet/plugins/r/dra.sock"))
    unregistered: list[str] = []
    manager = plugins.PluginManager(layout, on_unregistered=unregistered.append)
    try:
        manager.scan()
        assert manager.drivers() == []
        assert manager.client("refuses.example.com") is None
        assert "NotifyRegistrationStatus failed" in manager.rejected()[path]
    finally:
        sockets.stop_server(server, path)
        manager.stop()


def test_socket_replaced_at_the_same_path_is_registered_again(layout: NodeLayout) -> None:
    first = registration.RegistrationServicer("gpu.example.com", "/var/lib/kubelet/plugins/old/dra.sock")
    server, path = serve(layout, first)
    manager = plugins.PluginManager(layout)
    try:
        manager.scan()
        assert [p.endpoint for p in manager.plugins()] == [layout.host_path("/var/lib/kubelet/plugins/old/dra.sock")]
        sockets.stop_server(server, path)
        second = registration.RegistrationServicer("gpu.example.com", "/var/lib/kubelet/plugins/new/dra.sock")
        server, path = serve(layout, second)  # the restarted plugin, same registration socket path
        manager.scan()
        assert [p.endpoint for p in manager.plugins()] == [layout.host_path("/var/lib/kubelet/plugins/new/dra.sock")]
        assert second.state.registered
    finally:
        sockets.stop_server(server, path)
        manager.stop()


def test_registered_plugin_is_not_dropped_by_further_scans(layout: NodeLayout) -> None:
    servicer = InfoOnce("once.example.com", "/var/lib/kubelet/plugins/once/dra.sock")
    server, path = serve(layout, servicer, sub="nested/deeper")
    manager = plugins.PluginManager(layout)
    try:
        for _ in range(3):
            manager.scan()
        assert manager.drivers() == ["once.example.com"]
        assert servicer.calls == 1
    finally:
        sockets.stop_server(server, path)
        manager.stop()
