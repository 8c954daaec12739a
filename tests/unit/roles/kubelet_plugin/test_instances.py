"""Per-pod socket names of plugin instances, and which sockets are whose."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cdriver.roles.kubelet_plugin import instances
from cdriver.roles.kubelet_plugin.config import PluginConfig

UID = "3f2a9c1e-7b44-4c1d-9e0f-2a6b8c4d5e6f"


def test_socket_names_carry_the_pod_uid_and_are_the_classic_ones_without() -> None:
    cfg = PluginConfig(node_name="n", registrar_dir=Path("/reg"), plugins_dir=Path("/plugins"))
    assert (cfg.dra_socket, cfg.registration_socket) == (
        Path("/plugins/compute-domain.nvidia.com/dra.sock"), Path("/reg/compute-domain.nvidia.com-reg.sock"))
    cfg = PluginConfig(node_name="n", registrar_dir=Path("/reg"), plugins_dir=Path("/plugins"), pod_uid=UID)
    assert (cfg.dra_socket, cfg.registration_socket) == (Path(f"/plugins/compute-domain.nvidia.com/dra-{UID}.sock"),
                                                          Path(f"/reg/compute-domain.nvidia.com-{UID}-reg.sock"))


@pytest.mark.parametrize(("name", "uid"), [
    ("compute-domain.nvidia.com-reg.sock", ""),
    (f"compute-domain.nvidia.com-{UID}-reg.sock", UID),
    ("gpu.nvidia.com-reg.sock", None),
    (f"gpu.nvidia.com-{UID}-reg.sock", None),
    ("compute-domain.nvidia.com-../x-reg.sock", None),
    ("compute-domain.nvidia.com.sock", None),
])
def test_registration_socket_names_are_told_apart(name: str, uid: str | None) -> None:
    assert instances.instance_of_registration(name) == uid


@pytest.mark.parametrize(("name", "uid"), [
    ("dra.sock", ""), (f"dra-{UID}.sock", UID), ("dra-.sock", None), ("dra-A B.sock", None), ("other.sock", None),
])
def test_dra_socket_names_are_told_apart(name: str, uid: str | None) -> None:
    assert instances.instance_of_dra(name) == uid


@pytest.mark.parametrize("uid", ["UPPER", "a/b", "-lead", "x" * 65, "a b"])
def test_a_pod_uid_that_cannot_name_a_socket_is_refused(uid: str) -> None:
    with pytest.raises(instances.InstanceError, match="metadata.uid"):
        instances.check_pod_uid(uid)


def serving(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen(1)
    return sock


def dead(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


def test_only_other_instances_dead_sockets_are_removed(tmp_path: Path) -> None:
    reg, plugin = tmp_path / "reg", tmp_path / "plugin"
    reg.mkdir()
    plugin.mkdir()
    live = serving(reg / "compute-domain.nvidia.com-live-reg.sock")
    try:
        gone = [dead(reg / "compute-domain.nvidia.com-gone-reg.sock"), dead(plugin / "dra-gone.sock"),
                dead(reg / "compute-domain.nvidia.com-reg.sock")]
        kept = [dead(reg / "other.example.com-gone-reg.sock"), dead(plugin / "dra-mine.sock"),
                dead(reg / "compute-domain.nvidia.com-mine-reg.sock")]
        removed = instances.remove_dead_instances(reg, plugin, "mine")
        assert sorted(removed) == sorted(gone)
        assert all(p.exists() for p in kept) and (reg / "compute-domain.nvidia.com-live-reg.sock").exists()
        assert instances.other_live_instances(reg, "mine") == [reg / "compute-domain.nvidia.com-live-reg.sock"]
        assert instances.other_live_instances(reg, "live") == []
    finally:
        live.close()
