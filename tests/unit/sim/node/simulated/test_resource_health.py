"""A simulated node keeps kubelet's device health rules and shows them in pod status."""

from __future__ import annotations

from pathlib import Path

from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.dra.resource_health import HEALTHY, UNHEALTHY, UNKNOWN, DeviceHealthReport
from cdriver.sim.node.simulated.claim_cache import ClaimCache
from cdriver.sim.node.simulated.claims import pod_claim_names
from cdriver.sim.node.simulated.resource_health import (
    HealthCache,
    allocated_resources_status,
    pick_health_service,
)

DRIVER = "compute-domain.nvidia.com"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_newest_advertised_health_service_is_used() -> None:
    assert pick_health_service(["v1.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"]) == \
        "v1.DRAResourceHealth"
    assert pick_health_service(["v1.DRAPlugin", "v1alpha1.DRAResourceHealth"]) == "v1alpha1.DRAResourceHealth"
    assert pick_health_service(["v1beta1.DRAPlugin"]) == ""


def test_reports_time_out_to_unknown_and_unreported_devices_are_dropped() -> None:
    clock = Clock()
    cache = HealthCache(clock)
    assert cache.update(DRIVER, [DeviceHealthReport("n1", "channel-0", HEALTHY, "ok", 10),
                                 DeviceHealthReport("n1", "daemon-0", HEALTHY, "ok")]) == \
        [("n1", "channel-0"), ("n1", "daemon-0")]
    assert cache.update(DRIVER, [DeviceHealthReport("n1", "channel-0", HEALTHY, "ok", 10),
                                 DeviceHealthReport("n1", "daemon-0", HEALTHY, "ok")]) == [], "nothing changed"
    clock.now += 11
    assert cache.get(DRIVER, "n1", "channel-0") == (UNKNOWN, ""), "stale after its own 10 s timeout"
    assert cache.get(DRIVER, "n1", "daemon-0") == (HEALTHY, "ok"), "the default timeout is 30 s"
    clock.now += 20
    assert cache.update(DRIVER, [DeviceHealthReport("n1", "channel-0", UNHEALTHY, "down", 10)]) == \
        [("n1", "channel-0"), ("n1", "daemon-0")], "a device no longer reported goes Unknown after its timeout"
    assert cache.get(DRIVER, "n1", "daemon-0") == (UNKNOWN, "")
    cache.clear(DRIVER)
    assert cache.get(DRIVER, "n1", "channel-0") == (UNKNOWN, "")


def test_a_containers_claims_show_their_devices_health(tmp_path: Path) -> None:
    claims = ClaimCache(tmp_path / "claims.json")
    ref = ClaimRef("ns", "w-channel-x", "uid-1")
    claims.reference("pod-1", ref, [DRIVER])
    claims.set_devices(ref, DRIVER, [PreparedDevice(["channel"], "n1", "channel-0", ["k8s.x/claim=uid-1-channel-0"])])
    cache = HealthCache()
    cache.update(DRIVER, [DeviceHealthReport("n1", "channel-0", UNHEALTHY, "daemon not Ready")])
    pod = {"metadata": {"namespace": "ns"},
           "spec": {"resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "t"}]},
           "status": {"resourceClaimStatuses": [{"name": "channel", "resourceClaimName": "w-channel-x"}]}}
    container = {"name": "main", "resources": {"claims": [{"name": "channel"}]}}
    names = dict(pod_claim_names(pod))
    assert allocated_resources_status("ns", names, container, claims, cache) == [
        {"name": "claim:channel", "resources": [
            {"resourceID": "k8s.x/claim=uid-1-channel-0", "health": "Unhealthy", "message": "daemon not Ready"}]}]
    with_request = {"name": "main", "resources": {"claims": [{"name": "channel", "request": "other"}]}}
    assert allocated_resources_status("ns", names, with_request, claims, cache) == [], "a device of another request"
    assert allocated_resources_status("ns", names, {"name": "x"}, claims, cache) == []
