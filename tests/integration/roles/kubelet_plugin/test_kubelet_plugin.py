"""`cdriver kubelet-plugin` against the real control plane, with the test acting as kubelet.

The plugin runs as its own process against a simulated node: a registered Node object, a
simulated driver root (mock NVML, proc/devices, real channel character devices) and private
kubelet/CDI directories. The test talks to it the way kubelet does: GetInfo on the
registration socket, NodePrepareResources / NodeUnprepareResources on the DRA socket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cdriver.api import constants
from cdriver.api.constants import (
    CDI_KIND_CLAIM,
    CDI_KIND_DEVICE,
    CDI_VENDOR,
    DRIVER_NAME,
    ENV_CD_NAME,
    ENV_CD_NAMESPACE,
    ENV_CD_UUID,
    ENV_CLIQUE_ID,
    LABEL_COMPUTE_DOMAIN,
    LABEL_NODE_CLIQUE,
    clique_object_name,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.api.types import ComputeDomain
from cdriver.cdi.reader import CDIRegistry
from cdriver.checkout import TEMPLATES_DIR
from cdriver.dra.client import DRAError
from cdriver.dra.gen.grpc_health.v1 import health_pb2, health_pb2_grpc
from cdriver.imex.config import (
    IMEX_CONFIG_TEMPLATE_NAME,
    IMEX_CTL_BINARY,
    IMEX_DAEMON_BINARY,
    IMEXD_TEMPLATE_NAME,
    domain_template,
)
from cdriver.imex.names import dns_name
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import IMEX_CHANNEL_COUNT
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from tests.support.health_stream import HealthStream
from tests.support.kubelet import Kubelet
from tests.support.objects import (
    allocated_claim,
    channel_params,
    daemon_params,
    make_cd,
    node_label,
    our_slices,
    reserve_for_daemon_pod,
    set_clique_ready,
    uid_of,
)
from tests.support.plugin_process import CHANNELS, CLUSTER_UUID, PREPARE_TIMEOUT, PluginProcess, SimNode, sim_node
from tests.support.waiting import wait_for

CDS, CLIQUES = COMPUTE_DOMAINS, COMPUTE_DOMAIN_CLIQUES
CLAIMS, SLICES = RESOURCES["resourceclaims"], RESOURCES["resourceslices"]
NODES, PODS, EVENTS = RESOURCES["nodes"], RESOURCES["pods"], RESOURCES["events"]
TEMPLATES, CLASSES = RESOURCES["resourceclaimtemplates"], RESOURCES["deviceclasses"]


# --- tests --------------------------------------------------------------------------------


def test_registration_health_and_resource_slice(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                                node: SimNode) -> None:
    plugin = plugin_factory(node, extra_args=["--gpu-clique-label-enabled"])
    info = Kubelet(plugin).get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER_NAME
    assert info.endpoint == str(plugin.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                            "v1alpha1.DRAResourceHealth"]
    assert oct(plugin.reg_socket.stat().st_mode & 0o777) == oct(0o600)

    with grpc.insecure_channel(f"127.0.0.1:{plugin.health_port}") as ch:
        status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10)
    assert status.status == health_pb2.HealthCheckResponse.SERVING

    slices = wait_for("the node's ResourceSlice", lambda: our_slices(raw, node), 20)
    assert len(slices) == 1
    spec = slices[0]["spec"]
    assert spec["pool"]["name"] == node.name and spec["pool"]["resourceSliceCount"] == 1
    assert spec["devices"] == [  # the channel goes to several claims of the domain holding the node
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
         "allowMultipleAllocations": True},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    owner = slices[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", node.name, uid_of(raw.get(NODES, node.name)))

    # Kubelet wipes a node's slices when it starts: the plugin publishes again.
    raw.delete_collection(SLICES, field_selector=f"spec.nodeName={node.name}")
    republished = wait_for("the ResourceSlice to be published again",
                           lambda: [s for s in our_slices(raw, node) if uid_of(s) != uid_of(slices[0])], 20)
    assert republished[0]["spec"]["devices"] == spec["devices"]

    # A stale slice of this driver for this node is removed.
    stale = raw.create(SLICES, {"metadata": {"name": f"stale-{node.name}"}, "spec": {
        "driver": DRIVER_NAME, "nodeName": node.name,
        "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "channel-7", "attributes": {"type": {"string": "channel"}, "id": {"int": 7}}}]}})
    wait_for("the stale slice to go", lambda: all(uid_of(s) != uid_of(stale) for s in our_slices(raw, node)), 20)
    assert [s["spec"]["devices"] for s in our_slices(raw, node)] == [spec["devices"]]

    # The plugin owns nvidia.com/gpu.clique when told to; it goes away with the plugin.
    labels = raw.get(NODES, node.name)["metadata"]["labels"]
    assert labels[LABEL_NODE_CLIQUE] == f"{CLUSTER_UUID}.3"
    assert plugin.stop() == 0
    assert not plugin.reg_socket.exists() and not plugin.dra_socket.exists()
    assert LABEL_NODE_CLIQUE not in raw.get(NODES, node.name)["metadata"]["labels"]
    assert len(our_slices(raw, node)) == 1, "slices stay when the plugin stops (kubelet owns their removal)"


def test_scheduler_allocates_channel_from_generated_template(plugin: PluginProcess, raw: RawClient,
                                                             namespace: str, node: SimNode,
                                                             device_classes: None) -> None:
    from cdriver.roles.controller.desired import workload_claim_template
    from cdriver.roles.controller.settings import ControllerSettings

    wait_for("the node's ResourceSlice", lambda: our_slices(raw, node), 20)
    cd = make_cd(raw, namespace)
    template = workload_claim_template(ComputeDomain.from_dict(cd), ControllerSettings())
    template["metadata"].pop("finalizers", None)
    raw.create(TEMPLATES, template, namespace)
    pod = raw.create(PODS, {
        "metadata": {"name": "workload", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template["metadata"]["name"]}],
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "imex"}]}}],
        },
    }, namespace)

    def claim_name() -> str | None:
        statuses = (raw.get(PODS, pod["metadata"]["name"], namespace).get("status") or {}).get(
            "resourceClaimStatuses") or []
        return statuses[0].get("resourceClaimName") if statuses else None

    name = wait_for("the claim generated from the workload template", claim_name, 30)

    def allocation() -> dict | None:
        return (raw.get(CLAIMS, name, namespace).get("status") or {}).get("allocation")

    alloc = wait_for("the scheduler to allocate the claim", allocation, 30)
    (result,) = alloc["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER_NAME, node.name, "channel-0")
    assert wait_for("binding", lambda: raw.get(PODS, "workload", namespace)["spec"].get("nodeName"), 30) == node.name

    # Kubelet prepares it: the node's daemon is not Ready yet, so a retryable error comes back.
    # (The call carries kubelet's 45 s deadline: the answer must come before it.)
    claim = raw.get(CLAIMS, name, namespace)
    first = Kubelet(plugin).prepare(claim)[uid_of(claim)]
    assert first.error and not first.devices
    assert "is not ready on node" in first.error
    assert clique_object_name(uid_of(cd), f"{CLUSTER_UUID}.3") in first.error
    assert node_label(raw, node) == uid_of(cd)
    assert plugin.checkpoint()[uid_of(claim)].state == "PrepareStarted"


def metric(plugin: PluginProcess, port: int, name: str, **labels: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name}{labels} not exported")


def test_waiting_prepare_answers_when_its_domain_is_deleted(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """A Prepare waiting for readiness answers as soon as its ComputeDomain goes away (kubelet
    can then stop the pod being deleted with it) instead of waiting out its deadline."""
    import threading

    plugin = plugin_factory(node)
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    answer: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: answer.update(resp=Kubelet(plugin).prepare(claim)))
    waiter.start()
    wait_for("the node label (Prepare is waiting)", lambda: node_label(raw, node) == uid_of(cd), 10)
    raw.delete(CDS, cd["metadata"]["name"], namespace)
    waiter.join(PREPARE_TIMEOUT + 5)
    res = answer["resp"][uid_of(claim)]
    assert not res.devices
    assert f"ComputeDomain {namespace}/{cd['metadata']['name']} (UID {uid_of(cd)}) is being deleted" in res.error


def test_a_domain_without_cdriver_s_label_is_found_beside_its_claim_and_its_deletion_still_seen(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """A domain no cdriver controller labelled yet (upstream's controller during a switch): the
    plugin finds it in its claim's namespace and watches it by name, so a waiting Prepare still
    answers as soon as the domain is deleted."""
    import threading

    plugin = plugin_factory(node)
    cd = make_cd(raw, namespace, labelled=False)
    assert constants.LABEL_DOMAIN_UID not in (cd["metadata"].get("labels") or {})
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    answer: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: answer.update(resp=Kubelet(plugin).prepare(claim)))
    waiter.start()
    wait_for("the node label (Prepare found the domain and is waiting)", lambda: node_label(raw, node) == uid_of(cd),
             10)
    raw.delete(CDS, cd["metadata"]["name"], namespace)
    waiter.join(PREPARE_TIMEOUT + 5)
    res = answer["resp"][uid_of(claim)]
    assert not res.devices
    assert f"ComputeDomain {namespace}/{cd['metadata']['name']} (UID {uid_of(cd)}) is being deleted" in res.error


def test_ready_clique_wakes_waiting_prepare_and_unprepare_cleans_up(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    from cdriver.sim.controlplane.cluster import free_port

    port = free_port()
    plugin = plugin_factory(node, extra_args=["--http-endpoint", f"127.0.0.1:{port}"])
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    kubelet = Kubelet(plugin)

    import threading

    answer: dict[str, Any] = {}

    def call() -> None:
        answer["resp"] = kubelet.prepare(claim)
        answer["at"] = time.monotonic()

    waiter = threading.Thread(target=call)
    waiter.start()
    wait_for("the node label (Prepare is waiting)", lambda: node_label(raw, node) == uid_of(cd), 10)
    wait_for("the plugin to count the waiting Prepare as in flight",
             lambda: metric(plugin, port, "nvidia_dra_requests_inflight", operation="prepare") == 1, 10)
    assert waiter.is_alive(), "Prepare must wait for readiness, not fail at once"
    marked = time.monotonic()
    set_clique_ready(raw, driver_ns, cd, node, status="Ready")
    waiter.join(PREPARE_TIMEOUT + 5)
    res = answer["resp"][uid_of(claim)]
    assert res.error == ""
    print(f"\nreadiness-to-success latency: {(answer['at'] - marked) * 1000:.1f} ms")

    expected_id = f"{CDI_KIND_CLAIM}={uid_of(claim)}-channel-0"
    (dev,) = res.devices
    assert (dev.pool_name, dev.device_name, list(dev.request_names)) == (node.name, "channel-0", ["channel"])
    assert list(dev.cdi_device_ids) == [expected_id]
    spec_path = plugin.cdi_root / f"{CDI_VENDOR}-claim_{uid_of(claim)}.yaml"
    spec = json.loads(spec_path.read_text())
    assert spec["kind"] == CDI_KIND_CLAIM
    assert spec["devices"] == [{"name": f"{uid_of(claim)}-channel-0", "containerEdits": {"deviceNodes": [{
        "path": "/dev/nvidia-caps-imex-channels/channel0",
        "hostPath": f"{node.root.root}/dev/nvidia-caps-imex-channels/channel0",
        "type": "c", "major": node.root.channel_major, "minor": 0, "fileMode": 0o666}]}}]
    # A container runtime resolves the returned ID against the CDI dir.
    edits = CDIRegistry([str(plugin.cdi_root)]).resolve(list(dev.cdi_device_ids))
    assert [n.path for n in edits.device_nodes] == ["/dev/nvidia-caps-imex-channels/channel0"]
    rec = plugin.checkpoint()[uid_of(claim)]
    assert rec.state == "PrepareCompleted" and rec.domain_id == uid_of(cd)

    # Idempotent: the same answer again, nothing new written.
    again = kubelet.prepare(claim)[uid_of(claim)]
    assert list(again.devices[0].cdi_device_ids) == [expected_id]
    assert metric(plugin, port, "nvidia_dra_prepared_devices", device_type="channel") == 1
    assert metric(plugin, port, "nvidia_dra_requests_total", operation="prepare") == 2

    assert kubelet.unprepare(claim) == {uid_of(claim): ""}
    assert not spec_path.exists()
    assert plugin.claim_specs() == []
    assert node_label(raw, node) is None
    assert plugin.checkpoint() == {}
    assert metric(plugin, port, "nvidia_dra_prepared_devices", device_type="channel") == 0
    # Unknown UID: a no-op success.
    assert kubelet.unprepare(claim) == {uid_of(claim): ""}


def test_metrics_follow_a_claim_that_waits_for_its_daemon(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """Scraped from the plugin's endpoint: a Prepare that fails waiting for the node's daemon is
    counted with its reason and makes the claim wait; a successful one clears it; the node
    label, the registration and the slice are seen too."""
    from cdriver.dra.client import notify_registration
    from cdriver.sim.controlplane.cluster import free_port

    port = free_port()
    plugin = plugin_factory(node, extra_args=["--http-endpoint", f"127.0.0.1:{port}"])
    assert metric(plugin, port, "cdriver_kubelet_plugin_registered") == 0
    assert notify_registration(plugin.reg_socket, True, "", timeout=5) == ""
    assert metric(plugin, port, "cdriver_kubelet_plugin_registered") == 1
    wait_for("the slice to count as published",
             lambda: metric(plugin, port, "cdriver_kubelet_plugin_resourceslice_published") == 1, 20)
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    kubelet = Kubelet(plugin)
    first = kubelet.prepare(claim)[uid_of(claim)]
    assert "is not ready on node" in first.error
    waiting = dict(kind="channel", reason="waiting_for_daemon")
    assert metric(plugin, port, "cdriver_kubelet_plugin_claim_operations_total", operation="prepare",
                  outcome="retryable", **waiting) == 1
    assert metric(plugin, port, "cdriver_kubelet_plugin_claims_waiting", **waiting) == 1
    assert metric(plugin, port, "cdriver_kubelet_plugin_oldest_waiting_claim_seconds", kind="channel") > 0
    assert metric(plugin, port, "cdriver_kubelet_plugin_readiness_waits", kind="channel") == 0
    assert metric(plugin, port, "cdriver_kubelet_plugin_node_label_changes_total", action="applied") == 1

    set_clique_ready(raw, driver_ns, cd, node, status="Ready")
    assert kubelet.prepare(claim)[uid_of(claim)].error == ""
    assert metric(plugin, port, "cdriver_kubelet_plugin_claims_waiting", **waiting) == 0
    assert metric(plugin, port, "cdriver_kubelet_plugin_oldest_waiting_claim_seconds", kind="channel") == 0
    assert metric(plugin, port, "cdriver_kubelet_plugin_claim_operations_total", operation="prepare",
                  kind="channel", outcome="ok", reason="none") == 1
    assert metric(plugin, port, "cdriver_kubelet_plugin_domain_labels_missing") == 0
    raw.patch(NODES, node.name, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: None}}})  # by hand
    wait_for("the missing label to be seen",
             lambda: metric(plugin, port, "cdriver_kubelet_plugin_domain_labels_missing") == 1, 10)
    assert metric(plugin, port, "cdriver_api_client_requests_total", verb="patch", code="200") >= 1
    assert metric(plugin, port, "cdriver_kubelet_plugin_api_requests_total", verb="patch") >= 1
    assert kubelet.unprepare(claim) == {uid_of(claim): ""}
    assert metric(plugin, port, "cdriver_kubelet_plugin_domain_labels_missing") == 0


def test_all_mode_injects_every_channel(plugin: PluginProcess, raw: RawClient, namespace: str, node: SimNode,
                                        driver_ns: str) -> None:
    cd = make_cd(raw, namespace, mode="All")
    set_clique_ready(raw, driver_ns, cd, node)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd, mode="All"))
    kubelet = Kubelet(plugin)
    res = kubelet.prepare(claim)[uid_of(claim)]
    assert res.error == ""
    assert list(res.devices[0].cdi_device_ids) == [f"{CDI_KIND_CLAIM}={uid_of(claim)}-channel-0"]
    edits = CDIRegistry([str(plugin.cdi_root)]).resolve(list(res.devices[0].cdi_device_ids))
    # Every channel the driver supports, as upstream injects them, not only the nodes present.
    assert sorted((n.path, n.minor) for n in edits.device_nodes) == sorted(
        (f"/dev/nvidia-caps-imex-channels/channel{i}", i) for i in range(IMEX_CHANNEL_COUNT))
    assert IMEX_CHANNEL_COUNT == 2048 > CHANNELS
    assert kubelet.unprepare(claim) == {uid_of(claim): ""}


def test_cross_namespace_claim_is_rejected(plugin: PluginProcess, raw: RawClient, namespace: str, node: SimNode,
                                           cluster: Any) -> None:
    cd = make_cd(raw, namespace)
    other = f"other-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(other)
    try:
        claim = allocated_claim(raw, other, node.name, channel_params(cd))
        res = Kubelet(plugin).prepare(claim)[uid_of(claim)]
        assert f"namespace '{other}' is different than the ComputeDomain's namespace '{namespace}'" in res.error
        assert node_label(raw, node) is None, "a rejected claim must not label the node"
        assert uid_of(claim) not in plugin.checkpoint()
    finally:
        raw.delete(RESOURCES["namespaces"], other)


def test_bad_opaque_config_is_rejected(plugin: PluginProcess, raw: RawClient, namespace: str,
                                       node: SimNode) -> None:
    cd = make_cd(raw, namespace)
    params = {**channel_params(cd), "allocationMod": "All"}
    claim = allocated_claim(raw, namespace, node.name, params)
    res = Kubelet(plugin).prepare(claim)[uid_of(claim)]
    assert "error decoding config parameters" in res.error and "allocationMod" in res.error
    assert res.error.startswith(f"error preparing devices for claim '{namespace}/{claim['metadata']['name']}:")
    assert 'strict decoding error: unknown field "allocationMod"' in res.error
    assert plugin.checkpoint() == {}


def test_channel_owned_by_another_domains_claim(plugin: PluginProcess, raw: RawClient, namespace: str, node: SimNode,
                                                driver_ns: str) -> None:
    """Claims of one domain share the node's channel, each with its own CDI spec; a claim of
    another domain is refused while they hold it, and the node's label goes with the last."""
    cd, other = make_cd(raw, namespace), make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    first = allocated_claim(raw, namespace, node.name, channel_params(cd))
    second = allocated_claim(raw, namespace, node.name, channel_params(cd))
    foreign = allocated_claim(raw, namespace, node.name, channel_params(other))
    kubelet = Kubelet(plugin)
    assert kubelet.prepare(first)[uid_of(first)].error == ""
    assert kubelet.prepare(second)[uid_of(second)].error == ""
    res = kubelet.prepare(foreign)[uid_of(foreign)]
    assert f"channel 0 already allocated by claim {uid_of(first)} of another ComputeDomain ({uid_of(cd)}" \
        in res.error or f"by claim {uid_of(second)} of another ComputeDomain ({uid_of(cd)}" in res.error, res.error
    assert sorted(p.name for p in plugin.claim_specs()) == sorted(
        f"{CDI_VENDOR}-claim_{uid_of(c)}.yaml" for c in (first, second))
    assert kubelet.unprepare(foreign) == {uid_of(foreign): ""}
    assert kubelet.unprepare(second) == {uid_of(second): ""}
    assert node_label(raw, node) == uid_of(cd)
    assert kubelet.unprepare(first) == {uid_of(first): ""}
    assert node_label(raw, node) is None


def test_node_of_another_domain_is_refused(plugin: PluginProcess, raw: RawClient, namespace: str,
                                           node: SimNode) -> None:
    busy = make_cd(raw, namespace)
    raw.patch(NODES, node.name, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: uid_of(busy)}}})
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    res = Kubelet(plugin).prepare(claim)[uid_of(claim)]
    assert f"already belongs to ComputeDomain {uid_of(busy)}" in res.error
    assert node_label(raw, node) == uid_of(busy)


