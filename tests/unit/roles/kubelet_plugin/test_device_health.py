"""This node's device health: what makes a channel and the daemon slot usable, and the feed
kubelet's health stream reads."""

from __future__ import annotations

import threading

from cdriver.dra.resource_health import HEALTHY, UNHEALTHY, DeviceHealthReport, HealthFeed
from cdriver.nvml.discover import FABRIC_STATE_COMPLETED, FABRIC_STATE_IN_PROGRESS, GpuFabric
from cdriver.roles.kubelet_plugin.device_health import HealthInputs, device_health, fabric_problem
from cdriver.roles.kubelet_plugin.devices import published_devices

CLIQUE = "00000000-0000-0000-0000-0000000000ab.0"


def inputs(**kw: object) -> HealthInputs:
    base = dict(node_name="n1", devices=tuple(published_devices(False)), host_managed=False, clique_id=CLIQUE)
    base.update(kw)
    return HealthInputs(**base)  # type: ignore[arg-type]


def by_device(i: HealthInputs) -> dict[str, tuple[str, str]]:
    return {r.device: (r.health, r.message) for r in device_health(i)}


def test_a_free_channel_and_the_daemon_slot_are_healthy_on_a_working_fabric() -> None:
    found = by_device(inputs())
    assert found["channel-0"] == (HEALTHY, f"node n1 is in clique {CLIQUE}; no ComputeDomain holds its channel")
    assert found["daemon-0"] == (HEALTHY, f"node n1 is in clique {CLIQUE}")
    assert {r.pool for r in device_health(inputs())} == {"n1"}


def test_a_held_channel_follows_its_domains_daemon_on_the_node() -> None:
    ready = by_device(inputs(holders={"u1": (True, "", "ns/cd (u1)")}))["channel-0"]
    assert ready == (HEALTHY, "IMEX daemon of ComputeDomain ns/cd (u1) on node n1 is Ready")
    down = by_device(inputs(holders={"u1": (False, "node n1 is NotReady in ComputeDomainClique x", "ns/cd (u1)")}))
    assert down["channel-0"] == (UNHEALTHY, "IMEX daemon of ComputeDomain ns/cd (u1) on node n1 is not Ready: "
                                            "node n1 is NotReady in ComputeDomainClique x")
    assert down["daemon-0"][0] == HEALTHY, "the daemon slot does not depend on one domain's daemon"


def test_a_broken_fabric_or_host_service_makes_the_channel_unhealthy() -> None:
    broken = by_device(inputs(fabric_problem="GPU 2: fabric registration is in_progress",
                              holders={"u1": (True, "", "ns/cd (u1)")}))
    assert broken["channel-0"] == (UNHEALTHY, "NVLink fabric of node n1: GPU 2: fabric registration is in_progress")
    assert broken["daemon-0"][0] == UNHEALTHY
    host = inputs(host_managed=True, devices=tuple(published_devices(True)), host_problem="host nvidia-imex: DOWN")
    assert by_device(host) == {"channel-0": (UNHEALTHY, "host nvidia-imex: DOWN")}
    assert by_device(inputs(host_managed=True, devices=tuple(published_devices(True))))["channel-0"][0] == HEALTHY
    assert by_device(inputs(clique_id=""))["channel-0"][0] == UNHEALTHY


def gpu(index: int, **kw: object) -> GpuFabric:
    base = dict(index=index, uuid=f"GPU-{index}", name="GB200", result=0, cluster_uuid=CLIQUE.split(".")[0],
                clique_id=0, state=FABRIC_STATE_COMPLETED, status=0, health_mask=0, health_summary=1)
    base.update(kw)
    return GpuFabric(**base)  # type: ignore[arg-type]


def test_fabric_problems_name_the_gpu_and_what_is_wrong() -> None:
    assert fabric_problem([gpu(0), gpu(1)], CLIQUE) == ""
    assert fabric_problem([gpu(0), gpu(1, state=FABRIC_STATE_IN_PROGRESS)], CLIQUE) == \
        "GPU 1: fabric registration is in_progress"
    assert fabric_problem([gpu(0, health_summary=2, health_mask=0x20)], CLIQUE) == \
        "GPU 0: fabric health is unhealthy (mask 0x20)"
    assert "now in clique" in fabric_problem([gpu(0, clique_id=7)], CLIQUE)
    assert fabric_problem([gpu(0, status=5)], CLIQUE) == "GPU 0: fabric registration failed (status 5)"


def test_the_feed_sends_at_once_on_change_and_again_unchanged() -> None:
    feed = HealthFeed(resend_interval=0.05)
    feed.publish([DeviceHealthReport("n1", "channel-0", HEALTHY, "a")])
    got: list = []
    stop = threading.Event()

    def read() -> None:
        for report, _ in feed.updates(lambda: not stop.is_set()):
            got.append(report)
            if len(got) >= 4:
                stop.set()

    t = threading.Thread(target=read)
    t.start()
    assert not feed.publish([DeviceHealthReport("n1", "channel-0", HEALTHY, "a")]), "an unchanged report"
    feed.publish([DeviceHealthReport("n1", "channel-0", UNHEALTHY, "b")])
    t.join(5)
    assert not t.is_alive() and len(got) == 4, "resent while unchanged"
    assert got[-1][0].health == UNHEALTHY
    feed.close()
    assert list(feed.updates()) == [], "a closed feed ends every stream"


def test_an_unusable_fabric_or_host_service_taints_the_channel_devices_no_new_claim_should_get() -> None:
    from cdriver.roles.kubelet_plugin.device_health import TAINT_KEY, channel_taints

    assert channel_taints(inputs()) == []
    assert channel_taints(inputs(fabric_problem="GPU 1: ...", fabric_code="fabric-registration-incomplete")) == [
        {"key": TAINT_KEY, "value": "fabric-registration-incomplete", "effect": "NoSchedule"}]
    host = inputs(host_managed=True, devices=tuple(published_devices(True)), host_problem="not READY")
    assert channel_taints(host)[0]["value"] == "host-imex-not-ready"
    assert channel_taints(inputs(clique_id="", fabric_code="fabric-unhealthy")) == [], \
        "a node outside any fabric prepares claims without a channel, as before"


def test_fabric_problem_codes_are_taint_values() -> None:
    from cdriver.roles.kubelet_plugin.device_health import fabric_problems

    codes = [code for code, _ in fabric_problems(
        [gpu(0, state=FABRIC_STATE_IN_PROGRESS), gpu(1, status=5), gpu(2, health_summary=2), gpu(3, clique_id=9)],
        CLIQUE)]
    assert codes == ["fabric-registration-incomplete", "fabric-registration-failed", "fabric-unhealthy",
                     "clique-changed"]
    assert all(len(c) <= 63 and c.replace("-", "").isalnum() for c in codes), "valid label values"
