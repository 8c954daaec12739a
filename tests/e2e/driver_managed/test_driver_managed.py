"""End to end, driver-managed IMEX: the chart installed on a simulated cluster of four GB200
nodes in two cliques plus one GPU node without NVLink fabric.

The scenarios every driver shares (bootstrap in Single and All mode, a domain over both
cliques, deletion while workloads start) are in `test_contract`, with cdriver's own checks on
its run; the shared helpers are in `tests.support.world`.

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
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_CONFIG, parse_config
from cdriver.nvml.discover import channel_device_path
from cdriver.roles.controller.desired import DAEMON_POD_CLAIM_NAME
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.support.metrics import sample_value
from tests.support.waiting import wait_for
from tests.support.world import (
    clique_nodes,
    cliques,
    create_domain,
    delete_all,
    exec_in,
    health_after_imex_kill,
    is_char_device,
    reported_ready,
    start_world,
    text,
)

NON_FABRIC_NODE = "cpu-1"


#: A chart value of imex.daemonConfig other than upstream's default, set for this world.
GRACE_TIME = "300"


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4, "extra_nodes": (NON_FABRIC_NODE,), "extra_values": [
        "--set", f"imex.daemonConfig.nodeDisconnectedGraceTime={GRACE_TIME}"]}, "dm")


def test_the_charts_imex_settings_reach_the_config_each_daemon_writes(world: SimWorld, e2e_namespace: str) -> None:
    """imex.daemonConfig.* set at install is in the config every IMEX daemon wrote for nvidia-imex;
    the settings left alone keep upstream's defaults."""
    ns, raw = e2e_namespace, world.raw
    node_a, node_b = clique_nodes(world, cliques(world)[0])
    uid = create_domain(world, ns, "tuned")
    for name, node in (("a", node_a), ("b", node_b)):
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "tuned-channel", node=node), ns)
    scenario.wait_pods_running(raw, ns, ["a", "b"], 150)
    daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
    assert sorted(d["spec"]["nodeName"] for d in daemons) == [node_a, node_b]
    for daemon in daemons:
        written = parse_config(text(exec_in(world, DRIVER_NAMESPACE, daemon, ["cat", IMEXD_CONFIG]).stdout))
        assert (written["IMEX_NODE_DISCONNECTED_GRACE_TIME"], written["LOG_LEVEL"],
                written["IMEX_WAIT_FOR_QUORUM"]) == (GRACE_TIME, "4", "RECOVERY")
        # each daemon serves its metrics where its pod annotations say, on its own pod IP
        notes = daemon["metadata"]["annotations"]
        url = f"http://{daemon['status']['podIP']}:{notes['prometheus.io/port']}{notes['prometheus.io/path']}"
        assert notes["prometheus.io/scrape"] == "true"
        wait_for(f"{url} to say the daemon is READY", lambda u=url: sample_value(u, "cdriver_imex_daemon_ready") == 1,
                 30)
        assert sample_value(url, "cdriver_imex_daemon_peers") == 2
    delete_all(world, ns, ["a", "b"], "tuned", uid)


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
    (pod_a,) = scenario.wait_pods_running(raw, ns, ["a"], 120)
    daemon_a = next(p for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid) if p["spec"]["nodeName"] == node_a)
    # the claim says where it stands: Ready, and the chain down to this node's daemon
    data = reported_ready(world, pod_a, uid)
    assert (data["channels"], data["cliqueID"]) == ([0], clique), data
    # the channel's health in the pod's status follows the daemon: Unhealthy while its nvidia-imex is
    # down, saying why, then Healthy again once the daemon restarted it
    seen = health_after_imex_kill(world, ns, "a", daemon_a)
    print(f"\nchannel health after killing nvidia-imex: {seen}")
    assert f"IMEX daemon of ComputeDomain {ns}/imex ({uid}) on node {node_a} is not Ready" in seen["message"], seen

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
    pid = world.node(node_b).agent.container_main_pid(DRIVER_NAMESPACE, daemon_b["metadata"]["name"],
                                                      daemon_b["spec"]["containers"][0]["name"])
    assert pid, "B's daemon container is not running"
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
    assert_readiness_follows_imex(world, daemon_a)
    delete_all(world, ns, ["a", "b"], "imex", uid)