def test_daemon_claim_is_prepared_only_for_the_domains_own_daemon_pod(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """A hand-written daemon claim naming another namespace's domain gets nothing: no CDI spec,
    no checkpoint record, no domain directory; the domain's own daemon claim still is prepared."""
    plugin = plugin_factory(node)
    kubelet = Kubelet(plugin)
    victim = make_cd(raw, namespace)
    attacker_ns = f"{namespace}-x"
    raw.create(RESOURCES["namespaces"], {"metadata": {"name": attacker_ns}})
    try:
        stolen = allocated_claim(raw, attacker_ns, node.name, daemon_params(victim), device="daemon-0",
                                 request="daemon")
        stolen = reserve_for_daemon_pod(raw, stolen, victim)
        res = kubelet.prepare(stolen)[uid_of(stolen)]
        assert f"is accepted only in the driver namespace {driver_ns!r}, not in {attacker_ns!r}" in res.error
        assert constants.DEVICE_CLASS_DEFAULT_CHANNEL in res.error
    finally:
        raw.delete(RESOURCES["namespaces"], attacker_ns)
    # In the driver namespace, but for a pod of some other DaemonSet.
    foreign = allocated_claim(raw, driver_ns, node.name, daemon_params(victim), device="daemon-0", request="daemon")
    foreign = reserve_for_daemon_pod(raw, foreign, victim, owner="not-a-daemon")
    res = kubelet.prepare(foreign)[uid_of(foreign)]
    assert "is controlled by DaemonSet not-a-daemon" in res.error
    assert f"pods of DaemonSet {driver_ns}/{constants.daemon_object_name(uid_of(victim))}" in res.error
    assert plugin.claim_specs() == [] and plugin.checkpoint() == {}
    assert not (plugin.plugin_dir / "domains" / uid_of(victim)).exists()
    own = allocated_claim(raw, driver_ns, node.name, daemon_params(victim), device="daemon-0", request="daemon")
    own = reserve_for_daemon_pod(raw, own, victim)
    res = kubelet.prepare(own)[uid_of(own)]
    assert res.error == ""
    assert f"{constants.CDI_KIND_CLAIM}={uid_of(own)}-daemon-0" in list(res.devices[0].cdi_device_ids)
    assert kubelet.unprepare(own) == {uid_of(own): ""}


def test_daemon_claim_while_channel_claim_waits(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                                namespace: str, node: SimNode, driver_ns: str) -> None:
    import threading

    plugin = plugin_factory(node, extra_args=["--cleanup-interval", "0.5s"])
    cd = make_cd(raw, namespace)
    channel = allocated_claim(raw, namespace, node.name, channel_params(cd))
    daemon = allocated_claim(raw, driver_ns, node.name, daemon_params(cd), device="daemon-0", request="daemon")
    daemon = reserve_for_daemon_pod(raw, daemon, cd)
    kubelet = Kubelet(plugin)
    waiting: dict[str, Any] = {}
    t = threading.Thread(target=lambda: waiting.update(resp=kubelet.prepare(channel)))
    t.start()
    wait_for("the channel Prepare to start waiting", lambda: node_label(raw, node) == uid_of(cd), 10)
    res = kubelet.prepare(daemon)[uid_of(daemon)]
    assert t.is_alive(), "the daemon claim must be prepared while the channel claim still waits"
    assert res.error == ""
    assert list(res.devices[0].cdi_device_ids) == [f"{CDI_KIND_DEVICE}=all",
                                                   f"{CDI_KIND_CLAIM}={uid_of(daemon)}-daemon-0"]
    domain_dir = plugin.plugin_dir / "domains" / uid_of(cd)
    # the packaged template, in the form both cdriver's and the upstream driver's daemon render
    assert (domain_dir / IMEXD_TEMPLATE_NAME).read_text() == domain_template(
        (TEMPLATES_DIR / IMEX_CONFIG_TEMPLATE_NAME).read_text())
    edits = CDIRegistry([str(plugin.cdi_root)]).resolve(list(res.devices[0].cdi_device_ids))
    env = dict(e.split("=", 1) for e in edits.env)
    assert env[ENV_CLIQUE_ID] == f"{CLUSTER_UUID}.3"
    assert (env[ENV_CD_UUID], env[ENV_CD_NAME], env[ENV_CD_NAMESPACE]) == (
        uid_of(cd), cd["metadata"]["name"], namespace)
    mounts = {m.container_path: m.host_path for m in edits.mounts}
    assert mounts.pop("/imexd") == str(domain_dir)
    # The driver's IMEX binaries are mounted from the driver root, at their usual paths.
    assert mounts == {f"/usr/bin/{name}": str(node.root.root / "usr" / "bin" / name)
                      for name in (IMEX_DAEMON_BINARY, IMEX_CTL_BINARY)}
    assert "/dev/nvidia-caps/nvidia-cap512" in {n.path for n in edits.device_nodes}
    set_clique_ready(raw, driver_ns, cd, node)
    t.join(PREPARE_TIMEOUT + 5)
    assert waiting["resp"][uid_of(channel)].error == ""
    assert kubelet.unprepare(channel, daemon) == {uid_of(channel): "", uid_of(daemon): ""}
    assert plugin.claim_specs() == [] and plugin.checkpoint() == {}
    assert domain_dir.is_dir(), "the domain directory outlives its claims while the ComputeDomain exists"
    raw.delete(CDS, cd["metadata"]["name"], namespace)
    wait_for("the sweep of the deleted ComputeDomain's directory", lambda: not domain_dir.exists(), 10)


def test_killed_between_started_and_completed(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                              namespace: str, node: SimNode, driver_ns: str) -> None:
    import threading

    plugin = plugin_factory(node, extra_args=["--prepare-timeout", "20s"])
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    kubelet = Kubelet(plugin)
    errors: list[str] = []

    def call() -> None:
        try:
            kubelet.prepare(claim, timeout=30)
        except DRAError as exc:  # the plugin dies mid-call
            errors.append(exc.code.name if exc.code else str(exc))

    t = threading.Thread(target=call)
    t.start()
    wait_for("PrepareStarted in the checkpoint", lambda: plugin.checkpoint().get(uid_of(claim)), 10)
    assert plugin.checkpoint()[uid_of(claim)].state == "PrepareStarted"
    plugin.kill()
    t.join(10)
    assert errors == ["UNAVAILABLE"]

    # A crash between writing a claim's CDI spec and recording it leaves a spec no record owns.
    orphan = plugin.cdi_root / f"{CDI_VENDOR}-claim_{uuid.uuid4()}.json"
    orphan.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": CDI_KIND_CLAIM, "devices": [
        {"name": "x-channel-0", "containerEdits": {"env": ["A=B"]}}]}))
    plugin.extra_args = []
    plugin.start()  # same directories: stale sockets are replaced, the checkpoint is kept
    assert not orphan.exists(), "a CDI spec without a checkpoint record is removed before serving"
    set_clique_ready(raw, driver_ns, cd, node)
    res = kubelet.prepare(claim)[uid_of(claim)]
    assert res.error == ""
    claims = plugin.checkpoint()
    assert list(claims) == [uid_of(claim)] and claims[uid_of(claim)].state == "PrepareCompleted"
    assert [p.name for p in plugin.claim_specs()] == [f"{CDI_VENDOR}-claim_{uid_of(claim)}.yaml"]
    assert kubelet.unprepare(claim) == {uid_of(claim): ""}
    assert plugin.claim_specs() == [] and plugin.checkpoint() == {} and node_label(raw, node) is None
    leftovers = [p.name for p in plugin.plugin_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_stale_prepare_started_is_swept_on_start(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                                 namespace: str, node: SimNode) -> None:
    plugin = plugin_factory(node)
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    res = Kubelet(plugin).prepare(claim)[uid_of(claim)]
    assert "is not ready" in res.error and plugin.checkpoint()[uid_of(claim)].state == "PrepareStarted"
    plugin.stop()
    raw.delete(CLAIMS, claim["metadata"]["name"], namespace)
    wait_for("claim deletion", lambda: raw.get_or_none(CLAIMS, claim["metadata"]["name"], namespace) is None, 10)
    plugin.start()
    wait_for("the sweep of the stale PrepareStarted claim", lambda: plugin.checkpoint() == {}, 10)
    wait_for("the node label of the stale claim to go", lambda: node_label(raw, node) is None, 10)


def test_non_fabric_node_prepares_without_devices(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                                  namespace: str) -> None:
    base = Path(f"/tmp/kpn-{uuid.uuid4().hex[:6]}")
    base.mkdir()
    sim = sim_node(raw, base, fabric=False)
    try:
        plugin = plugin_factory(sim)
        cd = make_cd(raw, namespace)
        cd["status"] = {"status": "Ready", "nodes": [{"name": sim.name, "ipAddress": "127.0.0.1", "cliqueID": "",
                                                      "index": 0, "status": "Ready"}]}
        raw.update_status(CDS, cd, namespace)
        claim = allocated_claim(raw, namespace, sim.name, channel_params(cd))
        res = Kubelet(plugin).prepare(claim)[uid_of(claim)]
        assert res.error == ""
        assert [(d.device_name, list(d.cdi_device_ids)) for d in res.devices] == [("channel-0", [])]
        assert plugin.claim_specs() == []

        def event() -> list[dict]:
            return [e for e in raw.list(EVENTS, namespace)["items"]
                    if e["involvedObject"].get("uid") == uid_of(claim) and e["reason"] == "IMEXChannelNotInjected"]

        (ev,) = wait_for("the not-fabric-attached Event", event, 10)
        assert "not attached to a multi-node NVLink fabric" in ev["message"]
        assert "without IMEX channel devices" in plugin.log_path.read_text()
        assert Kubelet(plugin).unprepare(claim) == {uid_of(claim): ""}
    finally:
        sim.registered.delete()
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_host_managed_mode(plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str,
                           node: SimNode, driver_ns: str) -> None:
    from cdriver.sim.controlplane.cluster import free_port
    from cdriver.sim.imex.host_service import HostImexService

    plugin = plugin_factory(node, extra_args=["--imex-mode", "hostManaged"], gates="HostManagedIMEXDaemon=true")
    slices = wait_for("the node's ResourceSlice", lambda: our_slices(raw, node), 20)
    wait_for(f"a channel-0-only slice (have {slices})",
             lambda: [d["name"] for s in our_slices(raw, node) for d in s["spec"]["devices"]] == ["channel-0"], 20)
    kubelet = Kubelet(plugin)
    cd = make_cd(raw, namespace)

    daemon = allocated_claim(raw, driver_ns, node.name, daemon_params(cd), device="daemon-0", request="daemon")
    res = kubelet.prepare(daemon)[uid_of(daemon)]
    assert "not supported with --imex-mode=hostManaged" in res.error

    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    sock_rel = "/etc/nvidia-imex/imex_ctrl.sock"
    res = kubelet.prepare(claim)[uid_of(claim)]
    assert "host nvidia-imex daemon readiness check failed" in res.error
    stream = HealthStream(plugin.dra_socket, lambda: plugin.log_tail(30))
    down = stream.next_where(lambda r: r["channel-0"].health == "Unhealthy", "the channel is Unhealthy")
    assert "host nvidia-imex daemon readiness check failed" in down["channel-0"].message
    assert list(down) == ["channel-0"], "host-managed mode publishes no daemon slot"
    assert f"{node.root.root}{sock_rel}" in res.error
    assert node_label(raw, node) is None, "host-managed mode never labels nodes"

    # The administrator's host service (the simulation kit's stand-in, outside any pod) comes up:
    # a waiting Prepare succeeds once it answers READY on the socket inside the driver root.
    service = HostImexService(node.root, "127.0.0.1", socket_path=sock_rel, server_port=free_port(),
                              cmd_port=free_port(), env=node.root.process_env())
    try:
        service.start(wait=False)
        started = time.monotonic()
        res = kubelet.prepare(claim)[uid_of(claim)]
        assert res.error == "", res.error
        print(f"\nhost-managed Prepare answered {time.monotonic() - started:.2f}s after the service started")
        edits = CDIRegistry([str(plugin.cdi_root)]).resolve(list(res.devices[0].cdi_device_ids))
        assert [n.path for n in edits.device_nodes] == ["/dev/nvidia-caps-imex-channels/channel0"]
        assert edits.mounts == [] and edits.env == []
        up = stream.next_where(lambda r: r["channel-0"].health == "Healthy", "the channel is Healthy")
        assert "is READY" in up["channel-0"].message
        service.stop()
        stream.next_where(lambda r: r["channel-0"].health == "Unhealthy", "the channel is Unhealthy again")
        assert kubelet.unprepare(claim) == {uid_of(claim): ""}
        assert plugin.claim_specs() == []
    finally:
        service.stop()
        stream.__exit__()


def test_invalid_mode_settings_fail_start_with_one_message(node: SimNode, tmp_path: Path) -> None:
    env = {**os.environ, **node.root.process_env()}
    out = subprocess.run([sys.executable, "-m", "cdriver", "kubelet-plugin", "--node-name", node.name,
                          "--imex-mode", "hostManaged"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "HostManagedIMEXDaemon" in out.stderr and "Traceback" not in out.stderr


def one_node_driver_root(tmp_path: Path, name: str, **kwargs: Any) -> Any:
    """A driver root for node `name`, alone in clique 3 of the test domain."""
    from cdriver.sim.gpu.driver_root import create_driver_root

    topology = tmp_path / "topology.yaml"
    topology.write_text(yaml.safe_dump({"version": 1, "domains": [
        {"uuid": CLUSTER_UUID, "cliques": [{"id": 3, "nodes": [name]}]}]}))
    return create_driver_root(tmp_path / "root", name, topology, channel_count=1, **kwargs)


def start_plugin_alone(tmp_path: Path, name: str, root: Any, **env: str) -> subprocess.CompletedProcess:
    """`cdriver kubelet-plugin` on `root` (with `env` added), without a cluster: only a start that
    fails returns."""
    return subprocess.run([sys.executable, "-m", "cdriver", "kubelet-plugin", "--node-name", name,
                           "--nvidia-driver-root", str(root.root), "--kubelet-plugins-directory-path",
                           str(tmp_path / "p"), "--kubelet-registrar-directory-path", str(tmp_path / "r"),
                           "--cdi-root", str(tmp_path / "cdi")],
                          env={**root.process_env(), **env}, capture_output=True, text=True, timeout=60)


def test_incomplete_fabric_fails_start_with_a_clear_message(tmp_path: Path) -> None:
    root = one_node_driver_root(tmp_path, "kp-inprogress", fabric_state="in_progress")
    out = start_plugin_alone(tmp_path, "kp-inprogress", root)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    error = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert error and "fabric" in error[0].lower()


def test_driver_root_without_fabric_mgmt_capability_fails_start_naming_the_driver_root(tmp_path: Path) -> None:
    """Without the capability every daemon claim would fail later, far from the cause."""
    root = one_node_driver_root(tmp_path, "kp-nocap")
    root.capability_file.unlink()
    out = start_plugin_alone(tmp_path, "kp-nocap", root)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    (error,) = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert "fabric-imex-mgmt" in error and f"driver root {root.root} " in error and "--nvidia-driver-root" in error


def _upstream_checkpoint(claims: dict[str, dict], boot_id: str) -> bytes:
    """A checkpoint file as the upstream plugin writes it (current layout, kubelet checksums)."""
    from cdriver.checkpoint.upstream import go_json, kubelet_checksum

    v2 = {"checksum": 0, "preparedClaims": dict(sorted(claims.items())), "nodeBootID": boot_id}
    v2["checksum"] = kubelet_checksum(go_json(v2))
    v1 = {"preparedClaims": {uid: {"status": c["status"], "preparedDevices": c["preparedDevices"]}
                             for uid, c in v2["preparedClaims"].items()
                             if c["checkpointState"] == "PrepareCompleted"}}
    return go_json({"checksum": kubelet_checksum(go_json({"checksum": 0, "v1": v1})), "v1": v1, "v2": v2})


def test_plugin_takes_over_an_upstream_checkpoint(plugin_factory: Callable[..., PluginProcess], raw: RawClient,
                                                  namespace: str, node: SimNode, driver_ns: str) -> None:
    from cdriver.checkpoint import read_boot_id
    from cdriver.checkpoint.upstream import go_json, kubelet_checksum

    plugin = plugin_factory(node, extra_args=["--cleanup-interval", "1s"])
    plugin.stop()
    cd = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    running = allocated_claim(raw, namespace, node.name, channel_params(cd))
    # Upstream records PrepareStarted before decoding the opaque config; this one failed to decode.
    bad = allocated_claim(raw, namespace, node.name, {**channel_params(cd), "allocationMod": "All"},
                          device="channel-1")
    cdi_id = f"{CDI_KIND_CLAIM}={uid_of(running)}-channel-0"
    channel = {"info": {"id": 0}, "device": {"Requests": ["channel"], "PoolName": node.name,
                                             "DeviceName": "channel-0", "CDIDeviceIDs": [cdi_id]}}
    entries = {
        uid_of(running): {"checkpointState": "PrepareCompleted", "status": running["status"],
                          "preparedDevices": [{"devices": [{"channel": channel, "daemon": None}],
                                               "configState": {"Type": "channel", "ComputeDomain": uid_of(cd)}}],
                          "name": running["metadata"]["name"], "namespace": namespace},
        uid_of(bad): {"checkpointState": "PrepareStarted", "status": bad["status"],
                      "name": bad["metadata"]["name"], "namespace": namespace},
    }
    plugin.plugin_dir.mkdir(parents=True, exist_ok=True)
    (plugin.plugin_dir / CHECKPOINT_FILE_NAME).write_bytes(_upstream_checkpoint(entries, read_boot_id()))
    spec_path = plugin.cdi_root / f"{CDI_VENDOR}-claim_{uid_of(running)}.yaml"  # upstream's file name
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": CDI_KIND_CLAIM, "devices": [{
        "name": f"{uid_of(running)}-channel-0", "containerEdits": {"deviceNodes": [{
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "hostPath": f"{node.root.root}/dev/nvidia-caps-imex-channels/channel0"}]}}]}))
    raw.patch(NODES, node.name, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: uid_of(cd)}}})

    plugin.start()
    kubelet = Kubelet(plugin)
    assert spec_path.exists(), "the running workload's CDI spec must survive the switch"
    assert plugin.checkpoint()[uid_of(running)].state == "PrepareCompleted"
    again = kubelet.prepare(running)[uid_of(running)]
    assert again.error == "" and list(again.devices[0].cdi_device_ids) == [cdi_id]
    # The failed claim fails the same way under cdriver; once deleted its stale entry is swept.
    assert "allocationMod" in kubelet.prepare(bad)[uid_of(bad)].error
    raw.delete(CLAIMS, bad["metadata"]["name"], namespace)
    wait_for("the sweep of the stale upstream entry", lambda: uid_of(bad) not in plugin.checkpoint(), 15)
    assert f"partially prepared claim {namespace}/{bad['metadata']['name']}" in plugin.log_path.read_text()
    # Channel ownership was kept: another domain's claim cannot take channel 0 while the old one holds it.
    other = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, other, node)
    fresh = allocated_claim(raw, namespace, node.name, channel_params(other))
    assert f"channel 0 already allocated by claim {uid_of(running)}" in kubelet.prepare(fresh)[uid_of(fresh)].error

    # What cdriver leaves is an upstream checkpoint too: valid checksums, the live claim in v2/v1.
    written = json.loads((plugin.plugin_dir / CHECKPOINT_FILE_NAME).read_text())
    v2 = written["v2"]
    assert v2["checksum"] == kubelet_checksum(go_json({**v2, "checksum": 0}))
    assert written["checksum"] == kubelet_checksum(go_json({"checksum": 0, "v1": written["v1"]}))
    assert list(written["v1"]["preparedClaims"]) == [uid_of(running)]
    assert v2["preparedClaims"][uid_of(running)]["preparedDevices"] == entries[uid_of(running)]["preparedDevices"]

    # Unprepare of the old claim removes its spec and the label; then a new claim works.
    assert kubelet.unprepare(running) == {uid_of(running): ""}
    assert not spec_path.exists() and node_label(raw, node) is None
    assert kubelet.prepare(fresh)[uid_of(fresh)].error == ""
    assert kubelet.unprepare(fresh) == {uid_of(fresh): ""}
    assert plugin.checkpoint() == {} and plugin.claim_specs() == [] and node_label(raw, node) is None


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_lost_checkpoint_is_rebuilt_without_removing_specs_running_pods_use(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str, damage: str) -> None:
    """Deleting or damaging the checkpoint must not take the CDI spec from a running pod (its
    restarted container would fail with "CDI device ... is not defined")."""
    from cdriver.sim.controlplane.cluster import free_port

    port = free_port()
    plugin = plugin_factory(node, extra_args=["--http-endpoint", f"127.0.0.1:{port}"])
    cd = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    kubelet = Kubelet(plugin)
    first = kubelet.prepare(claim)[uid_of(claim)]
    assert first.error == ""
    spec = plugin.cdi_root / f"{CDI_VENDOR}-claim_{uid_of(claim)}.yaml"
    content = spec.read_bytes()
    # A spec of a claim the API server does not know (say, deleted while the node was away).
    stranger = plugin.cdi_root / f"{CDI_VENDOR}-claim_{uuid.uuid4()}.json"
    stranger.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": CDI_KIND_CLAIM, "devices": [
        {"name": "x-channel-0", "containerEdits": {"env": ["A=B"]}}]}))
    plugin.stop()
    checkpoint = plugin.plugin_dir / CHECKPOINT_FILE_NAME
    if damage == "deleted":
        checkpoint.unlink()
    else:
        checkpoint.write_bytes(b'{"cdriver": {"version": 1, "claims": {')

    plugin.start()
    assert spec.read_bytes() == content and stranger.exists(), "no CDI spec may be removed"
    reason = "missing" if damage == "deleted" else "corrupt"
    assert metric(plugin, port, "cdriver_kubelet_plugin_checkpoint_rebuilds_total", reason=reason) == 1
    if damage == "garbage":
        (kept,) = plugin.plugin_dir.glob(f"{CHECKPOINT_FILE_NAME}.corrupt-*")
        assert kept.read_bytes() == b'{"cdriver": {"version": 1, "claims": {'
    rec = plugin.checkpoint()[uid_of(claim)]
    assert (rec.state, rec.name, rec.namespace, rec.domain_id) == (
        "PrepareCompleted", claim["metadata"]["name"], namespace, uid_of(cd))
    # kubelet retrying Prepare gets the same answer; the operator learns what happened.
    again = kubelet.prepare(claim)[uid_of(claim)]
    assert again.error == "" and list(again.devices[0].cdi_device_ids) == list(first.devices[0].cdi_device_ids)
    label = f"{namespace}/{claim['metadata']['name']}"
    (event,) = wait_for("CheckpointRebuilt event",
                        lambda: [e for e in raw.list(EVENTS, "default")["items"]
                                 if e["reason"] == "CheckpointRebuilt" and label in e["message"]
                                 and e["involvedObject"].get("name") == node.name], 10)
    assert event["type"] == "Warning" and stranger.name in event["message"]
    assert ("kept as" in event["message"]) == (damage == "garbage")
    # Unprepare undoes the rebuilt records as usual, the unexplained one too (by UID).
    assert kubelet.unprepare(claim) == {uid_of(claim): ""}
    assert not spec.exists() and node_label(raw, node) is None
    stranger_uid = stranger.name.removeprefix(f"{CDI_VENDOR}-claim_").removesuffix(".json")
    assert kubelet.unprepare({"metadata": {"namespace": namespace, "name": "gone", "uid": stranger_uid}}) == {
        stranger_uid: ""}
    assert plugin.claim_specs() == [] and plugin.checkpoint() == {}


