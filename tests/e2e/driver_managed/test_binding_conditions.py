"""End to end, gate ComputeDomainBindingConditions on the 1.37 scheduler: workload pods wait in
scheduling (PreBind) until their node's IMEX daemon is Ready, not in ContainerCreating.

Four simulated GB200 nodes in two cliques and one GPU node without NVLink fabric; the plugin's
binding timeout is short (15 s) so that a node that never gets ready is given up in the test's time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from cdriver.api import constants
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.support.waiting import wait_for
from tests.support.world import (
    clique_nodes,
    cliques,
    create_domain,
    delete_all,
    hold_imex_port,
    is_char_device,
    start_world,
)

NON_FABRIC_NODE = "cpu-1"
NODES = RESOURCES["nodes"]


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "extra_nodes": (NON_FABRIC_NODE,),
                            "feature_gates": {"ComputeDomainBindingConditions": True},
                            "extra_values": ["--set", "kubeletPlugin.bindingTimeout=15s"]}, "bc")


def failed_prepares(world: SimWorld, ns: str, pod: str) -> list[str]:
    return [e.get("message", "") for e in scenario.events_for(world.raw, ns, pod)
            if e.get("reason") == "FailedPrepareDynamicResources"]


def ready_conditions(claim: dict) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c.get("reason", "")) for d in (claim.get("status") or {}).get("devices") or []
            if d.get("driver") == constants.DRIVER_NAME for c in d.get("conditions") or []]


def test_pods_wait_in_scheduling_and_their_first_prepare_succeeds(world: SimWorld, e2e_namespace: str) -> None:
    """A healthy bootstrap: each node's channel carries the binding conditions; the pods are bound
    once their node's daemon is Ready, and kubelet's first Prepare succeeds (no
    FailedPrepareDynamicResources event); each container has its channel."""
    check_pods_bound_once_their_daemon_is_ready(world, e2e_namespace, clique_nodes(world, cliques(world)[0]), 150)


def check_pods_bound_once_their_daemon_is_ready(world: SimWorld, ns: str, nodes: list[str], timeout: float) -> None:
    """The test above on `nodes` (two nodes of one clique)."""
    raw = world.raw
    node_a, node_b = nodes
    channel = next(d for s in raw.list(RESOURCES["resourceslices"])["items"] if s["spec"].get("nodeName") == node_a
                   for d in s["spec"]["devices"] if d["name"] == "channel-0")
    assert (channel.get("bindsToNode"), channel.get("bindingConditions"), channel.get("bindingFailureConditions")) \
        == (True, ["Ready"], ["BindingFailed"])
    uid = create_domain(world, ns, "bound")
    for name, node in (("a", node_a), ("b", node_b)):
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "bound-channel", node=node), ns)
    pods = scenario.wait_pods_running(raw, ns, ["a", "b"], timeout)
    for pod in pods:
        name, claim = pod["metadata"]["name"], scenario.claim_of(raw, pod)
        # the allocation carried the conditions: the scheduler bound the pod only once Ready was True
        assert claim["status"]["allocation"]["devices"]["results"][0].get("bindingConditions") == ["Ready"]
        assert ("Ready", "True", "DaemonReady") in ready_conditions(claim)
        assert is_char_device(world, ns, pod, channel_device_path(0)), f"{name} has no channel"
        assert failed_prepares(world, ns, name) == [], f"{name} waited in ContainerCreating"
    delete_all(world, ns, ["a", "b"], "bound", uid)


def test_a_node_that_cannot_serve_the_domain_gives_the_pod_back_to_the_scheduler(
        world: SimWorld, e2e_namespace: str) -> None:
    """The pod may run on the GPU node without fabric or on a clique node; with the clique node
    cordoned it is allocated the fabric-less node's channel, whose plugin fails the binding
    (NotFabricAttached); once the clique node is schedulable again the pod is placed there and
    starts with its channel, never having waited in ContainerCreating."""
    ns, raw = e2e_namespace, world.raw
    _, node_b = clique_nodes(world, cliques(world)[1])
    uid = create_domain(world, ns, "moved")
    pod = scenario.workload_pod("w", ns, "moved-channel")
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [NON_FABRIC_NODE, node_b]}]}]}}}
    raw.patch(NODES, node_b, {"spec": {"unschedulable": True}})
    try:
        raw.create(scenario.PODS, pod, ns)

        def refused_on_the_fabricless_node() -> list[str]:
            return [e.get("message", "") for e in scenario.events_for(raw, ns, "w")
                    if "NotFabricAttached" in e.get("message", "")]

        wait_for("the scheduler to report the failed binding on the node without fabric",
                 refused_on_the_fabricless_node, 60)
    finally:
        raw.patch(NODES, node_b, {"spec": {"unschedulable": None}})
    (running,) = scenario.wait_pods_running(raw, ns, ["w"], 150)
    assert running["spec"]["nodeName"] == node_b
    assert is_char_device(world, ns, running, channel_device_path(0))
    assert failed_prepares(world, ns, "w") == []
    delete_all(world, ns, ["w"], "moved", uid)


def test_a_node_whose_daemon_cannot_start_gives_the_pod_to_another_node_of_the_clique(
        world: SimWorld, e2e_namespace: str) -> None:
    """Another process holds the IMEX port where node A's daemon would listen, and node B is
    cordoned: the pod is allocated A's channel, A's daemon never gets Ready, and after the binding
    timeout A's plugin fails the binding (DaemonNotReady). With A cordoned and B schedulable, the
    scheduler then places the pod on B, where it starts with its channel at the first Prepare."""
    node_a, node_b = clique_nodes(world, cliques(world)[1])

    @contextmanager
    def port_held() -> Iterator[None]:
        (daemon_ip,) = world.node(node_a).agent.pod_addresses.upcoming(1)
        holder = hold_imex_port(daemon_ip)
        try:
            yield
        finally:
            holder.close()

    check_a_node_whose_daemon_cannot_start_gives_the_pod_away(world, e2e_namespace, node_a, node_b, port_held, 150)


def check_a_node_whose_daemon_cannot_start_gives_the_pod_away(
        world: SimWorld, ns: str, node_a: str, node_b: str,
        daemon_blocked: Callable[[], AbstractContextManager[None]], timeout: float) -> None:
    """The test above, with node A's daemon kept from starting by `daemon_blocked` (entered before
    the domain exists); `timeout` bounds the pod's start on B."""
    raw = world.raw
    raw.patch(NODES, node_b, {"spec": {"unschedulable": True}})
    try:
        with daemon_blocked():
            uid = create_domain(world, ns, "blocked")
            pod = scenario.workload_pod("w", ns, "blocked-channel")
            pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_a, node_b]}]}]}}}
            raw.create(scenario.PODS, pod, ns)
            wait_for("the scheduler to report the binding that failed on node A", lambda: [
                e for e in scenario.events_for(raw, ns, "w") if "DaemonNotReady" in e.get("message", "")], 90)
            raw.patch(NODES, node_a, {"spec": {"unschedulable": True}})
            raw.patch(NODES, node_b, {"spec": {"unschedulable": None}})
            (running,) = scenario.wait_pods_running(raw, ns, ["w"], timeout)
    finally:
        raw.patch(NODES, node_a, {"spec": {"unschedulable": None}})
        raw.patch(NODES, node_b, {"spec": {"unschedulable": None}})
    assert running["spec"]["nodeName"] == node_b
    assert is_char_device(world, ns, running, channel_device_path(0))
    assert failed_prepares(world, ns, "w") == []
    delete_all(world, ns, ["w"], "blocked", uid)


