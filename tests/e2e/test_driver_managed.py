"""End to end, driver-managed IMEX: the chart installed on a simulated cluster of four GB200
nodes in two cliques plus one GPU node without NVLink fabric.

Each test asserts on the cluster state and on what the container sees, never only on a pod
being Running.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

from cdriver.api import constants
from cdriver.checkpoint import CheckpointStore
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_CONFIG
from cdriver.imex.hosts import HOSTS_BLOCK_HEADER
from cdriver.nvml.discover import IMEX_CHANNELS_DEV_DIR, channel_device_path
from cdriver.roles.controller.desired import DAEMON_POD_CLAIM_NAME
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME, DOMAINS_DIR_NAME
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.e2e.conftest import exec_in, start_world, text

pytestmark = pytest.mark.e2e

NON_FABRIC_NODE = "cpu-1"


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "extra_nodes": (NON_FABRIC_NODE,)}, "dm")


def cliques(world: SimWorld) -> list[str]:
    return sorted({n.clique for n in world.nodes if n.clique})


def clique_nodes(world: SimWorld, clique: str) -> list[str]:
    return sorted(n.name for n in world.nodes if n.clique == clique)


def create_domain(world: SimWorld, ns: str, name: str, mode: str = constants.ALLOCATION_MODE_SINGLE) -> str:
    scenario.ensure_namespace(world.raw, ns)
    cd = world.raw.create(scenario.CDS, scenario.compute_domain(name, ns, f"{name}-channel", mode), ns)
    scenario.wait_for(f"workload template {ns}/{name}-channel",
                      lambda: world.raw.get_or_none(scenario.RCTS, f"{name}-channel", ns), 60)
    return cd["metadata"]["uid"]


def delete_all(world: SimWorld, ns: str, pods: list[str], cd_name: str, uid: str) -> None:
    """Delete pods and CD; assert that nothing the driver generated remains."""
    for pod in pods:
        try:
            world.raw.delete(scenario.PODS, pod, ns)
        except Exception:  # already gone
            pass
    world.raw.delete(scenario.CDS, cd_name, ns)

    def gone() -> scenario.Seen:
        left = scenario.generated_objects(world.raw, DRIVER_NAMESPACE, uid)
        left["pods"] = [p for p in pods if world.raw.get_or_none(scenario.PODS, p, ns)]
        left["cd"] = [cd_name] if world.raw.get_or_none(scenario.CDS, cd_name, ns) else []
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for("every object of the domain to be deleted", gone, 120)


def node_leftovers(world: SimWorld, uid: str) -> dict[str, list[str]]:
    """Per node: checkpoint records and the per-domain directory the plugin keeps for ``uid``."""
    out: dict[str, list[str]] = {}
    for node in world.nodes:
        plugin_dir = node.agent.layout.plugins_dir / constants.DRIVER_NAME
        found = [f"{rec.state} {claim}" for claim, rec in
                 CheckpointStore(plugin_dir / CHECKPOINT_FILE_NAME, boot_id="").read().claims.items()
                 if rec.domain_id == uid]
        if (plugin_dir / DOMAINS_DIR_NAME / uid).exists():
            found.append(f"directory {DOMAINS_DIR_NAME}/{uid}")
        if found:
            out[node.name] = found
    return out


def unhealthy_events(world: SimWorld, pods: list[dict]) -> list[str]:
    """Probe-failure Warnings recorded on the given pods."""
    names = {p["metadata"]["name"] for p in pods}
    return [f"{e['involvedObject']['name']}: {e.get('message')}"
            for e in world.raw.list(scenario.EVENTS, DRIVER_NAMESPACE)["items"]
            if e.get("reason") == "Unhealthy" and e["involvedObject"].get("name") in names]


def is_char_device(world: SimWorld, ns: str, pod: dict, path: str) -> bool:
    out = exec_in(world, ns, pod, ["test", "-c", path])
    return out.returncode == 0


@pytest.mark.parametrize("mode", [constants.ALLOCATION_MODE_SINGLE, constants.ALLOCATION_MODE_ALL])
def test_bootstrap_loop_injects_the_channel(world: SimWorld, e2e_namespace: str, mode: str) -> None:
    """Seed steps 1-10: CD → templates → allocation → node label → daemons → Ready → CDI → device."""
    ns, raw = e2e_namespace, world.raw
    clique = cliques(world)[0]
    want_nodes = clique_nodes(world, clique)
    uid = create_domain(world, ns, "cd", mode)
    rct = raw.get(scenario.RCTS, "cd-channel", ns)
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["domainID"] == uid and params["kind"] == constants.KIND_CHANNEL_CONFIG
    assert params.get("allocationMode", constants.ALLOCATION_MODE_SINGLE) == mode
    names = [f"w{i}" for i in range(len(want_nodes))]
    for name in names:
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "cd-channel", clique=clique, group=ns), ns)
    pods = scenario.wait_pods_running(raw, ns, names, 150)
    assert sorted(p["spec"]["nodeName"] for p in pods) == want_nodes
    for pod in pods:
        results = scenario.allocation(scenario.claim_of(raw, pod))
        assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
            (constants.DRIVER_NAME, pod["spec"]["nodeName"], constants.DEVICE_CHANNEL_0)]
    assert scenario.nodes_labelled(raw, uid) == want_nodes
    entries = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid)[constants.clique_object_name(uid, clique)]
    assert sorted((e["nodeName"], e["status"]) for e in entries) == [(n, constants.STATUS_READY) for n in want_nodes]
    assert sorted(e["index"] for e in entries) == list(range(len(want_nodes)))
    daemon_nodes = sorted(p["spec"]["nodeName"] for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid))
    assert daemon_nodes == want_nodes
    cd = raw.get(scenario.CDS, "cd", ns)
    assert cd["status"]["status"] == constants.STATUS_READY
    # A normal daemon start records no probe failure (an operator would chase it).
    assert unhealthy_events(world, scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)) == []
    for pod in pods:
        assert is_char_device(world, ns, pod, channel_device_path(0))
        # Single hands out channel 0 only; All hands out every channel.
        assert is_char_device(world, ns, pod, channel_device_path(1)) == (mode == constants.ALLOCATION_MODE_ALL)
        env = text(exec_in(world, ns, pod, ["ls", IMEX_CHANNELS_DEV_DIR]).stdout).split()
        assert ("channel1" in env) == (mode == constants.ALLOCATION_MODE_ALL)
    delete_all(world, ns, names, "cd", uid)


def test_daemon_claim_from_another_namespace_is_refused_and_the_victims_daemon_starts(
        world: SimWorld, e2e_namespace: str) -> None:
    """A hand-written daemon claim naming another namespace's domain is refused at admission
    with the fix in the message; the victim's workload and its IMEX daemon start as usual."""
    from cdriver.kube.raw import RESOURCES, ApiError

    ns, raw = e2e_namespace, world.raw
    clique = cliques(world)[0]
    uid = create_domain(world, ns, "cd")
    attacker = f"{ns[:55]}-thief"
    scenario.ensure_namespace(raw, attacker)
    steal = {"metadata": {"name": "steal"}, "spec": {"devices": {
        "requests": [{"name": "daemon", "exactly": {"deviceClassName": constants.DEVICE_CLASS_DAEMON}}],
        "config": [{"requests": ["daemon"], "opaque": {"driver": constants.DRIVER_NAME, "parameters": {
            "apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": uid}}}]}}}
    try:
        with pytest.raises(ApiError) as err:
            raw.create(scenario.CLAIMS, steal, attacker)
        assert f"deviceClassName {constants.DEVICE_CLASS_DAEMON} in resourceclaims {attacker}/steal " \
               f"is reserved for the " \
               f"IMEX daemons that the ComputeDomain controller runs in namespace {DRIVER_NAMESPACE}" in str(err.value)
        assert constants.DEVICE_CLASS_DEFAULT_CHANNEL in str(err.value)
        assert raw.list(scenario.CLAIMS, attacker)["items"] == []
        raw.create(scenario.PODS, scenario.workload_pod("w0", ns, "cd-channel", clique=clique, group=ns), ns)
        pod = scenario.wait_pods_running(raw, ns, ["w0"], 150)[0]
        assert is_char_device(world, ns, pod, channel_device_path(0))
        daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
        assert [d["spec"]["nodeName"] for d in daemons] == [pod["spec"]["nodeName"]]
        results = scenario.allocation(scenario.claim_of(raw, daemons[0], DAEMON_POD_CLAIM_NAME))
        assert [(r["pool"], r["device"]) for r in results] == [(pod["spec"]["nodeName"], constants.DEVICE_DAEMON_0)]
        assert daemons[0]["metadata"]["labels"][constants.LABEL_CLIQUE_ID] == clique
    finally:
        raw.delete(RESOURCES["namespaces"], attacker)
    delete_all(world, ns, ["w0"], "cd", uid)


