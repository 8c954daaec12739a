"""CDI content for prepared claims and the node's base spec (pure builders).

Device nodes are described with explicit type/major/minor/mode so the runtime needs no
lookup; ``host_path`` points into the driver root when it is not ``/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cdriver.api import constants
from cdriver.cdi.model import ContainerEdits, Device, DeviceNode, Mount, Spec, qualified_name
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_DIR
from cdriver.nvml.discover import channel_device_path

CDI_BASE_SPEC_ID = "base"  # transient id of the node's base spec (device "all")
BASE_DEVICE_NAME = "all"
BASE_SPEC_NAME = f"{constants.CDI_VENDOR}-{constants.CDI_CLASS_DEVICE}_{CDI_BASE_SPEC_ID}"
IMEXD_MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
CHANNEL_FILE_MODE = 0o666


@dataclass(frozen=True)
class CapDevice:
    """A /dev/nvidia-caps/nvidia-cap<minor> node described by a /proc capability file."""

    major: int
    minor: int
    mode: int

    @property
    def path(self) -> str:
        return f"/dev/nvidia-caps/nvidia-cap{self.minor}"


def host_path(dev_root: Path, container_path: str) -> str | None:
    """Host path of a device node when the dev root is not ``/`` (else None: same path)."""
    if str(dev_root) in ("", "/"):
        return None
    return str(Path(dev_root) / container_path.lstrip("/"))


def channel_node(channel: int, major: int, dev_root: Path) -> DeviceNode:
    path = channel_device_path(channel)
    return DeviceNode(
        path=path,
        host_path=host_path(dev_root, path),
        type="c",
        major=major,
        minor=channel,
        file_mode=CHANNEL_FILE_MODE,
    )


def channel_edits(channels: list[int], major: int, dev_root: Path) -> ContainerEdits:
    """Device nodes for the given IMEX channels (minor = channel number)."""
    return ContainerEdits(device_nodes=[channel_node(c, major, dev_root) for c in channels])


def daemon_edits(
    clique_id: str,
    cd_uid: str,
    cd_name: str,
    cd_namespace: str,
    domain_dir: Path,
    fabric_mgmt: CapDevice | None,
    dev_root: Path,
    imex_binaries: list[Mount] | None = None,
) -> ContainerEdits:
    """Identity env, the /imexd bind mount, the driver's IMEX binaries and (on a fabric node)
    the fabric management node."""
    nodes = []
    if fabric_mgmt is not None:
        nodes.append(
            DeviceNode(
                path=fabric_mgmt.path,
                host_path=host_path(dev_root, fabric_mgmt.path),
                type="c",
                major=fabric_mgmt.major,
                minor=fabric_mgmt.minor,
                file_mode=fabric_mgmt.mode,
            )
        )
    return ContainerEdits(
        env=[
            f"{constants.ENV_CLIQUE_ID}={clique_id}",
            f"{constants.ENV_CD_UUID}={cd_uid}",
            f"{constants.ENV_CD_NAME}={cd_name}",
            f"{constants.ENV_CD_NAMESPACE}={cd_namespace}",
        ],
        device_nodes=nodes,
        mounts=[Mount(host_path=str(domain_dir), container_path=IMEXD_DIR, options=list(IMEXD_MOUNT_OPTIONS)),
                *(imex_binaries or [])],
    )


IMEX_BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "opt/bin")
BINARY_MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]


def imex_binary_mounts(read_root: Path, driver_root: Path) -> list[Mount]:
    """Mounts of the driver's `nvidia-imex` and `nvidia-imex-ctl` into the daemon container.

    The daemon container runs them from PATH, like the driver binaries the NVIDIA container
    toolkit injects: each is mounted at its path relative to the driver root (e.g.
    /usr/bin/nvidia-imex), from where it lies on the host.
    """
    mounts = []
    for name in (IMEX_DAEMON_BINARY, IMEX_CTL_BINARY):
        for sub in IMEX_BINARY_DIRS:
            if (read_root / sub / name).is_file():
                rel = f"{sub}/{name}"
                mounts.append(Mount(host_path=str(Path(driver_root) / rel), container_path=f"/{rel}",
                                    options=list(BINARY_MOUNT_OPTIONS)))
                break
    return mounts


def claim_device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def claim_device_id(claim_uid: str, device: str) -> str:
    """``k8s.compute-domain.nvidia.com/claim=<uid>-<device>``."""
    return qualified_name(constants.CDI_KIND_CLAIM, claim_device_name(claim_uid, device))


def base_device_id() -> str:
    """``k8s.compute-domain.nvidia.com/device=all`` (the node's base spec)."""
    return qualified_name(constants.CDI_KIND_DEVICE, BASE_DEVICE_NAME)


def claim_spec(claim_uid: str, devices: list[tuple[str, ContainerEdits]]) -> Spec | None:
    """The claim's transient spec: one device per (device name, edits) with edits; None if none."""
    entries = [
        Device(name=claim_device_name(claim_uid, name), edits=edits)
        for name, edits in sorted(devices, key=lambda d: d[0])
        if not edits.is_empty()
    ]
    if not entries:
        return None
    return Spec(kind=constants.CDI_KIND_CLAIM, devices=entries)


def base_spec(nodes: list[DeviceNode]) -> Spec:
    """The node-wide spec daemon claims refer to: every NVIDIA device node of the driver root."""
    return Spec(
        kind=constants.CDI_KIND_DEVICE,
        devices=[Device(name=BASE_DEVICE_NAME, edits=ContainerEdits(device_nodes=list(nodes)))],
        edits=ContainerEdits(env=[VISIBLE_DEVICES_VOID]),
    )
