"""`cdriver controller` against the real control plane: objects, status, deletion, cleanup,
conflicts, host-managed mode, leader election, metrics."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdriver import featuregates
from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_HOST_MANAGED
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.controller.desired import DAEMON_POD_CLAIM_NAME
from cdriver.roles.controller.main import Controller, ControllerConfig
from cdriver.roles.controller.metrics import HttpServer
from cdriver.roles.controller.reconciler import Timing
from cdriver.roles.controller.settings import DEFAULT_DAEMON_PRIORITY_CLASS, ControllerSettings
from cdriver.sim.world.scenario import compute_domain
from tests.support.waiting import wait_for

CDS = COMPUTE_DOMAINS
CLIQUES = COMPUTE_DOMAIN_CLIQUES
RCTS = RESOURCES["resourceclaimtemplates"]
DS = RESOURCES["daemonsets"]
PODS = RESOURCES["pods"]
NODES = RESOURCES["nodes"]
EVENTS = RESOURCES["events"]
LEASES = RESOURCES["leases"]
CRDS = RESOURCES["customresourcedefinitions"]
HOLD = "test.cdriver/hold"
TOUCH = "test.cdriver/touch"


def get(raw: RawClient, res, name: str, ns: str | None = None) -> dict | None:
    return raw.get_or_none(res, name, ns)


def labelled(raw: RawClient, res, uid: str, ns: str | None = None) -> list[dict]:
    return raw.list(res, ns, label_selector=f"{constants.LABEL_COMPUTE_DOMAIN}={uid}")["items"]


def events_for(raw: RawClient, obj: dict) -> list[dict]:
    meta = obj["metadata"]
    return raw.list(EVENTS, meta["namespace"],
                    field_selector=f"involvedObject.uid={meta['uid']}")["items"]


def reconciles(controller: Controller) -> float:
    """How many reconciles the controller has finished, whatever their result."""
    return sum(sample.value for metric in controller.metrics.reconciles.collect() for sample in metric.samples
               if sample.name.endswith("_total"))


def wait_handled(controller: Controller, raw: RawClient, name: str, namespace: str,
                 timeout: float = 20.0) -> None:
    """Touch the domain (an annotation) and wait until the controller has handled the touch: a
    handler added after the controller's own has seen it, so the controller has queued the domain,
    and then the work queue is idle: the reconcile of the domain as it now is has finished. What the
    controller has not created by then, it does not create for this domain."""
    token = uuid.uuid4().hex
    seen = threading.Event()

    def on_update(_old: dict, new: dict) -> None:
        if (new["metadata"].get("annotations") or {}).get(TOUCH) == token:
            seen.set()

    controller.caches.domains.add_handler(on_update=on_update)
    done = reconciles(controller)
    raw.patch(CDS, name, {"metadata": {"annotations": {TOUCH: token}}}, namespace)
    assert seen.wait(timeout), f"the controller's informer did not pass on the touch of {namespace}/{name}"
    assert controller.queue.wait_idle(timeout), f"the controller's queue is not idle after {timeout:.0f} s"
    assert reconciles(controller) > done


def ready_condition(cd: dict) -> dict:
    conds = (cd.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def strip_finalizers(raw: RawClient, res, ns: str | None) -> None:
    with contextlib.suppress(ApiError):
        for obj in raw.list(res, ns)["items"]:
            if obj["metadata"].get("finalizers"):
                obj["metadata"]["finalizers"] = []
                with contextlib.suppress(ApiError):
                    raw.update(res, obj)


# --- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def crds(chart_crds: None) -> None:
    """The chart's CRDs, installed once per session (tests/conftest.py)."""


@pytest.fixture
def driver_ns(cluster: Any, raw: RawClient, namespace: str) -> Iterator[str]:
    """A fresh driver namespace (DaemonSets, daemon templates, cliques live there)."""
    name = f"drv-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(name)
    # What the chart installs for daemon pods in the driver namespace.
    raw.create(RESOURCES["serviceaccounts"],
               {"metadata": {"name": constants.DAEMON_SERVICE_ACCOUNT, "namespace": name}})
    yield name
    for ns in (namespace, name):
        for res in (CDS, RCTS):
            strip_finalizers(raw, res, ns)
    strip_finalizers(raw, DS, name)
    with contextlib.suppress(ApiError):
        for pod in raw.list(PODS, name)["items"]:
            raw.delete(PODS, pod["metadata"]["name"], name, grace_period_seconds=0)
        raw.delete(RESOURCES["namespaces"], name)


@pytest.fixture
def nodes(raw: RawClient) -> Iterator[Callable[..., str]]:
    """Factory of schedulable Nodes (removed afterwards)."""
    from cdriver.sim.node.registration import register_node

    made = []

    def make(labels: dict | None = None) -> str:
        node = register_node(raw, f"cdn-{uuid.uuid4().hex[:8]}", labels)
        made.append(node)
        return node.name

    yield make
    for node in made:
        node.delete()