def assert_readiness_follows_imex(world: SimWorld, daemon: dict) -> None:
    """The daemon answers its pod's probes over HTTP (kubelet starts no process): a frozen
    nvidia-imex, which stops answering READY, turns the pod NotReady; thawed, it is Ready again."""
    container = daemon["spec"]["containers"][0]
    probe = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/readyz", "metrics")
    name = daemon["metadata"]["name"]
    agent = world.node(daemon["spec"]["nodeName"]).agent
    role = psutil.Process(agent.container_main_pid(DRIVER_NAMESPACE, name, container["name"]))
    (imex,) = [p for p in role.children(recursive=True) if p.name() == IMEX_DAEMON_BINARY]

    def ready() -> bool:
        return scenario.pod_ready(world.raw.get(scenario.PODS, name, DRIVER_NAMESPACE))

    assert ready()
    imex.suspend()
    try:
        wait_for(f"daemon pod {name} to turn NotReady while its nvidia-imex is frozen", lambda: not ready(), 60)
    finally:
        imex.resume()
    wait_for(f"daemon pod {name} to turn Ready again", ready, 60)


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


def refusals(world: SimWorld, ns: str, pod: str, words: str) -> list[dict]:
    """kubelet's failed-Prepare Events on ``pod`` whose message contains ``words``."""
    return [e for e in scenario.events_for(world.raw, ns, pod)
            if e.get("reason") == "FailedPrepareDynamicResources" and words in e.get("message", "")]


def never_started(pod: dict) -> bool:
    """No container of the pod ever ran and kubelet created no sandbox (so Prepare never succeeded)."""
    status = pod.get("status") or {}
    ran = any("running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
              or c.get("restartCount") or c.get("lastState")
              for c in status.get("containerStatuses") or [])
    sandbox = any(c.get("type") == "PodReadyToStartContainers" and c.get("status") == "True"
                  for c in status.get("conditions") or [])
    return not ran and not sandbox


def check_deletion_as_soon_as_daemons_exist_gives_starting_pods_no_channel(world: SimWorld, ns: str,
                                                                           nodes: list[str], timeout: float) -> None:
    """A domain deleted as soon as its daemon pods exist, its workloads still in
    ContainerCreating: the deletion completes at once without deleting the pods, and none of
    them ever starts (kubelet's retries are refused, first as "being deleted", then as gone)."""
    raw = world.raw
    uid = create_domain(world, ns, "cd")
    names = [f"w{i}" for i in range(len(nodes))]
    for name, node in zip(names, nodes, strict=True):
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "cd-channel", node=node), ns)

    def daemons_started() -> bool:
        # past their own claim's Prepare (a daemon pod that has not started yet is refused for
        # a domain being deleted), not yet Ready (the workloads' Prepare still waits for them)
        daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
        return len(daemons) == len(nodes) and not any(never_started(d) for d in daemons)

    scenario.wait_for("the domain's daemon pods to start", daemons_started, 60, interval=0.05)
    prepared = [n for n in names if not never_started(raw.get(scenario.PODS, n, ns))]
    raw.delete(scenario.CDS, "cd", ns)
    assert not prepared, f"pods {prepared} were prepared before the deletion began: the scenario needs them not"

    def finished() -> scenario.Seen:
        left = scenario.generated_objects(raw, DRIVER_NAMESPACE, uid)
        left["cd"] = ["cd"] if raw.get_or_none(scenario.CDS, "cd", ns) else []
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for("the deletion to complete without waiting for the starting pods", finished, timeout)
    for name in names:
        scenario.wait_for(f"a Prepare of {name} after the deletion to be refused",
                          lambda n=name: refusals(world, ns, n, "not found; it was deleted"), timeout)
        pod = raw.get(scenario.PODS, name, ns)
        assert not pod["metadata"].get("deletionTimestamp") and never_started(pod), pod["status"]
        assert not [e for e in scenario.events_for(raw, ns, name) if e.get("reason") == "Started"]
        assert not [e for e in scenario.events_for(raw, ns, name) if e.get("reason") == "DeletionWaitsForWorkloads"]
    for name in names:
        raw.delete(scenario.PODS, name, ns)
    scenario.wait_for("the workload pods to be deleted",
                      lambda: not any(raw.get_or_none(scenario.PODS, n, ns) for n in names), 60)