def test_an_imex_setting_nvidia_imex_refuses_fails_start_naming_range_and_default(tmp_path: Path) -> None:
    root = one_node_driver_root(tmp_path, "kp-badimex")
    out = start_plugin_alone(tmp_path, "kp-badimex", root, IMEX_NODE_DISCONNECTED_GRACE_TIME="-7")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    (error,) = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert "IMEX_NODE_DISCONNECTED_GRACE_TIME)='-7' is not valid" in error and "(default -1)" in error


def test_a_template_that_hard_codes_a_tuned_setting_fails_start(tmp_path: Path) -> None:
    from cdriver.imex.config import load_template

    root = one_node_driver_root(tmp_path, "kp-hardcoded")
    template = tmp_path / "imexd.tmpl.cfg"
    template.write_text(load_template().replace("{{ log_level }}", "4"))
    out = start_plugin_alone(tmp_path, "kp-hardcoded", root, IMEX_LOG_LEVEL="2", IMEX_CONFIG_TEMPLATE=str(template))
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    (error,) = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert "LOG_LEVEL is '4' but the driver is set to '2'" in error and "LOG_LEVEL={{ log_level }}" in error


def device_statuses(raw: RawClient, claim: dict) -> list[dict]:
    """The claim's status.devices entries of this driver."""
    fresh = raw.get(CLAIMS, claim["metadata"]["name"], claim["metadata"]["namespace"])
    return [d for d in (fresh.get("status") or {}).get("devices") or [] if d["driver"] == DRIVER_NAME]


