"""Whether this node's NVLink fabric is managed locally by Fabric Manager (a single-node
NVLink system: NVSwitch devices, or NVLink5 switch trays managed from this host)."""

from __future__ import annotations

from pathlib import Path

#: Marker in an InfiniBand device's VPD of an NVLink5 switch managed from this host.
NVLINK5_SWITCH_MANAGED_MARKER = b"SW_MNG"


def has_nvswitch_devices(root: Path) -> bool:
    """NVSwitch devices are listed under ``<root>/proc/driver/nvidia-nvswitch/devices``."""
    try:
        return any((root / "proc/driver/nvidia-nvswitch/devices").iterdir())
    except OSError:
        return False


def has_managed_nvlink5_switch(root: Path) -> bool:
    """Some InfiniBand device's VPD under ``<root>/sys/class/infiniband`` carries the marker."""
    for vpd in root.glob("sys/class/infiniband/*/device/vpd"):
        try:
            if NVLINK5_SWITCH_MANAGED_MARKER in vpd.read_bytes():
                return True
        except OSError:
            continue
    return False


def has_local_fabric(root: str | Path) -> bool:
    """True on a single-node NVLink system whose fabric Fabric Manager partitions."""
    root = Path(root)
    return has_nvswitch_devices(root) or has_managed_nvlink5_switch(root)
