"""Facts about this node's NVIDIA driver, read once at start from the driver root.

Channel major and clique ID come from `cdriver.nvml.discover`; this module adds what only
the plugin needs: the fabric-imex-mgmt capability device, the driver-version floor of the
DNS-names mode, and the device nodes of the base CDI spec.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cdriver import featuregates
from cdriver.cdi.model import DeviceNode
from cdriver.errors import CdriverError
from cdriver.nvml.fabric_manager import has_local_fabric
from cdriver.roles.kubelet_plugin.cdi_edits import CapDevice, host_path
from cdriver.roles.kubelet_plugin.config import PluginConfig

log = logging.getLogger(__name__)

#: IMEX daemons with DNS names need this driver version or newer.
MIN_DRIVER_VERSION_DNS_NAMES = "570.158.01"
#: Device nodes (below <dev root>/dev) that make up the base spec's ``all`` device, as (sub
#: directory, name prefix). IMEX channels are left out: the daemon does not use them, and
#: workloads get theirs through their own claim specs.
BASE_DEVICE_DIRS = (("", "nvidia"), ("nvidia-caps", "nvidia-cap"))
BASE_EXCLUDED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")


class DiscoveryError(CdriverError):
    """The driver root does not provide what the plugin needs."""


@dataclass(frozen=True)
class NodeDiscovery:
    """Driver facts for this node."""

    channel_major: int
    clique_id: str  # "" when no GPU is attached to a multi-node NVLink fabric
    driver_version: str = ""


def check_driver_version(version: str, minimum: str = MIN_DRIVER_VERSION_DNS_NAMES) -> None:
    """Raise DiscoveryError if ``version`` is older than ``minimum`` (or unparsable)."""
    from cdriver.nvml.discover import version_tuple

    try:
        too_old = version_tuple(version) < version_tuple(minimum)
    except ValueError:
        too_old = True
    if too_old:
        raise DiscoveryError(
            f"NVIDIA driver version {version or '(unknown)'} is older than {minimum}, which "
            f"{featuregates.IMEX_DAEMONS_WITH_DNS_NAMES} needs: upgrade the driver, or set "
            f"--feature-gates {featuregates.IMEX_DAEMONS_WITH_DNS_NAMES}=false,"
            f"{featuregates.COMPUTE_DOMAIN_CLIQUES}=false"
        )


def restrictive_mode(declared: int, on_disk: int | None) -> int:
    """One file mode for a device node: the permission bits both the driver's capability
    file and the node on disk grant (the node's own mode when it is stricter)."""
    mode = declared & 0o7777
    return mode if on_disk is None else mode & on_disk & 0o7777


def fabric_mgmt_device(read_root: Path) -> CapDevice:
    """The fabric-imex-mgmt capability device (for daemon claims on fabric nodes).

    Its mode is the one the base CDI spec gives the same node, or stricter: a claim spec
    never widens access to a device that the node's base spec already describes.
    """
    from cdriver.nvml import discover as nvml

    try:
        cap = nvml.fabric_mgmt_capability(read_root)
    except CdriverError as exc:
        raise DiscoveryError(str(exc)) from None
    device = CapDevice(major=cap.major, minor=cap.minor, mode=cap.mode)
    try:
        on_disk: int | None = stat.S_IMODE(os.stat(dev_dir(read_root) / device.path.removeprefix("/dev/")).st_mode)
    except OSError:
        on_disk = None
    return CapDevice(major=cap.major, minor=cap.minor, mode=restrictive_mode(cap.mode, on_disk))


def check_fabric_mgmt(config: PluginConfig, clique_id: str) -> None:
    """A fabric node's IMEX daemons need the fabric-imex-mgmt capability: refuse to start
    without it (otherwise every daemon claim fails later, far from the cause)."""
    try:
        fabric_mgmt_device(config.read_root)
    except DiscoveryError as exc:
        raise DiscoveryError(
            f"node {config.node_name} is on an NVLink fabric (clique ID {clique_id}), but the driver root "
            f"{config.driver_root} does not provide the fabric-imex-mgmt capability ({exc}); IMEX daemons "
            "cannot start on this node. Set --nvidia-driver-root (NVIDIA_DRIVER_ROOT; the chart's "
            "nvidiaDriverRoot) to the NVIDIA driver installation with IMEX support, or load that driver"
        ) from None


def dev_dir(read_root: Path) -> Path:
    """The device directory of the driver root: ``<read_root>/dev`` when it exists, else /dev."""
    return (read_root if (read_root / "dev").is_dir() else Path("/")) / "dev"


def base_device_nodes(read_root: Path, dev_root: Path) -> list[DeviceNode]:
    """The NVIDIA character devices below ``<read_root>/dev`` (or /dev) except IMEX channels."""
    dev = dev_dir(read_root)
    nodes = []
    for sub, prefix in BASE_DEVICE_DIRS:
        directory = dev / sub if sub else dev
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(prefix) or entry.name.startswith(BASE_EXCLUDED_PREFIXES):
                continue
            try:
                st = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            if not stat.S_ISCHR(st.st_mode):
                continue
            path = "/dev/" + (f"{sub}/{entry.name}" if sub else entry.name)
            nodes.append(
                DeviceNode(
                    path=path,
                    host_path=host_path(dev_root, path),
                    type="c",
                    major=os.major(st.st_rdev),
                    minor=os.minor(st.st_rdev),
                    file_mode=stat.S_IMODE(st.st_mode),
                )
            )
    return nodes


def read_clique_id(config: PluginConfig, strict: bool | None = None) -> str:
    """This node's clique ID as NVML reports it now ("" without a multi-node fabric)."""
    from cdriver.nvml import discover as nvml

    root = config.read_root
    if strict is None:
        strict = config.gates.enabled(featuregates.CRASH_ON_NVLINK_FABRIC_ERRORS)
    tolerate = config.gates.enabled(featuregates.FABRIC_MANAGER_PARTITIONING) and has_local_fabric(root)
    return nvml.clique_id(str(root), strict=strict, tolerate_pending=tolerate)


def discover(config: PluginConfig) -> NodeDiscovery:
    """Read channel major, clique ID and driver version; apply the version floor."""
    from cdriver.nvml import discover as nvml

    root = config.read_root
    major = nvml.channel_major(str(root))
    clique_id = read_clique_id(config)
    if clique_id and not config.host_managed:
        check_fabric_mgmt(config, clique_id)
    version = ""
    if config.gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES) and not config.host_managed:
        version = nvml.driver_version(str(root))
        check_driver_version(version)
    log.info(
        "node %s: IMEX channel major %d, clique ID %r%s",
        config.node_name,
        major,
        clique_id,
        f", driver {version}" if version else "",
    )
    return NodeDiscovery(channel_major=major, clique_id=clique_id, driver_version=version)