def check_a_pod_late_for_a_deleted_domain_gets_no_channel(world: SimWorld, ns: str, held_node: str,
                                                           late_node: str, timeout: float) -> None:
    """A pod whose claim was not prepared when its domain's deletion began never gets a channel
    and does not hold the deletion; a pod that held its channel before keeps it until it ends.

    The late pod's claim is generated (and the domain's deletion begun) while a scheduling
    gate keeps the pod off its node, so no Prepare of it can have run before the deletion."""
    raw = world.raw
    uid = create_domain(world, ns, "cd")
    raw.create(scenario.PODS, scenario.workload_pod("held", ns, "cd-channel", node=held_node), ns)
    [held] = scenario.wait_pods_running(raw, ns, ["held"], timeout)
    held_container = held["status"]["containerStatuses"][0]["containerID"]
    late = scenario.workload_pod("late", ns, "cd-channel", node=late_node)
    late["spec"]["schedulingGates"] = [{"name": "cdriver.test/after-the-deletion"}]
    raw.create(scenario.PODS, late, ns)
    scenario.wait_for("the late pod's claim, generated from the domain's template",
                      lambda: (raw.get(scenario.PODS, "late", ns).get("status") or {}).get("resourceClaimStatuses"),
                      60)

    raw.delete(scenario.CDS, "cd", ns)
    scenario.wait_for("the deletion to wait for the pod that holds a channel", lambda: any(
        c.get("reason") == "DeletionWaitsForWorkloads"
        for c in (raw.get(scenario.CDS, "cd", ns).get("status") or {}).get("conditions") or []), 60)
    pod = raw.get(scenario.PODS, "late", ns)
    pod["spec"]["schedulingGates"] = []
    raw.update(scenario.PODS, pod, ns)
    scenario.wait_for("kubelet's Prepare of the late pod to be refused", lambda: refusals(
        world, ns, "late", "is being deleted; delete the pods that use its channel claim"), timeout)

    # the pod that held its channel keeps it (and its container); the late one is not waited for
    held = raw.get(scenario.PODS, "held", ns)
    assert held["status"]["containerStatuses"][0]["containerID"] == held_container
    assert is_char_device(world, ns, held, channel_device_path(0))

    def waits_for() -> scenario.Seen:
        conditions = (raw.get(scenario.CDS, "cd", ns).get("status") or {}).get("conditions") or []
        message = next((c.get("message", "") for c in conditions if c.get("type") == "Ready"), "")
        return scenario.Seen(f"pod {ns}/held" in message and f"{ns}/late" not in message, message, message)

    scenario.wait_for("the deletion to wait for the held pod only (kubelet reports the late one unprepared)",
                      waits_for, 60)
    assert scenario.nodes_labelled(raw, uid) == [held_node]
    assert [p["spec"]["nodeName"] for p in scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)] == [held_node]
    assert never_started(raw.get(scenario.PODS, "late", ns))
    from tests.e2e.diagnose.test_diagnose import first_broken, link_of  # here: not collected in this module

    chain, _ = first_broken(world, ["pod", "late", "-n", ns], "computedomain")
    assert f"{ns}/late had no IMEX channel when the deletion began" in link_of(chain, "computedomain")["summary"]

    # the held pod ends: the deletion completes, and the late pod is left alone, never started
    raw.delete(scenario.PODS, "held", ns)

    def finished() -> scenario.Seen:
        left = scenario.generated_objects(raw, DRIVER_NAMESPACE, uid)
        left["cd"] = ["cd"] if raw.get_or_none(scenario.CDS, "cd", ns) else []
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for("the deletion to complete", finished, timeout)
    scenario.wait_for("a Prepare of the late pod after the deletion to be refused",
                      lambda: refusals(world, ns, "late", "not found; it was deleted"), timeout)
    chain, _ = first_broken(world, ["pod", "late", "-n", ns], "computedomain")
    assert "deleted before the claim was prepared" in link_of(chain, "computedomain")["summary"]
    late_pod = raw.get(scenario.PODS, "late", ns)
    assert late_pod["spec"]["nodeName"] == late_node and not late_pod["metadata"].get("deletionTimestamp")
    assert never_started(late_pod), late_pod["status"]
    assert not [e for e in scenario.events_for(raw, ns, "late") if e.get("reason") == "Started"]
    raw.delete(scenario.PODS, "late", ns)
    scenario.wait_for("the late pod to be deleted", lambda: raw.get_or_none(scenario.PODS, "late", ns) is None, 60)


def test_deleting_a_domain_as_soon_as_its_daemons_exist_gives_starting_pods_no_channel(
        world: SimWorld, e2e_namespace: str) -> None:
    check_deletion_as_soon_as_daemons_exist_gives_starting_pods_no_channel(
        world, e2e_namespace, clique_nodes(world, cliques(world)[0]), 150)


