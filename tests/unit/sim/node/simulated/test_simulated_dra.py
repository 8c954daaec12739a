"""DRA on simulated nodes: plugin registration, socket discovery, long socket paths, CDI mapping."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from cdriver.cdi.model import ContainerEdits, DeviceNode, Mount
from cdriver.dra import client
from cdriver.dra.node_service import PreparedDevice
from cdriver.sim.node.simulated import plugins
from cdriver.sim.node.simulated.cdi_apply import (
    CDIApplyError,
    bind_mount,
    container_cdi_ids,
    device_spec,
    launch_edits,
)
from cdriver.sim.node.simulated.container import DeviceSpec
from cdriver.sim.node.simulated.layout import NodeLayout


@pytest.mark.parametrize(("versions", "chosen"), [
    (["v1.DRAPlugin", "v1beta1.DRAPlugin"], "v1.DRAPlugin"),
    (["v1beta1.DRAPlugin", "v1.DRAPlugin"], "v1beta1.DRAPlugin"),  # the plugin's order wins
    (["v1alpha4.Node", "v1beta1.DRAPlugin"], "v1beta1.DRAPlugin"),
    (["v1alpha1.DRAResourceHealth"], None),
    ([], None),
])
def test_choose_service_takes_the_plugins_first_supported_entry(versions: list[str], chosen: str | None) -> None:
    assert plugins.choose_service(versions) == chosen


def test_registration_problems_are_explained() -> None:
    assert plugins.registration_problem("DRAPlugin", "gpu.example.com", ["v1.DRAPlugin"]) == ""
    assert "CSIPlugin" in plugins.registration_problem("CSIPlugin", "x", ["v1.DRAPlugin"])
    assert "empty" in plugins.registration_problem("DRAPlugin", "", ["v1.DRAPlugin"])
    assert "v1.DRAPlugin" in plugins.registration_problem("DRAPlugin", "x", ["v9.Other"])


def _socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


def test_registry_sockets_finds_sockets_at_any_depth_like_kubelets_plugin_watcher(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    keep = [_socket(tmp_path / "a-reg.sock"), _socket(tmp_path / "sub" / "b.sock"),
            _socket(tmp_path / ".hidden.sock"), _socket(tmp_path / "sub" / "deeper" / "c.sock")]
    (tmp_path / "plain-file.sock").write_text("not a socket")
    try:
        found = plugins.registry_sockets(tmp_path)
    finally:
        for s in keep:
            s.close()
    assert found == [tmp_path / "a-reg.sock", tmp_path / "sub" / "b.sock", tmp_path / "sub" / "deeper" / "c.sock"]
    assert plugins.registry_sockets(tmp_path / "missing") == []


def test_long_socket_paths_are_dialled_through_the_directory_fd(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    target = client.UnixTarget(deep / "dra.sock")
    try:
        assert target.target.startswith("unix:/proc/self/fd/")
        fd = int(target.target.split("/")[4])
        assert os.readlink(f"/proc/self/fd/{fd}") == str(deep)
    finally:
        target.close()
    assert client.UnixTarget(Path("/short/dra.sock")).target == "unix:/short/dra.sock"


def test_container_gets_cdi_ids_of_its_referenced_claims_and_requests() -> None:
    prepared = {
        "gpu": [PreparedDevice(["a"], "pool", "d0", ["v/c=0"]), PreparedDevice(["b"], "pool", "d1", ["v/c=1"]),
                PreparedDevice([], "pool", "d2", ["v/c=all"])],
        "other": [PreparedDevice([], "pool", "x", ["v/c=x"])],
    }
    assert container_cdi_ids({"resources": {"claims": [{"name": "gpu"}]}}, prepared) == ["v/c=0", "v/c=1", "v/c=all"]
    assert container_cdi_ids({"resources": {"claims": [{"name": "gpu", "request": "b"}]}}, prepared) == [
        "v/c=1", "v/c=all"]
    assert container_cdi_ids({"name": "no-claims"}, prepared) == []


def test_launch_edits_map_host_paths_through_the_node_root(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path / "n").ensure()
    chan = lay.host_path("/run/nvidia/driver/dev/chan0")
    chan.parent.mkdir(parents=True)
    chan.write_text("")
    edits = ContainerEdits(
        env=["A=1", "B=x=y"],
        device_nodes=[DeviceNode(path="/dev/chan0", host_path="/run/nvidia/driver/dev/chan0", major=240, minor=0,
                                 file_mode=0o666),
                      DeviceNode(path="/dev/other", major=1, minor=3)],
        mounts=[Mount(host_path="/var/lib/kubelet/plugins/x", container_path="/imexd", options=["ro", "bind"])])
    env, devices, mounts = launch_edits(edits, lay)
    assert env == {"A": "1", "B": "x=y"}
    assert devices[0] == DeviceSpec("/dev/chan0", "c", 240, 0, 0o666)
    assert devices[1] == DeviceSpec("/dev/other", "c", 1, 3, 0o666)
    assert mounts[0].source == str(lay.plugins_dir / "x") and mounts[0].read_only
    with pytest.raises(CDIApplyError, match="tmpfs"):
        launch_edits(ContainerEdits(mounts=[Mount("/x", "/y", type="tmpfs")]), lay)


def test_device_nodes_come_from_the_spec_not_from_the_host_device(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path / "n").ensure()
    host = lay.host_path("/dev/nvidia-caps-imex-channels/channel0")
    host.parent.mkdir(parents=True)
    os.mknod(host, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    spec = DeviceNode(path="/dev/nvidia-caps-imex-channels/channel0", type="c", major=234, minor=0,
                      file_mode=0o666, uid=1000, gid=2000)
    assert device_spec(spec, lay) == DeviceSpec(spec.path, "c", 234, 0, 0o666, 1000, 2000)
    # what the spec leaves out comes from the host device, as CDI runtimes fill it in
    assert device_spec(DeviceNode(path=spec.path, type=None), lay) == DeviceSpec(spec.path, "c", 1, 3, 0o644)
    with pytest.raises(CDIApplyError, match="spec says type 'b'"):
        device_spec(DeviceNode(path=spec.path, type="b"), lay)
    with pytest.raises(CDIApplyError, match="gives no type/major/minor"):
        device_spec(DeviceNode(path="/dev/absent", type="c"), lay)


def test_cdi_mounts_honour_their_options(tmp_path: Path) -> None:
    lay = NodeLayout.at(tmp_path / "n").ensure()
    mount = bind_mount(Mount("/opt/lib", "/usr/lib/x", options=["ro", "nosuid", "nodev", "bind", "rprivate"]), lay)
    assert (mount.read_only, mount.recursive, mount.options) == (True, False, ("nosuid", "nodev", "rprivate"))
    assert bind_mount(Mount("/opt/lib", "/y", options=["rbind", "ro", "rw"]), lay).read_only is False
    assert bind_mount(Mount("/opt/lib", "/y"), lay).recursive
    with pytest.raises(CDIApplyError, match=r"options \['idmap'\]"):
        bind_mount(Mount("/opt/lib", "/y", options=["idmap"]), lay)