def test_deleting_a_pod_and_its_domain_while_the_pod_waits_in_scheduling_cleans_everything(
        world: SimWorld, e2e_namespace: str) -> None:
    """Another process holds the IMEX port where the node's daemon would listen: the daemon never
    gets Ready, and the pod waits in scheduling with its claim allocated and the node labelled.
    Deleting the pod and the domain then leaves no label, daemon, claim or node file behind."""
    ns, raw = e2e_namespace, world.raw
    node = world.node(clique_nodes(world, cliques(world)[0])[0])
    (daemon_ip,) = node.agent.pod_addresses.upcoming(1)  # the workload pod is not bound: the daemon is next
    holder = hold_imex_port(daemon_ip)
    try:
        uid = create_domain(world, ns, "stuck")
        raw.create(scenario.PODS, scenario.workload_pod("w", ns, "stuck-channel", node=node.name), ns)

        def waiting_in_prebind() -> bool:
            pod = raw.get(scenario.PODS, "w", ns)
            claims = [c for c in raw.list(RESOURCES["resourceclaims"], ns)["items"]
                      if (c.get("status") or {}).get("allocation")]
            label = raw.get(NODES, node.name)["metadata"].get("labels", {}).get(constants.LABEL_COMPUTE_DOMAIN)
            daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
            return (not pod["spec"].get("nodeName") and len(claims) == 1 and label == uid
                    and any(d["spec"].get("nodeName") == node.name for d in daemons)
                    and ("Ready", "False", "WaitingForDaemon") in ready_conditions(claims[0]))

        wait_for("the pod to wait in scheduling, its claim allocated and its node's daemon started", waiting_in_prebind,
                 60)
        # cdriver diagnose says where the pod waits, and what the node's plugin said of its claim
        out = subprocess.run([sys.executable, "-m", "cdriver", "diagnose", "pod", "w", "-n", ns, "-o", "json",
                              "--kubectl", str(world.kubectl)], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "KUBECONFIG": str(world.kubeconfig)})
        links = {lk["key"]: lk for lk in json.loads(out.stdout)["chains"][0]["links"]}
        allocation = links["allocation"]
        assert allocation["verdict"] == "WAIT", allocation
        assert "waits in scheduling until node" in allocation["summary"], allocation
        assert "WaitingForDaemon" in allocation["summary"], allocation
        delete_all(world, ns, ["w"], "stuck", uid)
        assert raw.list(RESOURCES["resourceclaims"], ns)["items"] == []
        wait_for("the node's label to go", lambda: constants.LABEL_COMPUTE_DOMAIN not in (
            raw.get(NODES, node.name)["metadata"].get("labels") or {}), 30)
    finally:
        holder.close()
