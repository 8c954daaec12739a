"""The public contract, checked against cdriver and against the upstream Go driver.

Each scenario runs twice: on a simulated cluster with cdriver's chart, and on one with
upstream's own chart and binaries (built by `make peer`) on the same simulated nodes, mock
NVML, channel devices and IMEX stand-ins. Only what a user of either driver depends on is
asserted: the objects a ComputeDomain yields, where workloads and daemons land, the domain's
status, the channel devices inside containers, the IMEX peers, and cleanup on deletion. On the
cdriver run the same scenarios also check what cdriver promises beyond that contract (no probe
failures at a normal start, the daemons' /etc/hosts block, nothing left on the nodes); they are
cdriver's only copies of these scenarios, and `test_real_nodes` runs them on real nodes too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cdriver.api import constants
from cdriver.checkpoint import CheckpointStore
from cdriver.imex.config import IMEX_CTL_BINARY, IMEXD_CONFIG
from cdriver.imex.hosts import HOSTS_BLOCK_HEADER, parse_hosts
from cdriver.imex.names import UNUSED_SLOT_IP, dns_names
from cdriver.nvml.discover import IMEX_CHANNELS_DEV_DIR, channel_device_path
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME, DOMAINS_DIR_NAME
from cdriver.sim.world import scenario
from cdriver.sim.world.upstream_driver import PeerSourceMissing, find_source_tarball
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_NAMESPACE, DRIVER_UPSTREAM, SimWorld
from tests.support.upstream_inputs import skip_without_upstream
from tests.support.world import (
    clique_nodes,
    cliques,
    create_domain,
    delete_all,
    exec_in,
    is_char_device,
    start_world,
    text,
)


@pytest.fixture(scope="module", params=[DRIVER_CDRIVER, DRIVER_UPSTREAM])
def world(request: pytest.FixtureRequest) -> Iterator[SimWorld]:
    if request.param == DRIVER_UPSTREAM:
        try:
            find_source_tarball()
        except PeerSourceMissing as exc:  # an input this repository cannot carry (upstream's code)
            skip_without_upstream(f"the upstream driver cannot be built here: {exc}")
    yield from start_world({"nodes": 4, "driver": request.param}, f"ct-{request.param[:2]}")


def domain_status(world: SimWorld, ns: str, name: str) -> str:
    cd = world.raw.get(scenario.CDS, name, ns)
    return (cd.get("status") or {}).get("status", "")


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


def is_cdriver(world: SimWorld) -> bool:
    """Whether the world runs cdriver (its guarantees beyond the shared contract are checked too)."""
    return world.settings.driver == DRIVER_CDRIVER


@pytest.mark.parametrize("mode", [constants.ALLOCATION_MODE_SINGLE, constants.ALLOCATION_MODE_ALL])
def test_bootstrap_injects_the_channel(world: SimWorld, e2e_namespace: str, mode: str) -> None:
    """ComputeDomain → workload template → pods on one clique → daemons Ready → channel devices."""
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
    daemon_nodes = sorted(p["spec"]["nodeName"] for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid))
    assert daemon_nodes == want_nodes
    entries = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid)[constants.clique_object_name(uid, clique)]
    assert sorted((e["nodeName"], e["status"]) for e in entries) == [(n, constants.STATUS_READY) for n in want_nodes]
    assert sorted(e["index"] for e in entries) == list(range(len(want_nodes)))
    if is_cdriver(world):
        # Ready by the time the workloads run, and a normal daemon start records no probe
        # failure (an operator would chase it).
        assert domain_status(world, ns, "cd") == constants.STATUS_READY
        assert unhealthy_events(world, scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)) == []
    scenario.wait_for("the domain's status to be Ready",
                      lambda: domain_status(world, ns, "cd") == constants.STATUS_READY, 60)
    for pod in pods:
        assert is_char_device(world, ns, pod, channel_device_path(0))
        # Single hands out channel 0 only; All hands out every channel.
        assert is_char_device(world, ns, pod, channel_device_path(1)) == (mode == constants.ALLOCATION_MODE_ALL)
        listed = text(exec_in(world, ns, pod, ["ls", IMEX_CHANNELS_DEV_DIR]).stdout).split()
        assert ("channel1" in listed) == (mode == constants.ALLOCATION_MODE_ALL)
    delete_all(world, ns, names, "cd", uid)


def test_domain_spanning_two_cliques_peers_within_each_clique(world: SimWorld, e2e_namespace: str) -> None:
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
    pods = scenario.wait_pods_running(raw, ns, names, 150)
    assert sorted(p["spec"]["nodeName"] for p in pods) == all_nodes
    objects = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid)
    assert sorted(objects) == sorted(constants.clique_object_name(uid, q) for q in cliques(world))
    daemons = {p["spec"]["nodeName"]: p for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)}
    assert sorted(daemons) == all_nodes
    for clique in cliques(world):
        members = clique_nodes(world, clique)
        entries = objects[constants.clique_object_name(uid, clique)]
        assert sorted(e["nodeName"] for e in entries) == members
        assert sorted(e["index"] for e in entries) == list(range(len(members)))
        # IMEX peers talk pod to pod: the daemons' pod IPs (each pod has its own, on simulated nodes too)
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
            if is_cdriver(world):
                hosts_file = text(exec_in(world, DRIVER_NAMESPACE, daemon, ["cat", "/etc/hosts"]).stdout)
                block = parse_hosts(hosts_file.split(HOSTS_BLOCK_HEADER, 1)[1])
                # the domain's own names (upstream #1465): the members' at their pod IPs, every
                # other slot of the nodes config at the sentinel; and no DNS search list walk
                env = {e["name"]: e.get("value") for e in daemon["spec"]["containers"][0]["env"]}
                assert sorted(block) == dns_names(uid, int(env[constants.ENV_MAX_NODES]))
                assert sorted(ip for ip in block.values() if ip != UNUSED_SLOT_IP) == member_ips
                assert daemon["spec"]["dnsConfig"] == {"options": [{"name": "ndots", "value": "1"}]}
    scenario.wait_for("the domain's status to be Ready",
                      lambda: domain_status(world, ns, "wide") == constants.STATUS_READY, 60)
    for pod in pods:
        assert is_char_device(world, ns, pod, channel_device_path(0))
    delete_all(world, ns, names, "wide", uid)


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
    if is_cdriver(world):
        # Nor on the nodes: the plugins clean up on the deletion, not at their next periodic sweep.
        scenario.wait_for("no checkpoint record or domain directory of the deleted domain on any node",
                          lambda: scenario.Seen(not (left := node_leftovers(world, uid)), left, json.dumps(left)), 30)