def settings_for(driver_ns: str, **kw) -> ControllerSettings:
    gates = kw.pop("gates", featuregates.FeatureGates())
    base = dict(namespace=driver_ns, daemon_image="cdriver:test",
                feature_gates_env=gates.to_env(),
                cliques_enabled=gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES))
    base.update(kw)
    return ControllerSettings(**base)


@pytest.fixture
def start_controller(raw: RawClient, crds: None) -> Iterator[Callable[..., Controller]]:
    """Start in-process controllers with short retry intervals; stopped afterwards."""
    running: list[Controller] = []

    def start(settings: ControllerSettings, **kw) -> Controller:
        config = ControllerConfig(settings=settings, resync_seconds=300,
                                  timing=Timing(problem_retry_seconds=0.5,
                                                wait_retry_seconds=1.0, workload_retry_seconds=0.3),
                                  sweep_delay_seconds=0.2, **kw)
        controller = Controller(raw, config)
        controller.start()
        running.append(controller)
        return controller

    yield start
    for controller in running:
        controller.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def controller_process(cluster: Any, driver_ns: str, *args: str,
                       log: Path | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "cdriver", "-v", "4", "controller",
            "--kubeconfig", str(cluster.kubeconfig), "--namespace", driver_ns,
            "--daemon-image", "cdriver:test", *args]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed by the child
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_generated(raw: RawClient, cd: dict, driver_ns: str, timeout: float = 20) -> None:
    uid = cd["metadata"]["uid"]
    wait_for("generated objects", lambda: len(labelled(raw, RCTS, uid)) == 2 and labelled(raw, DS, uid, driver_ns),
             timeout)


# --- tests ----------------------------------------------------------------------------------

def test_creates_exactly_the_expected_objects(raw, namespace, driver_ns, start_controller):
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "imex-channel-0", "All"), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)

    cd = raw.get(CDS, "cd1", namespace)
    assert cd["metadata"]["finalizers"] == [constants.FINALIZER]
    # the label each node's kubelet plugin watches this one domain by
    assert cd["metadata"]["labels"][constants.LABEL_DOMAIN_UID] == uid
    templates = {(t["metadata"]["namespace"], t["metadata"]["name"]): t
                 for t in labelled(raw, RCTS, uid)}
    daemon_name = f"computedomain-daemon-{uid}"
    assert set(templates) == {(namespace, "imex-channel-0"), (driver_ns, daemon_name)}
    workload = templates[(namespace, "imex-channel-0")]
    assert workload["metadata"]["labels"] == {constants.LABEL_COMPUTE_DOMAIN: uid,
                                              constants.LABEL_TARGET: constants.TARGET_WORKLOAD}
    assert workload["metadata"]["finalizers"] == [constants.FINALIZER]
    (config,) = workload["spec"]["spec"]["devices"]["config"]
    assert config["opaque"] == {"driver": constants.DRIVER_NAME, "parameters": {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": uid,
        "allocationMode": "All"}}
    daemon_template = templates[(driver_ns, daemon_name)]
    assert daemon_template["metadata"]["labels"][constants.LABEL_TARGET] == constants.TARGET_DAEMON
    assert daemon_template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"][
        "kind"] == constants.KIND_DAEMON_CONFIG
    (ds,) = labelled(raw, DS, uid, driver_ns)
    assert ds["metadata"]["name"] == daemon_name
    assert ds["spec"]["selector"] == {"matchLabels": {constants.LABEL_COMPUTE_DOMAIN: uid}}
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {constants.LABEL_COMPUTE_DOMAIN: uid}
    assert pod_spec["resourceClaims"][0]["resourceClaimTemplateName"] == daemon_name
    assert pod_spec["priorityClassName"] == DEFAULT_DAEMON_PRIORITY_CLASS
    # Nothing else carries the domain's label, in any namespace.
    assert len(labelled(raw, DS, uid)) == 1 and labelled(raw, PODS, uid) == []

    cd = wait_for("status", lambda: (c := raw.get(CDS, "cd1", namespace)).get("status") and c)
    assert cd["status"]["status"] == constants.STATUS_READY  # numNodes 0
    assert ready_condition(cd)["reason"] == "AwaitingWorkloads"
    assert cd["status"]["readyNodes"] == "0/0"

    cd["spec"]["numNodes"] = 3
    with pytest.raises(ApiError) as err:
        raw.update(CDS, cd)
    assert err.value.invalid and "immutable" in err.value.message