def test_a_pod_late_for_a_deleted_domain_gets_no_channel(world: SimWorld, e2e_namespace: str) -> None:
    held_node, late_node = clique_nodes(world, cliques(world)[0])
    check_a_pod_late_for_a_deleted_domain_gets_no_channel(world, e2e_namespace, held_node, late_node, 150)


def test_the_kubelet_plugin_runs_with_the_charts_probes_and_affinity(world: SimWorld) -> None:
    """The world installs the chart's defaults for the plugin: GPU-node affinity and the gRPC
    startup and liveness probes, which kubelet runs against the health service on the pod IP."""
    plugins = [p for p in world.raw.list(scenario.PODS, DRIVER_NAMESPACE)["items"]
               if "kubelet-plugin" in p["metadata"]["name"]]
    assert sorted(p["spec"]["nodeName"] for p in plugins) == sorted(n.name for n in world.nodes)
    for pod in plugins:
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "compute-domains")
        assert container["startupProbe"]["grpc"]["service"] == "liveness"
        assert container["livenessProbe"]["grpc"]["port"] == container["startupProbe"]["grpc"]["port"] > 0
        assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert scenario.pod_ready(pod), pod["status"]
        # the startup probe may fail while the plugin starts (that is what it is for); the
        # liveness probe, which runs once it passed, never does
        unhealthy = [e.get("message", "") for e in scenario.events_for(world.raw, DRIVER_NAMESPACE,
                                                                        pod["metadata"]["name"])
                     if e.get("reason") == "Unhealthy"]
        assert all(m.startswith("Startup probe failed") for m in unhealthy), unhealthy


def test_a_node_with_a_broken_fabric_gets_no_new_channel_claim_unless_it_is_tolerated(
        world: SimWorld, e2e_namespace: str) -> None:
    """The real scheduler and device taints: node A's fabric registration falls back to in_progress, its
    plugin taints A's channel NoSchedule; a workload of the clique is placed on node B, not A; a claim
    that tolerates the taint (an administrator's) can still be allocated on A. The taint goes when the
    fabric completes again."""
    check_a_broken_fabric_taints_the_nodes_channel(world, e2e_namespace, cliques(world)[0], 120)


def check_a_broken_fabric_taints_the_nodes_channel(world: SimWorld, ns: str, clique: str, timeout: float) -> None:
    """The test above on the two nodes of `clique`; `timeout` bounds each pod's start."""
    from cdriver.kube.resources import RESOURCES
    from cdriver.roles.kubelet_plugin.device_health import TAINT_KEY
    from cdriver.sim.gpu.driver_root import rerender_driver_root

    raw = world.raw
    node_a, node_b = clique_nodes(world, clique)
    uid = create_domain(world, ns, "taint")

    def taints_of(node: str) -> list[dict] | None:
        for s in raw.list(RESOURCES["resourceslices"])["items"]:
            if s["spec"].get("nodeName") == node and s["spec"]["driver"] == constants.DRIVER_NAME:
                return next(d.get("taints") or [] for d in s["spec"]["devices"] if d["name"] == "channel-0")
        return None

    root = world.node(node_a).driver_root
    try:
        rerender_driver_root(root, fabric_state="in_progress")
        scenario.wait_for(f"{node_a}'s channel tainted", lambda: scenario.Seen(
            bool(taints_of(node_a)), None, str(taints_of(node_a))), 30)
        assert taints_of(node_a)[0]["value"] == "fabric-registration-incomplete"
        raw.create(scenario.PODS, scenario.workload_pod("w", ns, "taint-channel", clique=clique), ns)
        (pod,) = scenario.wait_pods_running(raw, ns, ["w"], timeout)
        assert pod["spec"]["nodeName"] == node_b, "the tainted node got no new channel claim"

        template = raw.get(scenario.RCTS, "taint-channel", ns)["spec"]["spec"]
        (request,) = template["devices"]["requests"]
        request["exactly"]["tolerations"] = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
        raw.create(scenario.CLAIMS, {"metadata": {"name": "admin", "namespace": ns}, "spec": template}, ns)
        admin = scenario.workload_pod("admin", ns, "unused", node=node_a)
        admin["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": "admin"}]
        raw.create(scenario.PODS, admin, ns)

        def allocated() -> scenario.Seen:
            claim = raw.get(scenario.CLAIMS, "admin", ns)
            results = scenario.allocation(claim)
            return scenario.Seen(bool(results), results, json.dumps(claim.get("status") or {}))

        (result,) = scenario.wait_for("the tolerating claim's allocation", allocated, 60)
        assert (result["pool"], result["device"]) == (node_a, "channel-0")
        raw.delete(scenario.PODS, "admin", ns)
    finally:
        rerender_driver_root(root, fabric_state="completed")
    scenario.wait_for(f"{node_a}'s taint to go", lambda: scenario.Seen(
        taints_of(node_a) == [], None, str(taints_of(node_a))), 30)
    delete_all(world, ns, ["w", "admin"], "taint", uid)


