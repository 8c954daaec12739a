"""End to end, host-managed IMEX (chart values imex.mode=hostManaged): each node runs its own
host `nvidia-imex` service; the driver runs no daemons and asks that service for readiness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_HOST_MANAGED
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.imex.host_service import HostImexService
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.support.world import SHORT_HOST_WAIT, exec_in, start_world


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 2, "imex_mode": IMEX_MODE_HOST_MANAGED, "extra_values": SHORT_HOST_WAIT}, "hm")


@pytest.fixture(scope="module")
def services(world: SimWorld) -> Iterator[dict[str, HostImexService]]:
    ips = [n.ip for n in world.nodes]
    running = {}
    for node in world.nodes:
        svc = HostImexService(node.agent.driver_root, node.ip, peers=[ip for ip in ips if ip != node.ip])
        svc.start()
        running[node.name] = svc
    yield running
    for svc in running.values():
        svc.stop()


def test_host_managed_workload_waits_for_the_host_service(world: SimWorld, services: dict[str, HostImexService],
                                                          e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    up_node, down_node = (n.name for n in world.nodes)
    services[down_node].stop()
    scenario.ensure_namespace(raw, ns)
    # All is not available with a host service: the controller admits the CD as Single and says so.
    cd = raw.create(scenario.CDS,
                    scenario.compute_domain("host", ns, "host-channel", constants.ALLOCATION_MODE_ALL), ns)
    uid = cd["metadata"]["uid"]
    rct = scenario.wait_for("workload template", lambda: raw.get_or_none(scenario.RCTS, "host-channel", ns), 60)
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == constants.ALLOCATION_MODE_SINGLE
    scenario.wait_for("an Event about allocationMode All", lambda: any(
        "All" in e.get("message", "") for e in scenario.events_for(raw, ns, "host")), 30)
    # No daemon objects in host-managed mode.
    assert raw.list(scenario.DAEMONSETS, namespace=DRIVER_NAMESPACE,
                    label_selector=f"{constants.LABEL_COMPUTE_DOMAIN}={uid}")["items"] == []

    # the plugin of the node without host service taints its channel (it probes every 5 s)
    def taint_on(node: str) -> scenario.Seen:
        found = [t for s in raw.list(RESOURCES["resourceslices"])["items"] if s["spec"].get("nodeName") == node
                 for d in s["spec"]["devices"] for t in d.get("taints") or []]
        return scenario.Seen(bool(found), found, str(found))

    (taint,) = scenario.wait_for(f"{down_node}'s channel tainted", lambda: taint_on(down_node), 30)
    assert (taint["key"], taint["value"]) == ("compute-domain.nvidia.com/unusable", "host-imex-not-ready")
    scenario.wait_for(f"{up_node}'s channel untainted (its host service runs)", lambda: scenario.Seen(
        not taint_on(up_node).ok, None, taint_on(up_node).detail), 30)

    raw.create(scenario.PODS, scenario.workload_pod("ok", ns, "host-channel", node=up_node), ns)
    raw.create(scenario.PODS, scenario.workload_pod("waits", ns, "host-channel", node=down_node), ns)
    (ok,) = scenario.wait_pods_running(raw, ns, ["ok"], 120)
    assert exec_in(world, ns, ok, ["test", "-c", channel_device_path(0)]).returncode == 0
    assert exec_in(world, ns, ok, ["test", "-e", channel_device_path(1)]).returncode == 1

    def unschedulable() -> scenario.Seen:
        pod = raw.get(scenario.PODS, "waits", ns)
        events = [e.get("message", "") for e in scenario.events_for(raw, ns, "waits")
                  if e.get("reason") == "FailedScheduling"]
        return scenario.Seen(not pod["spec"].get("nodeName") and bool(events), events, f"{pod.get('status')} {events}")

    # pinned to the tainted node, the workload waits in scheduling (not in ContainerCreating there)
    events = scenario.wait_for("the workload for the node without host service to wait unscheduled",
                               unschedulable, 90)
    print(f"\nscheduler: {events[-1]}")
    assert scenario.nodes_labelled(raw, uid) == []  # host mode never labels nodes

    services[down_node].start()
    (waited,) = scenario.wait_pods_running(raw, ns, ["waits"], 120)
    assert exec_in(world, ns, waited, ["test", "-c", channel_device_path(0)]).returncode == 0

    for pod in ("ok", "waits"):
        raw.delete(scenario.PODS, pod, ns)
    raw.delete(scenario.CDS, "host", ns)
    scenario.wait_for("the ComputeDomain and its template to be gone", lambda: (
        raw.get_or_none(scenario.CDS, "host", ns) is None
        and raw.get_or_none(scenario.RCTS, "host-channel", ns) is None), 60)
    # Deleting the domain leaves the host services alone.
    assert all(svc.is_running() for svc in services.values())