def test_daemon_pod_scheduled_on_labelled_node(raw, namespace, driver_ns, start_controller,
                                               nodes):
    # Guaranteed QoS is the opt-in: both sizes set (unset by default, as upstream).
    start_controller(settings_for(driver_ns, daemon_cpu="200m", daemon_memory="512Mi"))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    node = nodes()
    with contextlib.suppress(ApiError):
        raw.create(RESOURCES["deviceclasses"], {
            "metadata": {"name": constants.DEVICE_CLASS_DAEMON},
            "spec": {"selectors": [{"cel": {"expression": (
                f"device.driver == '{constants.DRIVER_NAME}' && "
                f"device.attributes['{constants.DRIVER_NAME}'].type == 'daemon'")}}]}})
    raw.create(RESOURCES["resourceslices"], {
        "metadata": {"name": f"{node}-cd"},
        "spec": {"driver": constants.DRIVER_NAME, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": constants.DEVICE_DAEMON_0, "attributes": {
                     "type": {"string": "daemon"}, "id": {"int": 0}}}]}})
    try:
        assert labelled(raw, PODS, uid, driver_ns) == []  # no labelled node yet
        raw.patch(NODES, node, {"metadata": {"labels": {constants.LABEL_COMPUTE_DOMAIN: uid}}})
        def pods_and_events() -> str:
            pods = [(p["metadata"]["name"], p.get("status")) for p in labelled(raw, PODS, uid, driver_ns)]
            events = [(e["reason"], e["message"]) for e in raw.list(EVENTS, driver_ns)["items"]]
            return f"daemon pod bound to the labelled node\n{(pods, events)}"

        pod = wait_for(pods_and_events,
                       lambda: next((p for p in labelled(raw, PODS, uid, driver_ns)
                                     if p["spec"].get("nodeName") == node), None), 30)
        assert pod["spec"]["priorityClassName"] == DEFAULT_DAEMON_PRIORITY_CLASS
        assert pod["status"]["qosClass"] == "Guaranteed"
        claim_status = pod["status"].get("resourceClaimStatuses") or []
        assert claim_status and claim_status[0]["name"] == DAEMON_POD_CLAIM_NAME
    finally:
        raw.delete(RESOURCES["resourceslices"], f"{node}-cd")


def set_pod_ready(raw: RawClient, pod: dict, ready: bool) -> None:
    """Write a daemon pod's status as kubelet would (no kubelet runs in this world)."""
    def write() -> bool:
        current = raw.get(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        current["status"] = {**(current.get("status") or {}), "phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}
        try:
            raw.update_status(PODS, current)
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        return True

    wait_for("pod status written", write, 10)


def test_status_follows_cliques_and_prunes_entries(raw, namespace, driver_ns, start_controller,
                                                   nodes):
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None, num_nodes=2), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    n1, n2 = nodes({constants.LABEL_COMPUTE_DOMAIN: uid}), nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
    # The DaemonSet controller creates one daemon pod per labelled node.
    wait_for("two daemon pods", lambda: len(labelled(raw, PODS, uid, driver_ns)) == 2, 30)
    for pod in labelled(raw, PODS, uid, driver_ns):
        set_pod_ready(raw, pod, True)
    clique_id = "11111111-2222-3333-4444-555555555555.0"
    clique = raw.create(CLIQUES, {
        "metadata": {"name": f"{uid}.{clique_id}", "labels": {
            constants.LABEL_COMPUTE_DOMAIN: uid, constants.LABEL_CLIQUE_ID: clique_id}},
        "daemons": [
            {"nodeName": n1, "ipAddress": "10.1.0.1", "cliqueID": clique_id, "index": 0,
             "status": "Ready"},
            {"nodeName": n2, "ipAddress": "10.1.0.2", "cliqueID": clique_id, "index": 1,
             "status": "NotReady"}]}, driver_ns)

    def status() -> dict:
        return raw.get(CDS, "cd1", namespace).get("status") or {}

    wait_for("two node entries", lambda: len(status().get("nodes") or []) == 2)
    st = status()
    assert st["status"] == constants.STATUS_NOT_READY and st["readyNodes"] == "1/2"
    assert {n["name"]: n["status"] for n in st["nodes"]} == {n1: "Ready", n2: "NotReady"}
    assert ready_condition(raw.get(CDS, "cd1", namespace))["reason"] == "NodesNotReady"

    clique = raw.get(CLIQUES, clique["metadata"]["name"], driver_ns)
    clique["daemons"][1]["status"] = "Ready"
    raw.update(CLIQUES, clique)
    wait_for("Ready", lambda: status().get("status") == constants.STATUS_READY)
    assert status()["readyNodes"] == "2/2"

    # n2 leaves the domain: its daemon pod goes, so does its clique entry, then numNodes=2
    # is no longer met.
    raw.patch(NODES, n2, {"metadata": {"labels": {constants.LABEL_COMPUTE_DOMAIN: None}}})
    wait_for("pruned clique entry",
             lambda: [d["nodeName"] for d in
                      raw.get(CLIQUES, clique["metadata"]["name"], driver_ns)["daemons"]]
             == [n1], 30)
    wait_for("node list without n2", lambda: [n["name"] for n in status().get("nodes") or []] == [n1])
    assert status()["status"] == constants.STATUS_NOT_READY
    assert ready_condition(raw.get(CDS, "cd1", namespace))["reason"] == "WaitingForNodes"


def test_entries_without_an_index_get_the_lowest_free_ones(raw, namespace, driver_ns, start_controller, nodes):
    """Daemons apply their own entries without an index; the controller gives each the lowest
    free index of its clique in one write, keeps every valid index, and re-assigns a duplicate."""
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None, num_nodes=4), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    n = [nodes({constants.LABEL_COMPUTE_DOMAIN: uid}) for _ in range(4)]
    wait_for("four daemon pods", lambda: len(labelled(raw, PODS, uid, driver_ns)) == 4, 30)
    clique_id = "11111111-2222-3333-4444-555555555555.0"
    name = f"{uid}.{clique_id}"

    def entry(node: str, ip: str, index: int | None = None) -> dict:
        out = {"nodeName": node, "ipAddress": ip, "cliqueID": clique_id, "status": "NotReady"}
        return out if index is None else {**out, "index": index}

    raw.create(CLIQUES, {
        "metadata": {"name": name, "labels": {constants.LABEL_COMPUTE_DOMAIN: uid,
                                              constants.LABEL_CLIQUE_ID: clique_id}},
        "daemons": [entry(n[0], "10.1.0.1", 1), entry(n[1], "10.1.0.2"), entry(n[2], "10.1.0.3", 1),
                    entry(n[3], "10.1.0.4")]}, driver_ns)

    def indices() -> dict[str, int | None]:
        return {d["nodeName"]: d.get("index") for d in raw.get(CLIQUES, name, driver_ns)["daemons"]}

    wait_for(lambda: f"every entry indexed: {indices()}", lambda: None not in indices().values() and
             len(set(indices().values())) == 4, 30)
    # n[0] keeps its 1; in list order n[1] gets the free 0, n[2] (a duplicate 1) 2, n[3] 3
    assert indices() == {n[0]: 1, n[1]: 0, n[2]: 2, n[3]: 3}


