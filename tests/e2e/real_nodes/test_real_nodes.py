"""End to end on real nodes: the chart installed from the built driver image on a cluster whose
first clique (worker-1, worker-2) runs a real kubelet v1.37, containerd 2.4 and runc, beside a
simulated clique (worker-3, worker-4).

The contract's bootstrap and two-clique scenarios of `test_contract` run here unchanged
(imported below, so they use this module's world); the tests after them need a real node: the channel device in a
runc container matches the CDI spec kubelet's runtime applied, kubelet's own DRA checkpoint is
cleaned up, and workloads survive a plugin or kubelet restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.e2e.driver_managed.test_binding_conditions import (
    check_a_node_whose_daemon_cannot_start_gives_the_pod_away,
    check_pods_bound_once_their_daemon_is_ready,
)
from tests.e2e.driver_managed.test_driver_managed import (
    check_a_broken_fabric_taints_the_nodes_channel,
    check_a_pod_late_for_a_deleted_domain_gets_no_channel,
    check_deletion_as_soon_as_daemons_exist_gives_starting_pods_no_channel,
    check_pods_of_one_domain_share_a_nodes_channel,
)
from tests.e2e.driver_managed.test_plugin_upgrade import check_rolling_update_under_load
from tests.e2e.upstream.test_contract import (  # noqa: F401 - collected here, on this module's world
    test_bootstrap_injects_the_channel,
    test_domain_spanning_two_cliques_peers_within_each_clique,
)
from tests.support.world import (
    clique_nodes,
    cliques,
    create_domain,
    delete_all,
    exec_in,
    health_after_imex_kill,
    imex_start_fails,
    reported_ready,
    start_world,
    text,
    upgrade_gates,
)

REAL_NODES = 2
KUBELET_DRA_CHECKPOINT = "var/lib/kubelet/dra_manager_state"


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "real_nodes": REAL_NODES}, "rn")


def real_clique(world: SimWorld) -> tuple[str, list[str]]:
    clique = cliques(world)[0]
    members = clique_nodes(world, clique)
    assert all(world.node(n).real for n in members), f"clique {clique} ({members}) is not the real one"
    return clique, members


def start_workloads(world: SimWorld, ns: str, name: str, mode: str = constants.ALLOCATION_MODE_SINGLE,
                    ) -> tuple[str, list[dict]]:
    clique, members = real_clique(world)
    uid = create_domain(world, ns, name, mode)
    names = [f"{name}-w{i}" for i in range(len(members))]
    for pod in names:
        world.raw.create(scenario.PODS, scenario.workload_pod(pod, ns, f"{name}-channel", clique=clique,
                                                              group=ns), ns)
    return uid, scenario.wait_pods_running(world.raw, ns, names, 240)


def spec_device(world: SimWorld, node: str, path: str) -> tuple[int, int]:
    """(major, minor) of `path` in the CDI specs on the node (host device when the spec names only hostPath)."""
    root = world.node(node).agent.plan.root
    for spec_file in sorted(world.node(node).cdi_dir.glob("*.yaml")):
        spec = json.loads(spec_file.read_text())
        edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices", [])]
        for edit in edits:
            for dev in edit.get("deviceNodes") or []:
                if dev["path"] == path:
                    if "major" in dev:
                        return dev["major"], dev.get("minor", 0)
                    st = (root / dev.get("hostPath", path).lstrip("/")).stat()
                    return os.major(st.st_rdev), os.minor(st.st_rdev)
    raise AssertionError(f"no CDI spec on {node} names {path}")


def container_device(world: SimWorld, ns: str, pod: dict, path: str) -> tuple[int, int]:
    out = exec_in(world, ns, pod, ["stat", "-c", "%t %T", path])
    assert out.returncode == 0, text(out.stderr)
    major, minor = text(out.stdout).split()
    return int(major, 16), int(minor, 16)


def container_ids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["containerID"] for p in pods}


def assert_still_running(world: SimWorld, ns: str, before: dict[str, str]) -> None:
    for name, cid in before.items():
        pod = world.raw.get(scenario.PODS, name, ns)
        status = pod["status"]["containerStatuses"][0]
        assert status["containerID"] == cid and status["restartCount"] == 0, status
        assert exec_in(world, ns, pod, ["test", "-c", channel_device_path(0)]).returncode == 0


def checkpoint_mentions(world: SimWorld, node: str, uids: list[str]) -> list[str]:
    path = world.node(node).agent.plan.root / KUBELET_DRA_CHECKPOINT
    content = path.read_text() if path.exists() else ""
    return [u for u in uids if u in content]


def test_runc_containers_get_the_channel_devices_of_the_cdi_spec_and_deletion_cleans_kubelet(
        world: SimWorld, e2e_namespace: str) -> None:
    """allocationMode All: channel0 and channel2047 in each runc container carry the major and
    minor of the claim's CDI spec; deleting everything also empties kubelet's DRA checkpoint."""
    ns, mode = e2e_namespace, constants.ALLOCATION_MODE_ALL
    uid, pods = start_workloads(world, ns, "cd", mode)
    claim_uids = [scenario.claim_of(world.raw, p)["metadata"]["uid"] for p in pods]
    for pod in pods:
        node = pod["spec"]["nodeName"]
        assert world.node(node).real
        assert container_device(world, ns, pod, channel_device_path(0)) == spec_device(
            world, node, channel_device_path(0))
        last = channel_device_path(2047)
        present = exec_in(world, ns, pod, ["test", "-c", last]).returncode == 0
        assert present == (mode == constants.ALLOCATION_MODE_ALL)
        if present:
            assert container_device(world, ns, pod, last) == spec_device(world, node, last)
        assert checkpoint_mentions(world, node, claim_uids), "kubelet's DRA checkpoint does not hold the claims"
        # the plugin from the image, with the token the real kubelet gave its pod, reports the claim
        data = reported_ready(world, pod, uid)
        assert (data["channelCount"], data["channelRange"]) == (2048, "0-2047"), data
    delete_all(world, ns, [p["metadata"]["name"] for p in pods], "cd", uid)
    for pod in pods:
        scenario.wait_for(f"kubelet's DRA checkpoint on {pod['spec']['nodeName']} to forget the claims",
                          lambda n=pod["spec"]["nodeName"]: scenario.Seen(
                              not checkpoint_mentions(world, n, claim_uids), None, "still there"), 60)
        assert scenario.nodes_labelled(world.raw, uid) == []


def test_the_real_kubelet_shows_a_channels_health_in_pod_status(world: SimWorld, e2e_namespace: str) -> None:
    """Kubelet v1.37.2 watches the plugin's resource health stream: killing the daemon's nvidia-imex under a
    running workload turns the workload's channel Unhealthy in its containerStatuses[].allocatedResourcesStatus,
    with the plugin's message, and Healthy again once the daemon restarted it."""
    ns = e2e_namespace
    uid, pods = start_workloads(world, ns, "hl")
    pod = pods[0]
    node = pod["spec"]["nodeName"]
    assert world.node(node).real
    daemon = next(p for p in scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, uid) if p["spec"]["nodeName"] == node)
    seen = health_after_imex_kill(world, ns, pod["metadata"]["name"], daemon)
    print(f"\nreal kubelet: channel health after killing nvidia-imex: {seen}")
    assert f"on node {node} is not Ready" in seen["message"], seen
    delete_all(world, ns, [p["metadata"]["name"] for p in pods], "hl", uid)


