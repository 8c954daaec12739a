"""Switching a running cluster from the upstream driver to cdriver and back with `helm upgrade`.

The world installs upstream's own chart (its Go binaries, built by `make peer`) with an
upstream-style values file; workloads then hold channels that upstream's plugin prepared and
recorded in its checkpoint. The same release is upgraded to cdriver's chart with the same values
file, and later back to upstream's chart. What a user depends on is asserted at each step: the
workloads keep running with their channel devices, the claims prepared by one driver stay
prepared under, and are unprepared by, the other, new claims work, and the checkpoint left
behind is one upstream's own code reads.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.api import constants
from cdriver.cdi.model import CDIError
from cdriver.cdi.reader import CDIRegistry
from cdriver.checkout import HACK_DIR
from cdriver.checkpoint import CheckpointStore
from cdriver.kube.errors import ApiError
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import channel_device_path
from cdriver.roles.kubelet_plugin.cdi_edits import base_device_id
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from cdriver.sim.world import scenario
from cdriver.sim.world.upstream_driver import EXIT_NO_TARBALL, PeerSourceMissing, find_source_tarball
from cdriver.sim.world.world import (
    DRIVER_CDRIVER,
    DRIVER_NAMESPACE,
    DRIVER_UPSTREAM,
    RELEASE,
    SimNode,
    SimWorld,
    component_of,
    driver_of,
)
from tests.support.upstream_inputs import skip_without_upstream
from tests.support.world import assert_kept_running, create_domain, is_char_device, start_world

READER_BUILD = HACK_DIR / "peer-checkpoint" / "build.sh"

#: what a ComputeDomain-only user of the upstream driver keeps in their values file
UPSTREAM_VALUES = """\
nvidiaDriverRoot: /run/nvidia/driver
logVerbosity: "5"
resources:
  gpus:
    enabled: false
  computeDomains:
    enabled: true
    imex:
      mode: driverManaged
      isolation: domain
featureGates:
  ComputeDomainCliques: true
  DRAListTypeAttributes: false
  MPSSupport: false
controller:
  leaderElection:
    enabled: true
    leaseDuration: "15s"
    renewDeadline: "10s"
    retryPeriod: "2s"
  containers:
    computeDomain:
      env:
      - name: SITE_NOTE
        value: controller
kubeletPlugin:
  podAnnotations:
    example.com/owner: team-a
  containers:
    computeDomains:
      env:
      - name: SITE_NOTE
        value: plugin
      resources:
        requests:
          cpu: 10m
      gpuCliqueLabelEnabled: false
"""

DEPLOYMENTS, LEASES = RESOURCES["deployments"], RESOURCES["leases"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    try:
        find_source_tarball()
    except PeerSourceMissing as exc:  # an input this repository cannot carry (upstream's code)
        skip_without_upstream(f"the upstream driver cannot be built here: {exc}")
    values = tmp_path_factory.mktemp("switch") / "upstream-values.yaml"
    values.write_text(UPSTREAM_VALUES)
    yield from start_world({"nodes": 3, "driver": DRIVER_UPSTREAM, "values_file": values}, "sw")


@pytest.fixture(scope="module")
def upstream_reader() -> Path:
    out = subprocess.run(["bash", str(READER_BUILD)], capture_output=True, text=True, timeout=1500)
    if out.returncode == EXIT_NO_TARBALL:
        skip_without_upstream(f"upstream's checkpoint reader cannot be built here: {out.stderr.strip()[-500:]}")
    assert out.returncode == 0, f"building upstream's checkpoint reader failed ({READER_BUILD}):\n{out.stderr[-3000:]}"
    return Path(out.stdout.strip().splitlines()[-1])


# -- evidence on the nodes ------------------------------------------------------------------
def checkpoint_path(node: SimNode) -> Path:
    return node.agent.layout.plugins_dir / constants.DRIVER_NAME / CHECKPOINT_FILE_NAME


def checkpoint_states(node: SimNode) -> dict[str, str]:
    """claim UID -> state, as the node's checkpoint records them."""
    return {uid: rec.state for uid, rec in CheckpointStore(checkpoint_path(node), boot_id="").read().claims.items()}