def test_entry_of_a_killed_daemon_turns_not_ready_with_its_pod(raw, namespace, driver_ns,
                                                               start_controller, nodes):
    """A SIGKILLed daemon cannot write NotReady; kubelet marks its pod not Ready, and neither
    the clique entry nor the domain may stay Ready."""
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
    pod = wait_for("daemon pod", lambda: next(iter(labelled(raw, PODS, uid, driver_ns)), None), 30)
    set_pod_ready(raw, pod, True)
    clique_id = "11111111-2222-3333-4444-555555555555.0"
    name = f"{uid}.{clique_id}"
    raw.create(CLIQUES, {
        "metadata": {"name": name, "labels": {
            constants.LABEL_COMPUTE_DOMAIN: uid, constants.LABEL_CLIQUE_ID: clique_id}},
        "daemons": [{"nodeName": node, "ipAddress": "10.1.0.1", "cliqueID": clique_id, "index": 0,
                     "status": "Ready"}]}, driver_ns)

    def status() -> dict:
        return raw.get(CDS, "cd1", namespace).get("status") or {}

    wait_for("Ready", lambda: status().get("status") == constants.STATUS_READY)
    set_pod_ready(raw, pod, False)  # the daemon container died and does not come back
    wait_for("clique entry NotReady",
             lambda: raw.get(CLIQUES, name, driver_ns)["daemons"][0]["status"]
             == constants.STATUS_NOT_READY, 20)
    wait_for("domain NotReady", lambda: status().get("status") == constants.STATUS_NOT_READY)
    assert status()["nodes"][0]["status"] == constants.STATUS_NOT_READY
    assert ready_condition(raw.get(CDS, "cd1", namespace))["reason"] == "NodesNotReady"


def test_deleting_removes_everything_then_the_domain(raw, namespace, driver_ns,
                                                     start_controller, nodes):
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid, "keep": "me"})
    raw.delete(CDS, "cd1", namespace)
    wait_for("domain gone", lambda: get(raw, CDS, "cd1", namespace) is None, 30)
    assert labelled(raw, RCTS, uid) == [] and labelled(raw, DS, uid) == []
    labels = raw.get(NODES, node)["metadata"]["labels"]
    assert constants.LABEL_COMPUTE_DOMAIN not in labels and labels["keep"] == "me"