def ready_reason(raw: RawClient, claim: dict) -> tuple[str, str] | None:
    """(status, reason) of the claim's one device's Ready condition, None before one is written."""
    found = device_statuses(raw, claim)
    if not found:
        return None
    (condition,) = [c for c in found[0]["conditions"] if c["type"] == "Ready"]
    return condition["status"], condition["reason"]


def test_claim_status_says_why_a_claim_waits_and_names_the_chain_once_ready(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """`kubectl get resourceclaim -o yaml` answers "why is my pod waiting": the plugin writes each
    prepared (or waiting) claim's status.devices, with the ComputeDomain, clique, daemon, channels
    and CDI devices of a ready one, and its daemon claim's too."""
    plugin = plugin_factory(node)
    cd = make_cd(raw, namespace)
    claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    kubelet = Kubelet(plugin)
    assert "is not ready on node" in kubelet.prepare(claim)[uid_of(claim)].error
    assert wait_for(lambda: f"a status.devices entry of the waiting claim\n{plugin.log_tail(40)}",
                    lambda: ready_reason(raw, claim), 10) == \
        ("False", "WaitingForDaemon")
    (waiting,) = device_statuses(raw, claim)
    assert (waiting["pool"], waiting["device"]) == (node.name, "channel-0")
    assert "waiting for this domain's IMEX daemon" in waiting["conditions"][0]["message"]
    waited_since = waiting["conditions"][0]["lastTransitionTime"]

    set_clique_ready(raw, driver_ns, cd, node)
    assert kubelet.prepare(claim)[uid_of(claim)].error == ""
    assert wait_for("the claim's status to turn Ready", lambda: ready_reason(raw, claim) == ("True", "DaemonReady"),
                    10)
    (ready,) = device_statuses(raw, claim)
    assert ready["data"] == {
        "computeDomain": {"uid": uid_of(cd), "name": cd["metadata"]["name"], "namespace": namespace},
        "kind": "channel", "cliqueID": f"{CLUSTER_UUID}.3",
        "daemon": {"index": 0, "dnsName": dns_name(uid_of(cd), 0)},
        "channels": [0], "cdiDeviceIDs": [f"{CDI_KIND_CLAIM}={uid_of(claim)}-channel-0"]}
    assert ready["conditions"][0]["lastTransitionTime"] >= waited_since

    daemon = allocated_claim(raw, driver_ns, node.name, daemon_params(cd), device="daemon-0", request="daemon")
    daemon = reserve_for_daemon_pod(raw, daemon, cd)
    assert kubelet.prepare(daemon)[uid_of(daemon)].error == ""
    assert wait_for("the daemon claim's status", lambda: ready_reason(raw, daemon), 10) == \
        ("True", "DaemonClaimPrepared")
    (prepared,) = device_statuses(raw, daemon)
    assert prepared["data"]["kind"] == "daemon" and prepared["data"]["cliqueID"] == f"{CLUSTER_UUID}.3"
    assert "daemon" not in prepared["data"] and "channels" not in prepared["data"]
    assert kubelet.unprepare(claim, daemon) == {uid_of(claim): "", uid_of(daemon): ""}
    assert "could not write status.devices" not in plugin.log_path.read_text(), plugin.log_tail(40)


def test_health_stream_follows_the_daemon_of_the_domain_holding_the_channel(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    """The plugin advertises the DRA resource health service at registration and streams its
    devices' health: a free channel is Healthy, a channel held by a domain follows that domain's
    daemon on the node (Unhealthy, saying why, while it is not Ready), the daemon slot the fabric."""
    from cdriver.dra.client import get_info
    from cdriver.dra.resource_health import HEALTH_SERVICE_VERSIONS

    plugin = plugin_factory(node)
    versions = list(get_info(plugin.reg_socket, 5).supported_versions)
    assert versions[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"] and set(HEALTH_SERVICE_VERSIONS) <= set(versions)
    with HealthStream(plugin.dra_socket, lambda: plugin.log_tail(30)) as stream:
        first = stream.next_where(lambda r: "channel-0" in r, "channel-0 is reported")
        assert (first["channel-0"].pool, first["channel-0"].health) == (node.name, "Healthy")
        assert "no ComputeDomain holds its channel" in first["channel-0"].message
        assert first["daemon-0"].health == "Healthy" and first["channel-0"].timeout_seconds == 30

        cd = make_cd(raw, namespace)
        claim = allocated_claim(raw, namespace, node.name, channel_params(cd))
        set_clique_ready(raw, driver_ns, cd, node)
        kubelet = Kubelet(plugin)
        assert kubelet.prepare(claim)[uid_of(claim)].error == ""
        held = stream.next_where(lambda r: uid_of(cd) in r["channel-0"].message, "the channel names its domain")
        assert held["channel-0"].health == "Healthy" and "is Ready" in held["channel-0"].message

        set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
        broken = stream.next_where(lambda r: r["channel-0"].health == "Unhealthy", "the channel turns Unhealthy")
        assert "is NotReady in ComputeDomainClique" in broken["channel-0"].message
        assert broken["daemon-0"].health == "Healthy", "the daemon slot follows the fabric only"
        set_clique_ready(raw, driver_ns, cd, node)
        stream.next_where(lambda r: r["channel-0"].health == "Healthy", "the channel is Healthy again")
        assert kubelet.unprepare(claim) == {uid_of(claim): ""}
        freed = stream.next_where(lambda r: "no ComputeDomain holds" in r["channel-0"].message, "the channel is free")
        assert freed["channel-0"].health == "Healthy"


def test_a_broken_fabric_taints_the_channel_and_turns_it_unhealthy_until_it_recovers(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, node: SimNode) -> None:
    """The GPUs' fabric registration falls back to in_progress while the plugin runs: within its
    probe interval the node's channel device carries a NoSchedule taint saying why (so no new claim
    is allocated there) and its health turns Unhealthy; when the fabric completes again both go."""
    from cdriver.roles.kubelet_plugin.device_health import TAINT_KEY
    from cdriver.sim.gpu.driver_root import rerender_driver_root

    plugin = plugin_factory(node)

    def channel_taints() -> list[dict] | None:
        devices = [d for s in our_slices(raw, node) for d in s["spec"]["devices"] if d["name"] == "channel-0"]
        return devices[0].get("taints") or [] if devices else None

    wait_for("the node's slice", lambda: channel_taints() == [], 20)
    with HealthStream(plugin.dra_socket, lambda: plugin.log_tail(30)) as stream:
        stream.next_where(lambda r: r["channel-0"].health == "Healthy", "the channel is Healthy")
        try:
            rerender_driver_root(node.root.root, fabric_state="in_progress")
            (taint,) = wait_for(lambda: f"a taint on channel-0\n{plugin.log_tail(20)}", channel_taints, 20)
            assert (taint["key"], taint["value"], taint["effect"]) == (
                TAINT_KEY, "fabric-registration-incomplete", "NoSchedule")
            assert taint.get("timeAdded"), "the API server stamps it"
            daemon_slot = [d for s in our_slices(raw, node) for d in s["spec"]["devices"] if d["name"] == "daemon-0"]
            assert not daemon_slot[0].get("taints"), "only the channel devices are tainted"
            down = stream.next_where(lambda r: r["channel-0"].health == "Unhealthy", "the channel turns Unhealthy")
            assert "fabric registration is in_progress" in down["channel-0"].message
        finally:
            rerender_driver_root(node.root.root, fabric_state="completed")
        wait_for("the taint to go", lambda: channel_taints() == [], 20)
        stream.next_where(lambda r: r["channel-0"].health == "Healthy", "the channel is Healthy again")
    assert "tainted compute-domain.nvidia.com/unusable=fabric-registration-incomplete:NoSchedule" in \
        plugin.log_path.read_text()
