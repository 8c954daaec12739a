"""GPU profiles of simulated nodes: how many GPUs, their names, UUIDs, PCI ids and fabric defaults.

Values follow the GB200 / GB300 compute-tray profiles of NVIDIA's NVML mock (8 GPUs each).
"""

from __future__ import annotations

from dataclasses import dataclass

from cdriver.errors import CdriverError

# NVML GPU fabric constants (nvml.h).
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_NOT_STARTED = 1
FABRIC_STATE_IN_PROGRESS = 2
FABRIC_STATE_COMPLETED = 3
FABRIC_STATE_NAMES = {
    FABRIC_STATE_NOT_SUPPORTED: "not_supported",
    FABRIC_STATE_NOT_STARTED: "not_started",
    FABRIC_STATE_IN_PROGRESS: "in_progress",
    FABRIC_STATE_COMPLETED: "completed",
}

HEALTH_SUMMARY_NOT_SUPPORTED = 0
HEALTH_SUMMARY_HEALTHY = 1
HEALTH_SUMMARY_UNHEALTHY = 2
HEALTH_SUMMARY_LIMITED_CAPACITY = 3

# Health mask slots (shift): tri-state values 0 not supported, 1 TRUE, 2 FALSE.
_TRUE, _FALSE = 1, 2
_SHIFT_DEGRADED_BW, _SHIFT_ROUTE_RECOVERY, _SHIFT_ROUTE_UNHEALTHY, _SHIFT_ACCESS_TIMEOUT = 0, 2, 4, 6
_SHIFT_INCORRECT_CONFIGURATION = 8
_INCORRECT_CONFIGURATION_NONE = 1


def health_mask(degraded_bandwidth: bool = False, route_recovery: bool = False, route_unhealthy: bool = False,
                access_timeout_recovery: bool = False, incorrect_configuration: int = _INCORRECT_CONFIGURATION_NONE
                ) -> int:
    """The NVML fabric health mask for a set of conditions (all healthy = 0x1AA)."""
    def tri(flag: bool) -> int:
        return _TRUE if flag else _FALSE

    return (tri(degraded_bandwidth) << _SHIFT_DEGRADED_BW
            | tri(route_recovery) << _SHIFT_ROUTE_RECOVERY
            | tri(route_unhealthy) << _SHIFT_ROUTE_UNHEALTHY
            | tri(access_timeout_recovery) << _SHIFT_ACCESS_TIMEOUT
            | (incorrect_configuration & 0xF) << _SHIFT_INCORRECT_CONFIGURATION)


def health_summary(mask: int) -> int:
    """The health summary NVML derives from a mask (0 not supported, 1 healthy, 2 unhealthy, 3 limited)."""
    if mask == 0:
        return HEALTH_SUMMARY_NOT_SUPPORTED

    def slot(shift: int, width: int = 0x3) -> int:
        return (mask >> shift) & width

    if (_TRUE in (slot(_SHIFT_ROUTE_RECOVERY), slot(_SHIFT_ROUTE_UNHEALTHY), slot(_SHIFT_ACCESS_TIMEOUT))
            or slot(_SHIFT_INCORRECT_CONFIGURATION, 0xF) > _INCORRECT_CONFIGURATION_NONE):
        return HEALTH_SUMMARY_UNHEALTHY
    if slot(_SHIFT_DEGRADED_BW) == _TRUE:
        return HEALTH_SUMMARY_LIMITED_CAPACITY
    return HEALTH_SUMMARY_HEALTHY


HEALTHY_MASK = health_mask()  # 0x1AA
#: Named health conditions a simulated node can report (for failure tests).
HEALTH_CONDITIONS: dict[str, int] = {
    "healthy": HEALTHY_MASK,
    "degraded_bandwidth": health_mask(degraded_bandwidth=True),  # limited capacity
    "route_unhealthy": health_mask(route_unhealthy=True),  # unhealthy
    "no_partition": health_mask(incorrect_configuration=4),  # unhealthy
}


class ProfileError(CdriverError):
    """Unknown profile or unusable profile parameters."""


@dataclass(frozen=True)
class Profile:
    """What a simulated node's GPUs look like."""

    name: str
    gpu_name: str
    gpu_count: int
    uuid_prefix: str  # GPU UUID = f"{uuid_prefix}{index:012x}"
    driver_version: str
    cuda_version: int  # NVML encoding: 1000 * major + 10 * minor
    pci_bus_ids: tuple[str, ...]
    pci_device_id: int  # (device id << 16) | vendor id
    pci_subsystem_id: int
    default_cluster_uuid: str = "00000000-0000-0000-0000-000000000001"
    default_clique_id: int = 0

    @property
    def nvml_version(self) -> str:
        """NVML version string as the real library reports it: `<CUDA major>.<driver version>`."""
        return f"{self.cuda_version // 1000}.{self.driver_version}"

    def gpu_uuid(self, index: int) -> str:
        """UUID of GPU `index`."""
        return f"{self.uuid_prefix}{index:012x}"

    def pci_bus_id(self, index: int) -> str:
        """PCI bus ID of GPU `index` (dddd:bb:dd.f); beyond the profile's list, consecutive buses."""
        if index < len(self.pci_bus_ids):
            return self.pci_bus_ids[index]
        return f"0000:{0x10 + index:02X}:00.0"


_TRAY_BUS_IDS = ("0000:0A:00.0", "0000:0B:00.0", "0000:4A:00.0", "0000:4B:00.0",
                 "0000:8A:00.0", "0000:8B:00.0", "0000:CA:00.0", "0000:CB:00.0")
_NVIDIA_VENDOR = 0x10DE

PROFILES: dict[str, Profile] = {
    "gb200": Profile(
        name="gb200",
        gpu_name="NVIDIA GB200",
        gpu_count=8,
        uuid_prefix="GPU-b200b200-0000-0000-0000-",
        driver_version="580.65.06",
        cuda_version=13000,
        pci_bus_ids=_TRAY_BUS_IDS,
        pci_device_id=(0x2941 << 16) | _NVIDIA_VENDOR,
        pci_subsystem_id=(0x2046 << 16) | _NVIDIA_VENDOR,
    ),
    "gb300": Profile(
        name="gb300",
        gpu_name="NVIDIA GB300 NVL",
        gpu_count=8,
        uuid_prefix="GPU-b300b300-0000-0000-0000-",
        driver_version="570.124.06",
        cuda_version=12080,
        pci_bus_ids=_TRAY_BUS_IDS,
        pci_device_id=(0x31C2 << 16) | _NVIDIA_VENDOR,
        pci_subsystem_id=(0x21CA << 16) | _NVIDIA_VENDOR,
    ),
}

MAX_GPUS = 64  # what the simulated NVML library holds


def get_profile(name: str) -> Profile:
    """The profile called `name` (case-insensitive); raises ProfileError listing the known ones."""
    profile = PROFILES.get(name.strip().lower())
    if profile is None:
        raise ProfileError(f"unknown GPU profile {name!r}; choose one of {', '.join(sorted(PROFILES))}")
    return profile