def reserved_channel_claim(raw, namespace: str, uid: str, node: str, pod_name: str, pod: dict) -> dict:
    """A channel claim of domain ``uid`` allocated on ``node`` and reserved for ``pod``, as the
    scheduler records it (no pod of these tests is ever scheduled)."""
    params = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": uid}
    config = [{"requests": ["channel"], "opaque": {"driver": constants.DRIVER_NAME, "parameters": params}}]
    claim = raw.create(RESOURCES["resourceclaims"], {"metadata": {"name": f"{pod_name}-channel"}, "spec": {
        "devices": {"requests": [{"name": "channel", "exactly": {
            "deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL}}], "config": config}}}, namespace)
    claim["status"] = {"allocation": {"devices": {
        "results": [{"request": "channel", "driver": constants.DRIVER_NAME, "pool": node,
                     "device": constants.DEVICE_CHANNEL_0}],
        "config": [{"source": "FromClaim", **config[0]}]}},
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod["metadata"]["uid"]}]}
    return raw.update_status(RESOURCES["resourceclaims"], claim, namespace)


def test_deleting_a_domain_in_use_waits_for_its_pods_and_says_so(raw, namespace, driver_ns,
                                                                  start_controller, nodes):
    """Running jobs keep their IMEX domain: the daemons stay until the last pod using a
    channel ends; the domain's status and Events on the pods say why it is still there."""
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
    pod = raw.create(PODS, {"metadata": {"name": "trainer"}, "spec": {
        "nodeSelector": {"cdriver-test/never": "true"}, "containers": [{"name": "c", "image": "none"}]}},
        namespace)
    claim = reserved_channel_claim(raw, namespace, uid, node, "trainer", pod)

    raw.delete(CDS, "cd1", namespace)
    cd = wait_for("the condition of a deletion that waits",
                  lambda: ready_condition(c := raw.get(CDS, "cd1", namespace)).get("reason")
                  == "DeletionWaitsForWorkloads" and c, 20)
    assert f"pod {namespace}/trainer (claim trainer-channel)" in ready_condition(cd)["message"]
    warned = wait_for("event on the pod",
                      lambda: [e for e in raw.list(EVENTS, namespace)["items"]
                               if e["reason"] == "DeletionWaitsForWorkloads"
                               and e["involvedObject"].get("name") == "trainer"], 10)
    assert warned[0]["type"] == "Warning" and "cd1" in warned[0]["message"]
    # The daemons stay, the node keeps its label; no new workload can join (template gone).
    wait_for("workload template gone", lambda: labelled(raw, RCTS, uid, namespace) == [], 20)
    (ds,) = labelled(raw, DS, uid, driver_ns)
    assert not ds["metadata"].get("deletionTimestamp")
    assert raw.get(NODES, node)["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] == uid

    claim["status"]["reservedFor"] = []  # the pod ended
    raw.update_status(RESOURCES["resourceclaims"], claim, namespace)
    wait_for("domain gone once its pod ended", lambda: get(raw, CDS, "cd1", namespace) is None, 30)
    assert labelled(raw, DS, uid, driver_ns) == []
    assert constants.LABEL_COMPUTE_DOMAIN not in raw.get(NODES, node)["metadata"]["labels"]


def test_deleting_a_domain_does_not_wait_for_pods_that_never_got_a_channel(raw, namespace, driver_ns,
                                                                          start_controller, nodes):
    """A pod whose claim was not prepared when the deletion began (kubelet: no sandbox, no
    container ran) holds no channel: the deletion completes at once, and the pod is left alone."""
    start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    wait_generated(raw, cd, driver_ns)
    node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
    pod = raw.create(PODS, {"metadata": {"name": "late"}, "spec": {
        "nodeSelector": {"cdriver-test/never": "true"}, "containers": [{"name": "c", "image": "none"}]}},
        namespace)

    def report_unprepared() -> dict | None:
        """kubelet's status of a pod whose Prepare failed (the scheduler may write in between)."""
        current = raw.get(PODS, "late", namespace)
        current["status"]["conditions"] = [c for c in current["status"].get("conditions") or []
                                           if c["type"] != "PodReadyToStartContainers"] + [
            {"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        current["status"]["containerStatuses"] = [
            {"name": "c", "image": "none", "imageID": "", "ready": False, "restartCount": 0, "started": False,
             "state": {"waiting": {"reason": "ContainerCreating"}}}]
        try:
            return raw.update_status(PODS, current, namespace)
        except ApiError as exc:
            if exc.conflict:
                return None
            raise

    pod = wait_for("the pod's status written", report_unprepared, 10)
    reserved_channel_claim(raw, namespace, uid, node, "late", pod)

    raw.delete(CDS, "cd1", namespace)
    wait_for("domain gone without waiting for the pod", lambda: get(raw, CDS, "cd1", namespace) is None, 30)
    assert labelled(raw, DS, uid, driver_ns) == []
    assert constants.LABEL_COMPUTE_DOMAIN not in raw.get(NODES, node)["metadata"]["labels"]
    assert get(raw, PODS, "late", namespace) is not None
    assert not [e for e in raw.list(EVENTS, namespace)["items"] if e["reason"] == "DeletionWaitsForWorkloads"]


def test_deletion_resumes_after_the_controller_is_killed(raw, cluster, namespace, driver_ns,
                                                          crds, nodes, tmp_path):
    proc = controller_process(cluster, driver_ns, log=tmp_path / "c1.log")
    try:
        cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
        uid = cd["metadata"]["uid"]
        wait_generated(raw, cd, driver_ns, 60)
        node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
        # A finalizer of our own holds the DaemonSet, so deletion stops half-way.
        (ds,) = labelled(raw, DS, uid, driver_ns)
        ds["metadata"]["finalizers"].append(HOLD)
        raw.update(DS, ds)
        raw.delete(CDS, "cd1", namespace)
        wait_for("DaemonSet finalizer released",
                 lambda: (d := get(raw, DS, ds["metadata"]["name"], driver_ns))
                 and d["metadata"]["finalizers"] == [HOLD], 30)
        assert get(raw, CDS, "cd1", namespace) is not None
    finally:
        proc.kill()
        proc.wait()
    # Half-way: workload template and labels gone, the domain still held by its finalizer.
    assert [t["metadata"]["namespace"] for t in labelled(raw, RCTS, uid)] in ([], [driver_ns])
    assert constants.LABEL_COMPUTE_DOMAIN not in raw.get(NODES, node)["metadata"]["labels"]
    raw.patch(DS, ds["metadata"]["name"], {"metadata": {"finalizers": None}}, driver_ns)
    # Put a label back (a late node-plugin Prepare) while no controller runs.
    raw.patch(NODES, node, {"metadata": {"labels": {constants.LABEL_COMPUTE_DOMAIN: uid}}})
    proc = controller_process(cluster, driver_ns, log=tmp_path / "c2.log")
    try:
        wait_for("domain released", lambda: get(raw, CDS, "cd1", namespace) is None, 60)
        wait_for("label removed",
                 lambda: constants.LABEL_COMPUTE_DOMAIN not in
                 raw.get(NODES, node)["metadata"]["labels"], 10)
        assert labelled(raw, RCTS, uid) == [] and labelled(raw, DS, uid) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_daemon_template_without_daemon_set_does_not_block_deletion(raw, namespace, driver_ns,
                                                                     start_controller):
    # The state a crash between creating the daemon template and the DaemonSet leaves behind.
    from cdriver.roles.controller import desired
    from cdriver.roles.controller.reconciler import parse_domain

    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    uid = cd["metadata"]["uid"]
    cd["metadata"]["finalizers"] = [constants.FINALIZER]
    cd = raw.update(CDS, cd)
    settings = settings_for(driver_ns)
    raw.create(RCTS, desired.daemon_claim_template(parse_domain(cd), settings))
    raw.delete(CDS, "cd1", namespace)
    start_controller(settings)
    wait_for("domain released", lambda: get(raw, CDS, "cd1", namespace) is None, 30)
    assert labelled(raw, RCTS, uid) == [] and labelled(raw, DS, uid) == []


def test_a_domain_left_by_another_controller_gets_the_uid_label(raw, namespace, driver_ns, start_controller):
    """A domain that already carries the finalizer but not cdriver's UID label (reconciled by
    upstream's controller before a switch) is labelled, so that kubelet plugins can watch it."""
    cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    cd["metadata"]["finalizers"] = [constants.FINALIZER]
    cd = raw.update(CDS, cd)
    start_controller(settings_for(driver_ns))

    def labelled_now() -> dict | None:
        now = get(raw, CDS, "cd1", namespace) or {"metadata": {}}
        uid = (now["metadata"].get("labels") or {}).get(constants.LABEL_DOMAIN_UID)
        return now if uid == cd["metadata"]["uid"] else None

    assert wait_for("the UID label", labelled_now, 30)["metadata"]["finalizers"] == [constants.FINALIZER]


def test_orphans_of_vanished_domains_are_cleaned_up(raw, namespace, driver_ns,
                                                    start_controller, nodes):
    from cdriver.roles.controller import desired
    from cdriver.roles.controller.reconciler import parse_domain

    uid = str(uuid.uuid4())
    ghost = parse_domain({"apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
                          "metadata": {"name": "ghost", "namespace": namespace, "uid": uid},
                          "spec": {"channel": {"resourceClaimTemplate": {"name": "ghost"}}}})
    settings = settings_for(driver_ns)
    objects = desired.desired_objects(ghost, settings)
    raw.create(RCTS, objects.workload_template)
    raw.create(RCTS, objects.daemon_template)
    raw.create(DS, objects.daemon_set)
    node = nodes({constants.LABEL_COMPUTE_DOMAIN: uid})
    live = raw.create(CDS, compute_domain("live", namespace, "live-chan", mode=None), namespace)
    controller = start_controller(settings)
    wait_for("orphans removed", lambda: not labelled(raw, RCTS, uid) and not labelled(raw, DS, uid), 30)
    wait_for("orphan node label removed",
             lambda: constants.LABEL_COMPUTE_DOMAIN not in raw.get(NODES, node)["metadata"]["labels"], 10)
    registry = controller.metrics.registry
    assert registry.get_sample_value("cdriver_controller_node_labels_removed_total") == 1
    wait_for("no stale node label counted", lambda: registry.get_sample_value(
        "cdriver_controller_stale_node_labels") == 0, 10)
    # The live domain's objects are untouched.
    wait_generated(raw, live, driver_ns)


def test_foreign_template_is_never_overwritten(raw, namespace, driver_ns, start_controller):
    foreign = raw.create(RCTS, {
        "metadata": {"name": "taken", "namespace": namespace, "labels": {"owner": "someone"}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.example.com"}}]}}}})
    controller = start_controller(settings_for(driver_ns))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "taken", mode=None), namespace)
    cd = wait_for("conflict condition",
                  lambda: ready_condition(c := raw.get(CDS, "cd1", namespace)).get("reason")
                  == "ResourceClaimTemplateConflict" and c)
    assert cd["status"]["status"] == constants.STATUS_NOT_READY
    assert "taken" in ready_condition(cd)["message"]
    events = wait_for("event",
                      lambda: [e for e in events_for(raw, cd)
                               if e["reason"] == "ResourceClaimTemplateConflict"], 10)
    assert events[0]["type"] == "Warning" and "left untouched" in events[0]["message"]
    done = reconciles(controller)
    wait_for("three retries of the conflicting domain", lambda: reconciles(controller) >= done + 3, 10)
    # a few retries later: still untouched, still one event
    after = raw.get(RCTS, "taken", namespace)
    assert after["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert after["metadata"]["labels"] == {"owner": "someone"}
    assert sum(e.get("count", 1) for e in events_for(raw, cd)
               if e["reason"] == "ResourceClaimTemplateConflict") == 1
    # Once the user removes the other object, the domain recovers on its own.
    raw.delete(RCTS, "taken", namespace)
    wait_for("Ready after the conflict is gone",
             lambda: raw.get(CDS, "cd1", namespace)["status"]["status"] == constants.STATUS_READY, 10)
    mine = raw.get(RCTS, "taken", namespace)
    assert mine["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] == cd["metadata"]["uid"]


@pytest.mark.parametrize("template, num_nodes, field", [
    ("", 0, "spec.channel.resourceClaimTemplate.name"),
    ("Not_A_Valid_Name", 0, "spec.channel.resourceClaimTemplate.name"),
    ("x" * 254, 0, "spec.channel.resourceClaimTemplate.name"),
    ("chan", 5001, "spec.numNodes"),
])
def test_the_crd_refuses_bad_specs_naming_the_field(raw, namespace, crds, template, num_nodes, field):
    """Refused at the API (before anything is generated), with the field in the message."""
    with pytest.raises(ApiError) as info:
        raw.create(CDS, compute_domain("bad", namespace, template, mode=None, num_nodes=num_nodes), namespace)
    assert info.value.invalid and field in str(info.value)
    assert get(raw, CDS, "bad", namespace) is None


def test_the_crd_accepts_num_nodes_omitted_zero_and_positive(raw, namespace, crds):
    """As upstream's CRD: numNodes is optional (defaulted to 0), 0 or positive; each decodes."""
    from cdriver.api.types import ComputeDomain

    made = {}
    for name, num_nodes in (("omitted", None), ("zero", 0), ("four", 4)):
        obj = compute_domain(name, namespace, f"{name}-chan", mode=None, num_nodes=num_nodes or 0)
        if num_nodes is None:
            del obj["spec"]["numNodes"]
        made[name] = raw.create(CDS, obj, namespace)
    assert {name: obj["spec"]["numNodes"] for name, obj in made.items()} == {"omitted": 0, "zero": 0, "four": 4}
    assert [ComputeDomain.from_dict(obj).num_nodes for obj in made.values()] == [0, 0, 4]


def test_host_managed_mode_creates_only_the_workload_template(raw, namespace, driver_ns,
                                                              start_controller):
    from cdriver.api.imex_mode import resolve_imex_config

    imex = resolve_imex_config(IMEX_MODE_HOST_MANAGED, "domain",
                               "HostManagedIMEXDaemon=true")
    controller = start_controller(settings_for(driver_ns, gates=imex.gates, host_managed=True))
    cd = raw.create(CDS, compute_domain("cd1", namespace, "host-chan", "All", num_nodes=4), namespace)
    uid = cd["metadata"]["uid"]
    cd = wait_for("status", lambda: (c := raw.get(CDS, "cd1", namespace)).get("status") and c)
    assert cd["metadata"]["finalizers"] == [constants.FINALIZER]
    (template,) = labelled(raw, RCTS, uid)
    assert (template["metadata"]["namespace"], template["metadata"]["name"]) == \
        (namespace, "host-chan")
    params = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == constants.ALLOCATION_MODE_SINGLE and params["domainID"] == uid
    # Ready means "admitted, template created", whatever numNodes says; the condition says so.
    assert cd["status"]["status"] == constants.STATUS_READY
    cond = ready_condition(cd)
    assert cond["reason"] == "HostManagedAdmitted" and "NOT report the health" in cond["message"]
    wait_for("AllocationModeForced event",
             lambda: [e for e in events_for(raw, cd) if e["reason"] == "AllocationModeForced"], 10)
    wait_handled(controller, raw, "cd1", namespace)
    assert labelled(raw, DS, uid) == [] and labelled(raw, RCTS, uid, driver_ns) == []
    assert raw.list(CLIQUES, driver_ns)["items"] == []
    raw.delete(CDS, "cd1", namespace)
    wait_for("domain released", lambda: get(raw, CDS, "cd1", namespace) is None, 20)
    assert labelled(raw, RCTS, uid) == []


def test_metrics_and_health_endpoint(raw, namespace, driver_ns, start_controller):
    controller = start_controller(settings_for(driver_ns))
    server = HttpServer("127.0.0.1:0", controller.metrics, "/metrics",
                        lambda: (controller.running, "ok"))
    server.start()
    try:
        cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
        wait_generated(raw, cd, driver_ns)
        wait_for("the condition", lambda: (raw.get(CDS, "cd1", namespace).get("status") or {}).get("status"))
        base = f"http://127.0.0.1:{server.port}"
        text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'nvidia_dra_compute_domain_info{status="Ready"}' in text
        assert "cdriver_controller_reconcile_total" in text
        assert "cdriver_controller_queue_depth" in text
        assert 'cdriver_controller_api_writes_total{resource="daemonsets",verb="create"}' in text
        ready = 1.0 if raw.get(CDS, "cd1", namespace)["status"]["status"] == constants.STATUS_READY else 0.0
        assert f'cdriver_controller_compute_domain_ready{{domain_name="cd1",domain_namespace="{namespace}"}} {ready}' \
            in text
        assert 'cdriver_controller_clique_daemons{status="NotReady"}' in text
        assert "cdriver_controller_stale_node_labels 0.0" in text
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        server.stop()


def test_printer_columns_and_short_names(raw, namespace, driver_ns, start_controller, cluster):
    from cdriver.sim.controlplane.binaries import control_plane_binaries

    start_controller(settings_for(driver_ns))
    raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
    wait_for("the condition", lambda: (raw.get(CDS, "cd1", namespace).get("status") or {}).get("readyNodes"))
    kubectl = [str(control_plane_binaries(echo=False).kubectl), "--kubeconfig",
               str(cluster.kubeconfig), "-n", namespace]
    out = subprocess.run([*kubectl, "get", "cd"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "READY", "REASON", "AGE"]
    assert row.split()[:4] == ["cd1", "Ready", "0/0", "AwaitingWorkloads"]
    out = subprocess.run([*kubectl, "get", "cdclique"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


def test_leader_election_one_acts_and_hands_over(raw, cluster, namespace, driver_ns, crds,
                                                 tmp_path):
    ports = [free_port(), free_port()]
    lease = f"ctl-{uuid.uuid4().hex[:6]}"
    procs = [controller_process(
        cluster, driver_ns, "--leader-election-enabled", "--pod-name", f"replica-{i}",
        "--leader-election-lease-lock-name", lease, "--leader-election-lease-duration", "3s",
        "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "0.2s",
        "--http-endpoint", f"127.0.0.1:{port}", log=tmp_path / f"r{i}.log")
        for i, port in enumerate(ports)]

    def holder() -> str:
        obj = get(raw, LEASES, lease, driver_ns)
        return ((obj or {}).get("spec") or {}).get("holderIdentity") or ""

    def metrics(i: int) -> str:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{ports[i]}/metrics",
                                          timeout=2).read().decode()
        except OSError:
            return ""

    try:
        leader_id = wait_for("a leader", holder, 60)
        leader = 0 if leader_id.startswith("replica-0-") else 1
        standby = 1 - leader
        cd = raw.create(CDS, compute_domain("cd1", namespace, "chan", mode=None), namespace)
        wait_generated(raw, cd, driver_ns, 30)
        wait_for("standby metrics", lambda: metrics(standby), 30)
        assert "cdriver_controller_leader 0.0" in metrics(standby)
        assert "cdriver_controller_api_writes_total{" not in metrics(standby)
        assert "cdriver_controller_leader 1.0" in metrics(leader)
        assert 'verb="create"' in metrics(leader)

        procs[leader].kill()
        procs[leader].wait()
        wait_for("hand-over", lambda: holder().startswith(f"replica-{standby}-"), 30)
        cd2 = raw.create(CDS, compute_domain("cd2", namespace, "chan2", mode=None), namespace)
        wait_generated(raw, cd2, driver_ns, 30)
        assert "cdriver_controller_leader 1.0" in metrics(standby)
        procs[standby].send_signal(signal.SIGTERM)
        assert procs[standby].wait(20) == 0
        assert holder() == ""  # released on exit
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_bad_settings_exit_with_a_clear_message(cluster, tmp_path):
    base = [sys.executable, "-m", "cdriver", "controller", "--kubeconfig",
            str(cluster.kubeconfig)]
    cases = [
        (["--imex-mode", "hostManaged"], "HostManagedIMEXDaemon"),
        (["--imex-isolation", "channel"], "not supported yet"),
        (["--daemon-cpu", "lots"], "--daemon-cpu"),
        (["--leader-election-enabled", "--leader-election-lease-duration", "2s",
          "--leader-election-renew-deadline", "5s"], "renew-deadline"),
    ]
    for args, needle in cases:
        out = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert needle in out.stderr and "Traceback" not in out.stderr, out.stderr
    gates = subprocess.run(base, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "FEATURE_GATES": "IMEXDaemonsWithDNSNames=false"})
    assert gates.returncode == 2 and "ComputeDomainCliques" in gates.stderr