def test_domain_spanning_both_cliques_peers_within_each_clique(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    uid = create_domain(world, ns, "wide")
    all_nodes = sorted(n.name for n in world.nodes if n.clique)
    names = [f"w{i}" for i in range(len(all_nodes))]
    for name in names:
        pod = scenario.workload_pod(name, ns, "wide-channel", group=ns)
        pod["spec"]["affinity"]["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": constants.LABEL_NODE_CLIQUE, "operator": "In", "values": cliques(world)}]}]}}
        raw.create(scenario.PODS, pod, ns)
    scenario.wait_pods_running(raw, ns, names, 150)
    objects = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid)
    assert sorted(objects) == sorted(constants.clique_object_name(uid, q) for q in cliques(world))
    daemons = {p["spec"]["nodeName"]: p for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)}
    for clique in cliques(world):
        members = clique_nodes(world, clique)
        entries = objects[constants.clique_object_name(uid, clique)]
        assert sorted(e["nodeName"] for e in entries) == members
        # IMEX peers talk pod to pod: the daemons' pod IPs (a simulated node's pods share its address)
        member_ips = sorted(daemons[n]["status"]["podIP"] for n in members)
        for node_name in members:
            daemon = daemons[node_name]

            def domain(pod: dict = daemon) -> scenario.Seen:
                out = exec_in(world, DRIVER_NAMESPACE, pod, [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-N", "-j"])
                try:
                    doc = json.loads(text(out.stdout))
                except json.JSONDecodeError:
                    return scenario.Seen(False, None, text(out.stdout) + text(out.stderr))
                return scenario.Seen(doc.get("status") == "UP", doc, json.dumps(doc)[:400])

            doc = scenario.wait_for(f"IMEX domain UP on {node_name}", domain, 60)
            hosts = sorted(n["host"] for n in doc["nodes"].values())
            assert hosts == member_ips, f"{node_name} peers {hosts}, want its clique {member_ips}"
            hosts_file = text(exec_in(world, DRIVER_NAMESPACE, daemon, ["cat", "/etc/hosts"]).stdout)
            block = hosts_file.split(HOSTS_BLOCK_HEADER, 1)[1]
            assert sorted(line.split()[0] for line in block.strip().splitlines()) == member_ips
    delete_all(world, ns, names, "wide", uid)


def test_imex_domain_ready_alone_then_up_then_degraded(world: SimWorld, e2e_namespace: str) -> None:
    """Seed-003 scenario 2 through the driver: READY alone, UP 2/2, DEGRADED when a daemon dies."""
    ns, raw = e2e_namespace, world.raw
    clique = cliques(world)[0]
    node_a, node_b = clique_nodes(world, clique)
    uid = create_domain(world, ns, "imex")
    raw.create(scenario.PODS, scenario.workload_pod("a", ns, "imex-channel", node=node_a), ns)
    scenario.wait_pods_running(raw, ns, ["a"], 120)
    daemon_a = next(p for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid) if p["spec"]["nodeName"] == node_a)

    def query(pod: dict) -> dict:
        out = exec_in(world, DRIVER_NAMESPACE, pod, [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-N", "-j"])
        return json.loads(text(out.stdout))

    ready = exec_in(world, DRIVER_NAMESPACE, daemon_a, [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-q"])
    assert text(ready.stdout).strip() == "READY"
    alone = query(daemon_a)
    assert len(alone["nodes"]) == 1

    raw.create(scenario.PODS, scenario.workload_pod("b", ns, "imex-channel", node=node_b), ns)
    scenario.wait_pods_running(raw, ns, ["b"], 120)
    up = scenario.wait_for("domain UP with both daemons", lambda: scenario.Seen(
        (d := query(daemon_a))["status"] == "UP" and len(d["nodes"]) == 2, d, json.dumps(d)), 60)
    assert all(n["status"] == "READY" and n["version"] == "NO_GPU" for n in up["nodes"].values())

    # B's IMEX daemon dies and stays dead: freeze B's daemon role so it cannot restart it.
    daemon_b = next(p for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid) if p["spec"]["nodeName"] == node_b)
    pid = world.node(node_b).agent.container_pid(DRIVER_NAMESPACE, daemon_b["metadata"]["name"],
                                                 daemon_b["spec"]["containers"][0]["name"])
    role = psutil.Process(pid)
    imex = [p for p in role.children(recursive=True) if p.name() == IMEX_DAEMON_BINARY]
    assert imex, "nvidia-imex is not running under B's daemon"
    role.suspend()
    try:
        for proc in imex:
            os.kill(proc.pid, signal.SIGKILL)
        started = time.monotonic()
        degraded = scenario.wait_for("domain DEGRADED on A", lambda: scenario.Seen(
            (d := query(daemon_a))["status"] == "DEGRADED", d, json.dumps(d)), 10)
        assert time.monotonic() - started < 10
        assert sum(n["status"] == "READY" for n in degraded["nodes"].values()) == 1
    finally:
        role.resume()
    scenario.wait_for("domain UP again after B's daemon restarts nvidia-imex",
                      lambda: query(daemon_a)["status"] == "UP", 60)
    delete_all(world, ns, ["a", "b"], "imex", uid)


def test_non_fabric_node_gets_no_channel(world: SimWorld, e2e_namespace: str) -> None:
    """A workload on a GPU node without NVLink fabric starts, but has no channel device."""
    ns, raw = e2e_namespace, world.raw
    uid = create_domain(world, ns, "nofab")
    raw.create(scenario.PODS, scenario.workload_pod("w", ns, "nofab-channel", node=NON_FABRIC_NODE), ns)
    (pod,) = scenario.wait_pods_running(raw, ns, ["w"], 120)
    assert pod["spec"]["nodeName"] == NON_FABRIC_NODE
    assert not is_char_device(world, ns, pod, channel_device_path(0))
    assert exec_in(world, ns, pod, ["test", "-e", channel_device_path(0)]).returncode == 1
    claim = scenario.claim_of(raw, pod)
    events = scenario.events_for(raw, ns, claim["metadata"]["name"])
    assert any("fabric" in e.get("message", "").lower() for e in events), [e.get("message") for e in events]
    assert scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid) == [] or all(
        p["spec"]["nodeName"] == NON_FABRIC_NODE for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid))
    delete_all(world, ns, ["w"], "nofab", uid)


def test_deleting_the_domain_while_workloads_start_leaves_nothing(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    clique = cliques(world)[1]
    uid = create_domain(world, ns, "early")
    names = ["w0", "w1"]
    for name in names:
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "early-channel", clique=clique, group=ns), ns)
    scenario.wait_for("a node labelled for the domain (workloads are starting)",
                      lambda: scenario.nodes_labelled(raw, uid), 60)
    delete_all(world, ns, names, "early", uid)
    assert scenario.generated_objects(raw, DRIVER_NAMESPACE, uid) == {
        "resourceclaimtemplates": [], "daemonsets": [], "daemon pods": [], "node labels": [], "cliques": []}
    # Nor on the nodes: the plugins clean up on the deletion, not at their next periodic sweep.
    scenario.wait_for("no checkpoint record or domain directory of the deleted domain on any node",
                      lambda: scenario.Seen(not (left := node_leftovers(world, uid)), left, json.dumps(left)), 30)
