"""End to end, driver-managed IMEX: the chart installed on a simulated cluster of four GB200
nodes in two cliques plus one GPU node without NVLink fabric.

The scenarios every driver shares (bootstrap in Single and All mode, a domain over both
cliques, deletion while workloads start) are in `test_contract`, with cdriver's own checks on
its run; the helpers here serve both modules and `test_real_nodes`.

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
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_CONFIG
from cdriver.nvml.discover import channel_device_path
from cdriver.roles.controller.desired import DAEMON_POD_CLAIM_NAME
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


def is_char_device(world: SimWorld, ns: str, pod: dict, path: str) -> bool:
    out = exec_in(world, ns, pod, ["test", "-c", path])
    return out.returncode == 0


def test_daemon_claim_from_another_namespace_is_refused_and_the_victims_daemon_starts(
        world: SimWorld, e2e_namespace: str) -> None:
    """A hand-written daemon claim naming another namespace's domain is refused at admission
    with the fix in the message; the victim's workload and its IMEX daemon start as usual."""
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

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