def cdi_specs(node: SimNode, claim_uid: str) -> list[str]:
    return sorted(p.name for p in node.cdi_dir.glob(f"*{claim_uid}*"))


def assert_runtime_resolves(world: SimWorld, ns: str, pods: dict[str, dict]) -> None:
    """Every node's CDI specs define each device once: a runtime refuses a device that two spec
    files define (a restarted container would fail), so the drivers must share file names."""
    for node in world.nodes:
        want = [base_device_id()] + [cdi_id for name, pod in pods.items() if pod["spec"]["nodeName"] == node.name
                                     for cdi_id in claim_cdi_ids(world, ns, name)]
        try:
            CDIRegistry([node.cdi_dir]).resolve(want)
        except CDIError as exc:
            pytest.fail(f"{node.name}: {exc} (spec files: {sorted(p.name for p in node.cdi_dir.iterdir())})")


def claim_cdi_ids(world: SimWorld, ns: str, pod_name: str) -> list[str]:
    claim = scenario.claim_of(world.raw, world.raw.get(scenario.PODS, pod_name, ns))
    return [f"{constants.CDI_KIND_CLAIM}={claim['metadata']['uid']}-{r['device']}" for r in scenario.allocation(claim)]


def upstream_view(reader: Path, checkpoint: Path) -> dict:
    out = subprocess.run([str(reader), str(checkpoint)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"upstream cannot read the checkpoint {checkpoint}: {out.stderr}"
    return json.loads(out.stdout)


# -- the driver -----------------------------------------------------------------------------
def driver_pods(world: SimWorld) -> list[dict]:
    """The controller and kubelet-plugin pods of either chart."""
    pods = world.raw.list(scenario.PODS, namespace=DRIVER_NAMESPACE)["items"]
    return [p for p in pods if driver_of(p)]


def switch_to(world: SimWorld, driver: str) -> list[dict]:
    """`helm upgrade` the release to `driver`'s chart; wait until only its pods run, all Ready."""
    started = time.monotonic()
    out = world.helm_cmd("upgrade", RELEASE, *world.chart_args(driver), "--namespace", DRIVER_NAMESPACE)
    assert out.returncode == 0, f"helm upgrade to {driver} failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}"
    want = sorted(["controller"] + ["kubelet-plugin"] * len(world.nodes))

    def switched() -> scenario.Seen:
        pods = driver_pods(world)
        seen = sorted((component_of(p) if driver_of(p) == driver else f"{driver_of(p)}'s",
                       p["spec"].get("nodeName", ""), scenario.pod_ready(p), p["metadata"]["name"]) for p in pods)
        done = sorted(s[0] for s in seen) == want and all(s[2] for s in seen)
        return scenario.Seen(done, pods, json.dumps(seen))

    pods = scenario.wait_for(f"only {driver}'s controller and plugins, all Ready", switched, 120)

    def registered() -> scenario.Seen:
        # kubelet talks to the newest registration of the driver's name
        late = [n.name for n in world.nodes if not n.agent.plugins.usable(constants.DRIVER_NAME) or max(
            (p.registered_at for p in n.agent.plugins.plugins() if p.driver == constants.DRIVER_NAME),
            default=0.0) < started]
        return scenario.Seen(not late, None, f"not registered anew on {late}")

    scenario.wait_for(f"{driver}'s plugin registered with every node's kubelet", registered, 60)
    return pods


def assert_upstream_names(world: SimWorld, pods: list[dict], deployment_uid: str) -> None:
    """What upstream's users select by is there, whichever chart runs: the component label (the
    pods are the switch's, found by it), the container names, the Deployment (the same object:
    both charts name it alike with the same selector, so the upgrade updated it in place) and the
    leader Lease, held by the running controller."""
    by_component = {component_of(p): p for p in pods}
    selected = world.raw.list(scenario.PODS, namespace=DRIVER_NAMESPACE,
                              label_selector=f"{constants.LABEL_COMPONENT}=controller")["items"]
    assert [p["metadata"]["name"] for p in selected if not p["metadata"].get("deletionTimestamp")] == [
        by_component["controller"]["metadata"]["name"]]
    assert [c["name"] for c in by_component["controller"]["spec"]["containers"]] == [constants.CONTAINER_CONTROLLER]
    assert [c["name"] for c in by_component["kubelet-plugin"]["spec"]["containers"]] == [
        constants.CONTAINER_KUBELET_PLUGIN]
    deployment = world.raw.get(DEPLOYMENTS, constants.CONTROLLER_DEPLOYMENT, DRIVER_NAMESPACE)
    assert deployment["metadata"]["uid"] == deployment_uid, "the Deployment was replaced, not updated"
    assert world.raw.get(scenario.DAEMONSETS, constants.KUBELET_PLUGIN_DAEMONSET, DRIVER_NAMESPACE)

    def held() -> scenario.Seen:
        lease = world.raw.get_or_none(LEASES, constants.CONTROLLER_DEPLOYMENT, DRIVER_NAMESPACE) or {}
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        return scenario.Seen(holder.startswith(by_component["controller"]["metadata"]["name"] + "-"), None, holder)

    scenario.wait_for("the running controller holding upstream's Lease", held, 60)


def plugin_log(world: SimWorld, pod: dict) -> str:
    node = world.node(pod["spec"]["nodeName"])
    container = pod["spec"]["containers"][0]["name"]
    return Path(node.agent.container_log(DRIVER_NAMESPACE, pod["metadata"]["name"], container)).read_text(
        errors="replace")


# -- workloads ------------------------------------------------------------------------------
def start_workloads(world: SimWorld, ns: str, placed: dict[str, str], domain: str = "cd") -> dict[str, dict]:
    """Pods (name -> node) holding a channel of the ComputeDomain `domain`; name -> running pod."""
    for name, node in placed.items():
        world.raw.create(scenario.PODS, scenario.workload_pod(name, ns, f"{domain}-channel", node=node), ns)
    pods = scenario.wait_pods_running(world.raw, ns, list(placed), 150)
    return {p["metadata"]["name"]: p for p in pods}


def claim_uid(world: SimWorld, pod: dict) -> str:
    return scenario.claim_of(world.raw, pod)["metadata"]["uid"]


def delete_workload(world: SimWorld, ns: str, name: str, node: SimNode, uid: str) -> None:
    """Delete a workload pod; wait until its claim is unprepared on its node (CDI spec, checkpoint)."""
    world.raw.delete(scenario.PODS, name, ns)

    def unprepared() -> scenario.Seen:
        left = {"pod": bool(world.raw.get_or_none(scenario.PODS, name, ns)), "cdi": cdi_specs(node, uid),
                "checkpoint": checkpoint_states(node).get(uid, "")}
        return scenario.Seen(not any(left.values()), left, json.dumps(left))

    scenario.wait_for(f"{name}'s claim {uid} unprepared on {node.name}", unprepared, 90)


@pytest.mark.timeout(900)
def test_helm_upgrade_to_cdriver_and_back_keeps_every_claim(world: SimWorld, upstream_reader: Path,
                                                            e2e_namespace: str, tmp_path: Path) -> None:
    ns, (first, second, third) = e2e_namespace, world.nodes
    deployment_uid = world.raw.get(DEPLOYMENTS, constants.CONTROLLER_DEPLOYMENT, DRIVER_NAMESPACE)["metadata"]["uid"]
    create_domain(world, ns, "cd")
    old = start_workloads(world, ns, {"old-a": first.name, "old-b": second.name})
    old_uids = {name: claim_uid(world, pod) for name, pod in old.items()}
    assert checkpoint_states(first)[old_uids["old-a"]] == "PrepareCompleted"  # upstream's plugin prepared it

    # upstream -> cdriver, same release, same values file
    pods = switch_to(world, DRIVER_CDRIVER)
    assert all(p["metadata"].get("annotations", {}).get("example.com/owner") == "team-a"
               for p in pods if component_of(p) == "kubelet-plugin")
    assert_upstream_names(world, pods, deployment_uid)
    assert_kept_running(world, ns, old)
    assert_runtime_resolves(world, ns, old)
    for node, name in ((first, "old-a"), (second, "old-b")):
        assert checkpoint_states(node).get(old_uids[name]) == "PrepareCompleted", f"{node.name} lost {name}'s claim"
        assert cdi_specs(node, old_uids[name]), f"{name}'s CDI spec went"
    # an old pod ends: cdriver unprepares the claim upstream prepared; a new pod takes the channel
    delete_workload(world, ns, "old-b", second, old_uids["old-b"])
    new = start_workloads(world, ns, {"new-b": second.name})
    new_uid = claim_uid(world, new["new-b"])
    assert is_char_device(world, ns, new["new-b"], channel_device_path(0))
    assert checkpoint_states(second)[new_uid] == "PrepareCompleted"
    # a domain created under cdriver: its IMEX daemons are cdriver's
    late_uid = create_domain(world, ns, "late")
    late = start_workloads(world, ns, {"late": third.name}, "late")
    # what cdriver's plugin keeps is what upstream's own checkpoint code reads
    for node, name, uid in ((first, "old-a", old_uids["old-a"]), (second, "new-b", new_uid)):
        copy = tmp_path / f"{node.name}-{CHECKPOINT_FILE_NAME}"
        shutil.copyfile(checkpoint_path(node), copy)
        assert upstream_view(upstream_reader, copy)["claims"][uid] == {
            "state": "PrepareCompleted", "name": scenario.claim_of(world.raw, {**old, **new}[name])["metadata"]["name"],
            "namespace": ns, "devices": [f"{node.name}/{constants.DEVICE_CHANNEL_0}"]}

    # cdriver -> upstream: its plugin starts on that checkpoint and keeps every claim
    pods = switch_to(world, DRIVER_UPSTREAM)
    assert_upstream_names(world, pods, deployment_uid)
    for pod in pods:
        if component_of(pod) == "kubelet-plugin":
            assert "checksum" not in plugin_log(world, pod).lower(), plugin_log(world, pod)[-3000:]
    assert_kept_running(world, ns, {"old-a": old["old-a"], **new, **late})
    assert_runtime_resolves(world, ns, {"old-a": old["old-a"], **new, **late})
    assert checkpoint_states(first).get(old_uids["old-a"]) == "PrepareCompleted"
    # upstream unprepares the claim cdriver prepared
    delete_workload(world, ns, "new-b", second, new_uid)
    assert upstream_view(upstream_reader, checkpoint_path(first))["claims"][old_uids["old-a"]]["state"] == \
        "PrepareCompleted"
    # cdriver's daemon serves its domain under upstream's plugin: its pod, recreated, gets its
    # claim prepared by upstream's plugin, and a new workload of that domain starts
    delete_workload(world, ns, "late", third, claim_uid(world, late["late"]))
    before = scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, late_uid)
    for daemon in before:
        try:
            world.raw.delete(scenario.PODS, daemon["metadata"]["name"], DRIVER_NAMESPACE)
        except ApiError as exc:  # gone with the node's domain label meanwhile
            if not exc.not_found:
                raise
    again = start_workloads(world, ns, {"late-again": third.name}, "late")
    assert is_char_device(world, ns, again["late-again"], channel_device_path(0))

    def new_daemon_ready() -> scenario.Seen:
        seen = [(p["metadata"]["name"], scenario.pod_phase(p), scenario.pod_ready(p))
                for p in scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, late_uid)
                if p["metadata"]["uid"] not in {d["metadata"]["uid"] for d in before}]
        return scenario.Seen(bool(seen) and all(ready for _, _, ready in seen), None, json.dumps(seen))

    scenario.wait_for(f"a new IMEX daemon pod of domain {late_uid} Ready on {third.name}", new_daemon_ready, 90)