def test_plugin_and_kubelet_restarts_keep_workloads_and_their_claims(world: SimWorld, e2e_namespace: str) -> None:
    ns = e2e_namespace
    uid, pods = start_workloads(world, ns, "rs")
    before = container_ids(pods)
    node = pods[0]["spec"]["nodeName"]

    def plugin_pods() -> list[dict]:
        return [p for p in world.raw.list(scenario.PODS, DRIVER_NAMESPACE)["items"]
                if p["spec"].get("nodeName") == node and "kubelet-plugin" in p["metadata"]["name"]]

    [old] = plugin_pods()
    world.raw.delete(scenario.PODS, old["metadata"]["name"], DRIVER_NAMESPACE)

    def replaced() -> scenario.Seen:
        new = [p for p in plugin_pods() if p["metadata"]["uid"] != old["metadata"]["uid"] and scenario.pod_ready(p)]
        return scenario.Seen(bool(new), new, "no new Ready plugin pod")

    scenario.wait_for(f"a new kubelet plugin on {node}", replaced, 120)
    assert_still_running(world, ns, before)

    kubelet = world.node(pods[1]["spec"]["nodeName"]).agent
    kubelet.restart_kubelet()
    kubelet.wait_ready(world.raw)  # the new kubelet's heartbeat
    kubelet.wait_pods_synced(world.raw)  # and its syncs of every pod: a recreated container would show by now
    assert_still_running(world, ns, before)
    delete_all(world, ns, list(before), "rs", uid)


def test_pod_deleted_while_its_claim_is_prepared_is_unprepared_by_kubelet(
        world: SimWorld, e2e_namespace: str) -> None:
    """Prepare waits for the node's IMEX daemon; deleting the pod meanwhile makes kubelet unprepare
    the claim: no node label, no checkpoint entry, no CDI spec remain."""
    ns = e2e_namespace
    _, members = real_clique(world)
    uid = create_domain(world, ns, "early")
    world.raw.create(scenario.PODS, scenario.workload_pod("w0", ns, "early-channel", node=members[0]), ns)
    scenario.wait_for("the node labelled for the domain (its claim is being prepared)",
                      lambda: scenario.nodes_labelled(world.raw, uid), 60)
    claim_uid = scenario.claim_of(world.raw, world.raw.get(scenario.PODS, "w0", ns))["metadata"]["uid"]
    world.raw.delete(scenario.PODS, "w0", ns)

    def unprepared() -> scenario.Seen:
        left = {"labels": scenario.nodes_labelled(world.raw, uid),
                "checkpoint": checkpoint_mentions(world, members[0], [claim_uid]),
                "cdi": [p.name for p in world.node(members[0]).cdi_dir.glob(f"*{claim_uid}*")],
                "pod": [1] if world.raw.get_or_none(scenario.PODS, "w0", ns) else []}
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for("kubelet to unprepare the deleted pod's claim", unprepared, 120)
    delete_all(world, ns, [], "early", uid)