def test_pods_of_one_domain_share_a_nodes_channel_and_other_domains_go_elsewhere(
        world: SimWorld, e2e_namespace: str) -> None:
    """Four pods of one domain on one node (a tray's four GPUs) each get the node's channel;
    the node's ResourceSlice then names that domain on its shared channel, so a pod of another
    domain is placed on the clique's other node, and one pinned to the held node waits in
    scheduling (never in ContainerCreating against the held node)."""
    check_pods_of_one_domain_share_a_nodes_channel(world, e2e_namespace, cliques(world)[0], 150)


def check_pods_of_one_domain_share_a_nodes_channel(world: SimWorld, ns: str, clique: str, timeout: float) -> None:
    """The sequence of the test above on the two nodes of `clique`."""
    from cdriver.kube.resources import RESOURCES

    raw = world.raw
    node_a, node_b = clique_nodes(world, clique)
    uid = create_domain(world, ns, "many")
    names = [f"gpu{i}" for i in range(4)]
    for name in names:
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, "many-channel", node=node_a), ns)
    pods = scenario.wait_pods_running(raw, ns, names, timeout)
    claims = [scenario.claim_of(raw, pod) for pod in pods]
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    assert {(r["pool"], r["device"]) for r in results} == {(node_a, "channel-0")}
    assert len({r.get("shareID") for r in results} - {None}) == 4, results  # four shares of one device
    for pod in pods:
        assert is_char_device(world, ns, pod, channel_device_path(0)), f"{pod['metadata']['name']} has no channel"

    def channel_of_node_a() -> dict:
        (slice_a,) = [s for s in raw.list(RESOURCES["resourceslices"])["items"]
                      if s["spec"].get("nodeName") == node_a and s["spec"]["driver"] == constants.DRIVER_NAME]
        return next(d for d in slice_a["spec"]["devices"] if d["name"] == "channel-0")

    wait_for(f"{node_a}'s channel to name domain {uid}", lambda: channel_of_node_a()["attributes"].get(
        constants.ATTRIBUTE_COMPUTE_DOMAIN) == {"string": uid}, 30)
    assert channel_of_node_a().get("allowMultipleAllocations") is True

    other = create_domain(world, ns, "other")
    raw.create(scenario.PODS, scenario.workload_pod("o-free", ns, "other-channel", clique=clique), ns)
    raw.create(scenario.PODS, scenario.workload_pod("o-held", ns, "other-channel", node=node_a), ns)
    (placed,) = scenario.wait_pods_running(raw, ns, ["o-free"], timeout)
    assert placed["spec"]["nodeName"] == node_b
    assert is_char_device(world, ns, placed, channel_device_path(0))
    held = raw.get(scenario.PODS, "o-held", ns)
    assert not held["spec"].get("nodeName"), "a pod of another domain was bound to the held node"
    assert any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
               for c in (held.get("status") or {}).get("conditions") or []), held.get("status")

    # three of the four leave: the last keeps its channel and its domain keeps the node
    for name in names[:3]:
        raw.delete(scenario.PODS, name, ns)
    wait_for("three pods gone", lambda: all(raw.get_or_none(scenario.PODS, n, ns) is None for n in names[:3]), 60)
    last = raw.get(scenario.PODS, names[3], ns)
    assert is_char_device(world, ns, last, channel_device_path(0))
    assert raw.get(RESOURCES["nodes"], node_a)["metadata"]["labels"].get(constants.LABEL_COMPUTE_DOMAIN) == uid
    raw.delete(scenario.PODS, "o-held", ns)
    delete_all(world, ns, ["o-free"], "other", other)
    delete_all(world, ns, names[3:], "many", uid)
