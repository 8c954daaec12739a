"""End to end: turning the `ComputeDomainCliques` gate on and off with `helm upgrade` while a
domain has running workloads.

The daemons of a live domain must follow the chart's gates: after each flip they register where
the new controller and plugins look (ComputeDomainClique objects, or the ComputeDomain's
status.nodes), the domain is Ready again with every node it had, the workloads that held a
channel keep running, and a new workload pod, on a node the domain did not use yet, gets its
channel.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from cdriver import featuregates
from cdriver.api import constants
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.nvml.discover import channel_device_path
from cdriver.roles.controller.daemon_gates import EVENT_FOLLOW_GATES, gate_values
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.support.world import assert_kept_running, create_domain, is_char_device, start_world, upgrade_gates

CLIQUES = featuregates.COMPUTE_DOMAIN_CLIQUES
#: generous: a flip converges in seconds (README); old-gate daemons never do
CONVERGE_TIMEOUT = 90


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "feature_gates": {CLIQUES: False}}, "gf")


def domain_ready_with(world: SimWorld, ns: str, name: str, nodes: list[str]) -> scenario.Seen:
    """The domain is Ready and lists exactly `nodes`, each Ready."""
    status = world.raw.get(scenario.CDS, name, ns).get("status") or {}
    listed = {e.get("name"): e.get("status") for e in status.get("nodes") or []}
    done = status.get("status") == constants.STATUS_READY and listed == dict.fromkeys(nodes, constants.STATUS_READY)
    return scenario.Seen(done, status, json.dumps({"status": status.get("status"), "nodes": listed}))


def daemons_registered(world: SimWorld, uid: str, nodes: list[str], cliques: bool) -> scenario.Seen:
    """Every daemon pod of the domain runs with the gate `cliques`, one per node of `nodes`, all
    Ready; with cliques on, their clique objects list each of them Ready."""
    pods = scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, uid)
    seen = {}
    for pod in pods:
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
        seen[pod["spec"].get("nodeName", "")] = [gate_values(env.get(ENV_FEATURE_GATES, ""))[CLIQUES],
                                                 scenario.pod_ready(pod)]
    entries = {e.get("nodeName"): e.get("status")
               for daemons in scenario.clique_entries(world.raw, DRIVER_NAMESPACE, uid).values() for e in daemons}
    done = seen == {n: [cliques, True] for n in nodes}
    if cliques:
        done = done and entries == dict.fromkeys(nodes, constants.STATUS_READY)
    return scenario.Seen(done, None, json.dumps({"daemon pods (gate, ready)": seen, "clique entries": entries}))


def start_workload(world: SimWorld, ns: str, name: str, node: str) -> dict:
    world.raw.create(scenario.PODS, scenario.workload_pod(name, ns, "cd-channel", node=node), ns)
    (pod,) = scenario.wait_pods_running(world.raw, ns, [name], CONVERGE_TIMEOUT)
    assert is_char_device(world, ns, pod, channel_device_path(0)), f"{name} has no channel device"
    return pod


def flip(world: SimWorld, ns: str, uid: str, cliques: bool, nodes: list[str], new: tuple[str, str]) -> float:
    """Upgrade the chart to `cliques`; wait for the domain on `nodes` and a new pod `new` (name,
    node); seconds from the new driver being Ready to the new pod holding its channel."""
    upgrade_gates(world, {CLIQUES: cliques})
    rolled = time.monotonic()
    start_workload(world, ns, *new)
    took = time.monotonic() - rolled
    print(f"{CLIQUES} -> {cliques}: a new pod with its channel {took:.1f} s after the driver")
    everyone = sorted([*nodes, new[1]])
    scenario.wait_for(f"the domain Ready on {everyone}", lambda: domain_ready_with(world, ns, "cd", everyone),
                      CONVERGE_TIMEOUT)
    scenario.wait_for(f"the daemons of the domain on {everyone} with {CLIQUES}={cliques}",
                      lambda: daemons_registered(world, uid, everyone, cliques), CONVERGE_TIMEOUT)
    change = f"{CLIQUES} {str(not cliques).lower()} -> {str(cliques).lower()}"
    said = [(e["type"], e["reason"], e.get("message", "")) for e in scenario.events_for(world.raw, ns, "cd")]
    assert any(t == "Normal" and r == EVENT_FOLLOW_GATES and change in m for t, r, m in said), said
    return took


@pytest.mark.timeout(900)
def test_flipping_compute_domain_cliques_with_live_workloads_converges_both_ways(
        world: SimWorld, e2e_namespace: str) -> None:
    ns = e2e_namespace
    a, b, c, d = (n.name for n in world.nodes)
    uid = create_domain(world, ns, "cd", num_nodes=2)
    old = {name: start_workload(world, ns, name, node) for name, node in (("old-a", a), ("old-b", b))}
    scenario.wait_for("the domain Ready on its two nodes", lambda: domain_ready_with(world, ns, "cd", [a, b]), 60)
    assert scenario.clique_entries(world.raw, DRIVER_NAMESPACE, uid) == {}  # legacy: status.nodes only

    flip(world, ns, uid, True, [a, b], ("new-c", c))
    assert_kept_running(world, ns, old)
    kept = {**old, "new-c": world.raw.get(scenario.PODS, "new-c", ns)}

    flip(world, ns, uid, False, [a, b, c], ("new-d", d))
    assert_kept_running(world, ns, kept)
