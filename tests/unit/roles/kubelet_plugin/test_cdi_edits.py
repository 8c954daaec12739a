"""CDI content of prepared claims and of the node's base spec."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cdriver.api import constants
from cdriver.cdi.reader import CDIRegistry
from cdriver.cdi.writer import claim_spec_name, write_spec
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY
from cdriver.nvml.discover import FABRIC_MGMT_CAP_PATH
from cdriver.roles.kubelet_plugin import cdi_edits
from cdriver.roles.kubelet_plugin.discovery import base_device_nodes, fabric_mgmt_device, restrictive_mode

UID = "4f3c1a2b-0000-1111-2222-333344445555"


def test_single_channel_spec_and_id(tmp_path: Path):
    edits = cdi_edits.channel_edits([0], 240, Path("/drv"))
    spec = cdi_edits.claim_spec(UID, [("channel-0", edits)])
    assert spec.to_dict() == {
        "cdiVersion": "0.5.0", "kind": constants.CDI_KIND_CLAIM,
        "devices": [{"name": f"{UID}-channel-0", "containerEdits": {"deviceNodes": [{
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "hostPath": "/drv/dev/nvidia-caps-imex-channels/channel0",
            "type": "c", "major": 240, "minor": 0, "fileMode": 0o666}]}}],
    }
    cdi_id = cdi_edits.claim_device_id(UID, "channel-0")
    assert cdi_id == f"k8s.compute-domain.nvidia.com/claim={UID}-channel-0"
    write_spec(tmp_path, claim_spec_name(UID), spec)
    resolved = CDIRegistry([str(tmp_path)]).resolve([cdi_id])
    assert [(n.path, n.major, n.minor) for n in resolved.device_nodes] == [
        ("/dev/nvidia-caps-imex-channels/channel0", 240, 0)]


def test_host_path_only_when_driver_root_is_not_slash():
    assert cdi_edits.channel_node(3, 240, Path("/")).host_path is None
    assert cdi_edits.channel_node(3, 240, Path("/r")).host_path == "/r/dev/nvidia-caps-imex-channels/channel3"


def test_no_edits_means_no_spec():
    from cdriver.cdi.model import ContainerEdits

    assert cdi_edits.claim_spec(UID, [("channel-0", ContainerEdits())]) is None


def test_daemon_edits_carry_identity_mount_and_fabric_device():
    edits = cdi_edits.daemon_edits("uuid.3", "cd-uid", "dom", "team", Path("/k/domains/cd-uid"),
                                   cdi_edits.CapDevice(241, 512, 0o400), Path("/"))
    assert edits.env == ["CLIQUE_ID=uuid.3", "COMPUTE_DOMAIN_UUID=cd-uid", "COMPUTE_DOMAIN_NAME=dom",
                         "COMPUTE_DOMAIN_NAMESPACE=team"]
    assert [(m.host_path, m.container_path, m.options) for m in edits.mounts] == [
        ("/k/domains/cd-uid", "/imexd", ["rw", "nosuid", "nodev", "bind"])]
    assert [(n.path, n.major, n.minor, n.file_mode) for n in edits.device_nodes] == [
        ("/dev/nvidia-caps/nvidia-cap512", 241, 512, 0o400)]
    no_fabric = cdi_edits.daemon_edits("", "cd-uid", "dom", "team", Path("/d"), None, Path("/"))
    assert no_fabric.device_nodes == [] and no_fabric.env[0] == "CLIQUE_ID="


def _mknod(path: Path, major: int, minor: int, mode: int = 0o666) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))


def test_base_spec_lists_nvidia_char_devices_but_no_channels(tmp_path: Path):
    dev = tmp_path / "dev"
    _mknod(dev / "nvidiactl", 195, 255)
    _mknod(dev / "nvidia-nvswitch0", 196, 0)  # excluded family
    _mknod(dev / "nvidia-caps" / "nvidia-cap512", 241, 512, 0o400)
    for i in range(3):
        _mknod(dev / "nvidia-caps-imex-channels" / f"channel{i}", 240, i)
    (dev / "nvidia-notadevice").write_text("")
    nodes = base_device_nodes(tmp_path, tmp_path)
    assert [(n.path, n.major, n.minor) for n in nodes] == [
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-caps/nvidia-cap512", 241, 512),
    ]
    assert nodes[0].host_path == str(tmp_path / "dev" / "nvidiactl")
    spec = cdi_edits.base_spec(nodes)
    assert spec.to_dict()["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert cdi_edits.BASE_SPEC_NAME == "k8s.compute-domain.nvidia.com-device_base"


def test_daemon_claims_mount_the_drivers_imex_binaries(tmp_path) -> None:
    """nvidia-imex and nvidia-imex-ctl come from the driver root, at their usual container paths."""
    from pathlib import Path

    from cdriver.roles.kubelet_plugin.cdi_edits import imex_binary_mounts

    read_root = tmp_path / "driver"
    (read_root / "usr" / "bin").mkdir(parents=True)
    (read_root / "usr" / "bin" / IMEX_DAEMON_BINARY).write_text("#!/bin/sh\n")
    (read_root / "bin").mkdir()
    (read_root / "bin" / IMEX_CTL_BINARY).write_text("#!/bin/sh\n")
    mounts = imex_binary_mounts(read_root, Path("/run/nvidia/driver"))
    assert [(m.host_path, m.container_path) for m in mounts] == [
        ("/run/nvidia/driver/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex"),
        ("/run/nvidia/driver/bin/nvidia-imex-ctl", "/bin/nvidia-imex-ctl"),
    ]
    assert all("ro" in m.options for m in mounts)
    assert imex_binary_mounts(tmp_path / "empty", Path("/")) == []


def test_daemon_claim_gives_the_capability_device_the_base_specs_mode(tmp_path: Path):
    """The driver declares the fabric-imex-mgmt node 0666, the node on disk is 0400: both CDI
    specs that describe it say 0400, so a daemon claim never widens access to it."""
    caps_major = 245
    (tmp_path / "proc/driver/nvidia/capabilities").mkdir(parents=True)
    (tmp_path / "proc/devices").write_text(f"Character devices:\n{caps_major} nvidia-caps\n\nBlock devices:\n")
    (tmp_path / FABRIC_MGMT_CAP_PATH.lstrip("/")).write_text(
        "DeviceFileMinor: 512\nDeviceFileMode: 438\nDeviceFileModify: 0\n")
    (tmp_path / "dev/nvidia-caps").mkdir(parents=True)
    os.mknod(tmp_path / "dev/nvidia-caps/nvidia-cap512", 0o400 | stat.S_IFCHR, os.makedev(caps_major, 512))
    os.chmod(tmp_path / "dev/nvidia-caps/nvidia-cap512", 0o400)
    cap = fabric_mgmt_device(tmp_path)
    base_modes = {n.path: n.file_mode for n in base_device_nodes(tmp_path, tmp_path)}
    assert cap.mode == base_modes[cap.path] == 0o400
    edits = cdi_edits.daemon_edits("uuid.1", "cd", "n", "ns", tmp_path / "d", cap, tmp_path)
    assert [n.file_mode for n in edits.device_nodes] == [0o400]


def test_restrictive_mode_keeps_only_bits_both_grant():
    assert restrictive_mode(0o666, 0o400) == 0o400
    assert restrictive_mode(0o440, 0o604) == 0o400
    assert restrictive_mode(0o100666, None) == 0o666