def test_real_nodes_report_their_runtime(world: SimWorld) -> None:
    _, members = real_clique(world)
    for name in members:
        info = world.raw.get(RESOURCES["nodes"], name)["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"] == "containerd://2.4.2" and info["kubeletVersion"] == "v1.37.2"
    # the nodes' mounts live in their own mount namespaces, none in the machine's
    assert str(world.settings.base_dir) not in Path("/proc/self/mountinfo").read_text()


def test_deleting_a_domain_as_soon_as_its_daemons_exist_gives_starting_pods_no_channel_on_real_nodes(
        world: SimWorld, e2e_namespace: str) -> None:
    """The sequence of `test_driver_managed`'s test of the same name, with real kubelet's retries."""
    _, members = real_clique(world)
    check_deletion_as_soon_as_daemons_exist_gives_starting_pods_no_channel(world, e2e_namespace, members, 240)


def test_a_pod_late_for_a_deleted_domain_gets_no_channel_on_real_nodes(world: SimWorld, e2e_namespace: str) -> None:
    """As on simulated nodes (`test_driver_managed`): real kubelet's retries are refused too."""
    _, members = real_clique(world)
    check_a_pod_late_for_a_deleted_domain_gets_no_channel(world, e2e_namespace, members[0], members[1], 240)


def test_pods_of_one_domain_share_a_real_nodes_channel_and_other_domains_go_elsewhere(
        world: SimWorld, e2e_namespace: str) -> None:
    """As on simulated nodes (`test_driver_managed`): four runc containers of one domain on one
    real node, each with the channel device; another domain's pod goes to the other real node."""
    clique, _ = real_clique(world)
    check_pods_of_one_domain_share_a_nodes_channel(world, e2e_namespace, clique, 240)


def test_with_binding_conditions_real_kubelets_prepare_at_the_first_call_and_a_blocked_node_gives_pods_away(
        world: SimWorld, e2e_namespace: str) -> None:
    """Gate ComputeDomainBindingConditions turned on by `helm upgrade` (binding timeout 30 s): on
    the real clique the pods wait in scheduling until their node's daemon is Ready, and the real
    kubelet's first Prepare succeeds; then, with node A's `nvidia-imex` failing at start, a pod
    allocated A's channel is given back to the scheduler (DaemonNotReady) and starts on node B
    (`test_binding_conditions`). The gate is turned off again after."""
    _, members = real_clique(world)
    node_a, node_b = members
    values = list(world.settings.extra_values)
    world.settings.extra_values += ["--set", "kubeletPlugin.bindingTimeout=30s"]
    upgrade_gates(world, {"ComputeDomainBindingConditions": True})
    try:
        check_pods_bound_once_their_daemon_is_ready(world, e2e_namespace, members, 240)
        check_a_node_whose_daemon_cannot_start_gives_the_pod_away(
            world, e2e_namespace, node_a, node_b, lambda: imex_start_fails(world, node_a), 240)
    finally:
        world.settings.extra_values[:] = values
        upgrade_gates(world, {"ComputeDomainBindingConditions": False})


def test_a_real_node_with_a_broken_fabric_gets_no_new_channel_claim_unless_it_is_tolerated(
        world: SimWorld, e2e_namespace: str) -> None:
    """As on simulated nodes (`test_driver_managed`): the plugin in its container reads the mock
    NVML's fabric state fall back to in_progress and taints the real node's channel; the real
    scheduler places the clique's workload on the other real node, a tolerating claim can still
    be allocated on the tainted one, and the taint goes when the fabric completes again."""
    clique, _ = real_clique(world)
    check_a_broken_fabric_taints_the_nodes_channel(world, e2e_namespace, clique, 240)


def test_a_rolling_plugin_update_on_real_nodes_fails_no_call_and_loses_no_channel(world: SimWorld,
                                                                                e2e_namespace: str) -> None:
    """The chart's surge update under a stream of workloads on the real clique: the real kubelet
    holds both plugin instances; no FailedPrepare/UnprepareDynamicResources event, every workload
    keeps its channel, the checkpoint is left clean (`test_plugin_upgrade`)."""
    real_clique(world)
    ref = world.node_images.refs["cdriver"]
    repository = ref.rpartition(":")[0]
    for node in world.nodes:
        if node.real:
            node.agent.tag_image(ref, f"{repository}:rolled")
    figures = check_rolling_update_under_load(world, e2e_namespace, "rolled")
    print(f"rolling update under load on real nodes: {figures}")
