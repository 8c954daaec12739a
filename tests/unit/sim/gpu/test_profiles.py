"""GPU profiles and the fabric health mask/summary rules."""

from __future__ import annotations

import pytest

from cdriver.sim.gpu.profiles import (
    HEALTH_CONDITIONS,
    HEALTH_SUMMARY_HEALTHY,
    HEALTH_SUMMARY_LIMITED_CAPACITY,
    HEALTH_SUMMARY_NOT_SUPPORTED,
    HEALTH_SUMMARY_UNHEALTHY,
    ProfileError,
    get_profile,
    health_mask,
    health_summary,
)


def test_gb200_profile() -> None:
    p = get_profile("gb200")
    assert (p.gpu_name, p.gpu_count, p.driver_version, p.cuda_version) == ("NVIDIA GB200", 8, "580.65.06", 13000)
    assert [p.gpu_uuid(i) for i in (0, 7)] == ["GPU-b200b200-0000-0000-0000-000000000000",
                                               "GPU-b200b200-0000-0000-0000-000000000007"]
    assert [p.pci_bus_id(i) for i in range(8)] == ["0000:0A:00.0", "0000:0B:00.0", "0000:4A:00.0", "0000:4B:00.0",
                                                   "0000:8A:00.0", "0000:8B:00.0", "0000:CA:00.0", "0000:CB:00.0"]
    assert p.nvml_version == "13.580.65.06"
    assert (p.default_cluster_uuid, p.default_clique_id) == ("00000000-0000-0000-0000-000000000001", 0)


def test_gb300_profile() -> None:
    p = get_profile("GB300")
    assert (p.gpu_name, p.gpu_count, p.driver_version, p.cuda_version) == ("NVIDIA GB300 NVL", 8, "570.124.06", 12080)
    assert p.gpu_uuid(3) == "GPU-b300b300-0000-0000-0000-000000000003"
    assert p.nvml_version == "12.570.124.06"


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError, match=r"unknown GPU profile 'a100'; choose one of gb200, gb300"):
        get_profile("a100")


@pytest.mark.parametrize(
    ("mask", "summary"),
    [
        (health_mask(), HEALTH_SUMMARY_HEALTHY),
        (health_mask(route_unhealthy=True), HEALTH_SUMMARY_UNHEALTHY),
        (health_mask(route_recovery=True), HEALTH_SUMMARY_UNHEALTHY),
        (health_mask(access_timeout_recovery=True), HEALTH_SUMMARY_UNHEALTHY),
        (health_mask(incorrect_configuration=4), HEALTH_SUMMARY_UNHEALTHY),
        (health_mask(degraded_bandwidth=True), HEALTH_SUMMARY_LIMITED_CAPACITY),
        (0, HEALTH_SUMMARY_NOT_SUPPORTED),
    ],
)
def test_health_summary_follows_the_mask(mask: int, summary: int) -> None:
    assert health_summary(mask) == summary


def test_documented_mask_values() -> None:
    assert health_mask() == 0x1AA
    assert HEALTH_CONDITIONS == {"healthy": 0x1AA, "degraded_bandwidth": 0x1A9, "route_unhealthy": 0x19A,
                                 "no_partition": 0x4AA}
