"""Simulated nodes run real pods against the real control plane: DaemonSets with hostPath,
downward API and projected service-account tokens under RBAC; DRA claims prepared through a
real gRPC plugin with CDI env and device nodes; probes, restarts and graceful termination."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cdriver.cdi.model import ContainerEdits, Device, DeviceNode, Spec
from cdriver.cdi.writer import remove_spec, write_spec
from cdriver.dra import node_service, registration, sockets
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.sim.controlplane import pki
from cdriver.sim.node.simulated.agent import NodeAgent, start_nodes
from cdriver.sim.node.simulated.runtime import NodeOptions
from tests.support.waiting import wait_for

PODS, NODES, EVENTS = RESOURCES["pods"], RESOURCES["nodes"], RESOURCES["events"]
SLICES, CLASSES = RESOURCES["resourceslices"], RESOURCES["deviceclasses"]
TEMPLATES, CLAIMS = RESOURCES["resourceclaimtemplates"], RESOURCES["resourceclaims"]
NODE_LABEL = "sim-node-test.cdriver.dev/pool"
PY = sys.executable


def condition(pod: dict, ctype: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status")
    return None


def container_status(pod: dict, name: str = "main") -> dict:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c.get("name") == name:
            return c
    return {}


def get_pod(raw: RawClient, ns: str, name: str) -> dict:
    return raw.get(PODS, name, ns)


def pod_ready(raw: RawClient, ns: str, name: str) -> dict | None:
    pod = raw.get_or_none(PODS, name, ns)
    return pod if pod and condition(pod, "Ready") == "True" else None


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool() -> str:
    return f"p{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def sim_nodes(cluster: Any, pool: str) -> Iterator[list[NodeAgent]]:
    """Two simulated nodes with short roots (Unix socket paths must stay short)."""
    base = tempfile.mkdtemp(prefix="cdn-")
    agents = start_nodes(cluster.raw, 2, base, prefix=f"sim-{pool}", first_index=11,
                         labels={NODE_LABEL: pool}, options=NodeOptions.fast(), pki_dir=cluster.pki.dir)
    yield agents
    for agent in agents:
        agent.stop(delete_node=True)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def kubectl(cluster: Any) -> Callable[..., subprocess.CompletedProcess]:
    """Run the control plane's kubectl against the cluster (admin)."""
    def run(namespace: str, *args: str, input: bytes | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        return subprocess.run([str(cluster.binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig),
                               "-n", namespace, *args], input=input, capture_output=True, timeout=timeout, env=env)
    return run


def pod_body(name: str, command: list[str], pool: str, node: str | None = None, **spec: Any) -> dict:
    container = {"name": "main", "image": "example.invalid/unused:1", "command": command}
    container.update(spec.pop("container", {}))
    body = {"metadata": {"name": name},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 2,
                     "nodeSelector": {NODE_LABEL: pool}, **spec}}
    if node:
        body["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    return body


# --- DaemonSet: hostPath, downward API, projected token, RBAC -----------------------------------

LISTER = r"""
import json, os, ssl, urllib.request, urllib.error
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ns = open(sa + "/namespace").read()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
base = "https://%s:%s" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
def get(path):
    req = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
code, pods = get("/api/v1/namespaces/%s/pods" % ns)
other, _ = get("/api/v1/namespaces/kube-system/pods")
result = {"node": os.environ["MY_NODE"], "podIP": os.environ["MY_POD_IP"], "pod": os.environ["MY_POD"],
          "uid": os.environ["MY_UID"], "namespace": ns, "listCode": code,
          "pods": sorted(p["metadata"]["name"] for p in pods["items"]) if pods else [],
          "otherNamespaceCode": other}
tmp = "/mnt/result.json.tmp"
open(tmp, "w").write(json.dumps(result))
os.rename(tmp, "/mnt/result.json")
print("listed", code, flush=True)
import time
time.sleep(3600)
"""


def test_daemonset_with_hostpath_downward_api_and_token_lists_pods_under_rbac(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    raw.create(RESOURCES["serviceaccounts"], {"metadata": {"name": "lister"}}, namespace)
    raw.create(RESOURCES["roles"], {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}, namespace)
    raw.create(RESOURCES["rolebindings"], {
        "metadata": {"name": "lister-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": namespace}]}, namespace)
    hostdir = f"/var/lib/sim-test-{namespace}"
    env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in (
        ("MY_NODE", "spec.nodeName"), ("MY_POD_IP", "status.podIP"), ("MY_POD", "metadata.name"),
        ("MY_UID", "metadata.uid"))]
    raw.create(RESOURCES["daemonsets"], {
        "metadata": {"name": "lister"},
        "spec": {"selector": {"matchLabels": {"app": "lister"}}, "template": {
            "metadata": {"labels": {"app": "lister"}},
            "spec": {"serviceAccountName": "lister", "nodeSelector": {NODE_LABEL: pool},
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "example.invalid/lister:1",
                                     "command": [PY, "-c", LISTER], "env": env,
                                     "volumeMounts": [{"name": "data", "mountPath": "/mnt"}]}],
                     "volumes": [{"name": "data", "hostPath": {"path": hostdir, "type": "DirectoryOrCreate"}}]}}}},
        namespace)

    for node in sim_nodes:
        result_file = node.layout.host_path(hostdir) / "result.json"
        result = json.loads(wait_for(f"the DaemonSet pod on {node.name} to write {result_file}",
                                     lambda f=result_file: f.exists() and f.read_text(), 60))
        assert result["node"] == node.name
        # the pod's own address (as a CNI gives one), not the node's
        assert result["podIP"] != node.ip and result["podIP"].startswith("127.")
        assert result["namespace"] == namespace
        assert result["listCode"] == 200
        assert result["pod"] in result["pods"]
        assert result["otherNamespaceCode"] == 403  # the Role grants this namespace only
        pod = wait_for("the DaemonSet pod to be Ready", lambda r=result: pod_ready(raw, namespace, r["pod"]), 30)
        assert pod["metadata"]["uid"] == result["uid"]
        assert pod["status"]["podIP"] == result["podIP"] and pod["status"]["hostIP"] == node.ip
        assert pod["status"]["phase"] == "Running"
    pods = raw.list(PODS, namespace, label_selector="app=lister")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(n.name for n in sim_nodes)
    ds = wait_for("the DaemonSet to count 2 ready pods",
                  lambda: (d := raw.get(RESOURCES["daemonsets"], "lister", namespace))["status"].get("numberReady")
                  == 2 and d, 30)
    assert ds["status"]["desiredNumberScheduled"] == 2


# --- DRA ---------------------------------------------------------------------------------------

class SimTestDriver:
    """A minimal DRA kubelet plugin for one simulated node, served over real gRPC sockets."""

    def __init__(self, raw: RawClient, node: NodeAgent, driver: str) -> None:
        self.raw, self.node, self.driver = raw, node, driver
        self.vendor_kind = f"{driver}/device"
        self.fail_with = ""
        self.hold_prepare: threading.Event | None = None  # set: answer NodePrepareResources
        self.prepared: list[str] = []
        self.unprepared: list[str] = []
        self.on_unprepare: Callable[[list[node_service.ClaimRef]], None] | None = None
        self.lock = threading.Lock()
        self.dev = node.layout.dev_dir / f"{driver}-dev0"
        if not self.dev.exists():
            os.mknod(self.dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        self.cdi_dir = node.layout.root / "var/run/cdi"
        plugin_dir = node.layout.plugins_dir / driver
        self.dra_socket = plugin_dir / "dra.sock"
        self.reg_socket = node.layout.registry_dir / f"{driver}-reg.sock"
        self.servers: list[Any] = []

    def prepare_claims(self, claims: list[node_service.ClaimRef]) -> dict[str, node_service.PrepareResult]:
        out = {}
        for claim in claims:
            with self.lock:
                self.prepared.append(claim.uid)
                error = self.fail_with
            if self.hold_prepare is not None:
                self.hold_prepare.wait(60)
            if error:
                out[claim.uid] = node_service.PrepareResult(error=error)
                continue
            name = f"{claim.uid}-dev0"
            spec = Spec(kind=self.vendor_kind, devices=[Device(name=name, edits=ContainerEdits(
                env=["SIM_TEST_DEVICE=dev0", f"SIM_TEST_CLAIM={claim.name}"],
                device_nodes=[DeviceNode(path="/dev/sim-test/dev0", host_path=str(self.dev), type="c",
                                         major=1, minor=3, file_mode=0o666)]))])
            write_spec(self.cdi_dir, f"{self.driver}-claim_{claim.uid}", spec)
            out[claim.uid] = node_service.PrepareResult(devices=[node_service.PreparedDevice(
                request_names=[], pool_name=self.node.name, device_name="dev0",
                cdi_device_ids=[f"{self.vendor_kind}={name}"])])
        return out

    def unprepare_claims(self, claims: list[node_service.ClaimRef]) -> dict[str, str]:
        if self.on_unprepare is not None:
            self.on_unprepare(claims)
        for claim in claims:
            with self.lock:
                self.unprepared.append(claim.uid)
            remove_spec(self.cdi_dir, f"{self.driver}-claim_{claim.uid}")
        return {c.uid: "" for c in claims}

    def start(self) -> SimTestDriver:
        self.servers = [node_service.serve_node_service(self.dra_socket, self)]
        servicer = registration.RegistrationServicer(self.driver, str(self.dra_socket))
        self.servers.append(registration.serve_registration(self.reg_socket, servicer))
        self.raw.create(SLICES, {"metadata": {"name": f"{self.node.name}-{self.driver}"}, "spec": {
            "driver": self.driver, "nodeName": self.node.name,
            "pool": {"name": self.node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "dev0"}]}})
        assert self.node.wait_for_plugin(self.driver, 10), "the node did not register the test plugin"
        return self

    def stop(self) -> None:
        sockets.stop_server(self.servers[1], self.reg_socket)
        sockets.stop_server(self.servers[0], self.dra_socket)
        try:
            self.raw.delete(SLICES, f"{self.node.name}-{self.driver}")
        except ApiError as exc:
            if not exc.not_found:
                raise


@pytest.fixture
def dra_driver(raw: RawClient, sim_nodes: list[NodeAgent]) -> Iterator[SimTestDriver]:
    driver = f"sim-{uuid.uuid4().hex[:6]}.example.com"
    raw.create(CLASSES, {"metadata": {"name": driver}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{driver}"'}}]}})
    plugin = SimTestDriver(raw, sim_nodes[0], driver).start()
    yield plugin
    plugin.stop()
    raw.delete(CLASSES, driver)


def claim_pod(raw: RawClient, namespace: str, plugin: SimTestDriver, pool: str, name: str = "user") -> None:
    raw.create(TEMPLATES, {"metadata": {"name": "one-device"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "dev", "exactly": {"deviceClassName": plugin.driver}}]}}}}, namespace)
    script = ("echo device=$SIM_TEST_DEVICE claim=$SIM_TEST_CLAIM; "
              "test -c /dev/sim-test/dev0 && echo char-device-present; exec sleep 3600")
    body = pod_body(name, ["sh", "-c", script], pool, plugin.node.name,
                    resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-device"}],
                    container={"resources": {"claims": [{"name": "gpu"}]}})
    raw.create(PODS, body, namespace)


def test_claim_is_prepared_cdi_applied_and_unprepared_on_delete(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver,
        kubectl: Callable[..., subprocess.CompletedProcess]) -> None:
    node = dra_driver.node
    claim_pod(raw, namespace, dra_driver, pool)
    pod = wait_for("the claim pod to be Ready", lambda: pod_ready(raw, namespace, "user"), 60)
    claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = raw.get(CLAIMS, claim_name, namespace)
    uid = claim["metadata"]["uid"]
    assert dra_driver.prepared == [uid]
    # inside the container's mount namespace, with its environment, through kubectl exec
    assert kubectl(namespace, "exec", "user", "--", "test", "-c", "/dev/sim-test/dev0").returncode == 0
    absent = kubectl(namespace, "exec", "user", "--", "test", "-c", "/dev/sim-test/absent")
    assert absent.returncode == 1, absent.stderr
    out = kubectl(namespace, "exec", "user", "--", "sh", "-c", "echo $SIM_TEST_DEVICE $SIM_TEST_CLAIM")
    assert out.stdout.decode().split() == ["dev0", claim_name]
    piped = kubectl(namespace, "exec", "-i", "user", "--", "cat", input=b"through-stdin\n")
    assert piped.returncode == 0 and piped.stdout == b"through-stdin\n"
    assert node.exec_in_container(namespace, "user", "main", ["test", "-c", "/dev/sim-test/dev0"]).returncode == 0
    log_file = node.container_log(namespace, "user", "main")
    assert log_file is not None
    text = wait_for("the container's output",
                    lambda: "char-device-present" in log_file.read_text() and log_file.read_text(), 10)
    assert f"device=dev0 claim={claim_name}" in text
    assert not os.path.exists("/dev/sim-test/dev0")  # the device exists only inside the container

    raw.delete(PODS, "user", namespace)
    wait_for("the pod to be deleted by its node", lambda: raw.get_or_none(PODS, "user", namespace) is None, 30)
    assert dra_driver.unprepared == [uid]


def test_failing_prepare_keeps_pod_creating_with_event_until_plugin_succeeds(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    dra_driver.fail_with = "simulated device failure: channel busy"
    claim_pod(raw, namespace, dra_driver, pool)

    def failed_event() -> dict | None:
        for ev in raw.list(EVENTS, namespace)["items"]:
            if ev.get("reason") == "FailedPrepareDynamicResources" and ev["involvedObject"].get("name") == "user":
                return ev
        return None

    event = wait_for("a FailedPrepareDynamicResources event", failed_event, 60)
    assert "simulated device failure: channel busy" in event["message"]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Pod" and event["source"]["host"] == dra_driver.node.name
    pod = get_pod(raw, namespace, "user")
    assert pod["status"]["phase"] == "Pending"
    assert container_status(pod)["state"]["waiting"]["reason"] == "ContainerCreating"
    wait_for("prepare to be retried", lambda: len(dra_driver.prepared) >= 2, 30)

    dra_driver.fail_with = ""
    pod = wait_for("the pod to start once prepare succeeds", lambda: pod_ready(raw, namespace, "user"), 60)
    assert pod["status"]["phase"] == "Running"


def pod_gone(raw: RawClient, namespace: str, name: str) -> None:
    wait_for(f"pod {name} to be deleted by its node", lambda: raw.get_or_none(PODS, name, namespace) is None, 30)


def test_claim_of_a_failed_prepare_is_unprepared_when_the_pod_goes(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    dra_driver.fail_with = "simulated device failure: prepare timed out"
    claim_pod(raw, namespace, dra_driver, pool)
    wait_for("a NodePrepareResources call", lambda: dra_driver.prepared, 60)
    uid = dra_driver.prepared[0]
    raw.delete(PODS, "user", namespace)
    pod_gone(raw, namespace, "user")
    # kubelet records the pod with its claim before calling the driver, so a driver that may
    # have done part of the work always gets the matching NodeUnprepareResources
    assert dra_driver.unprepared == [uid]


def test_prepare_in_flight_is_cancelled_and_its_claim_unprepared_when_the_pod_goes(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    """As kubelet cancels a pod's sync when the pod starts terminating: NodePrepareResources,
    still running in the driver, is cancelled, and the driver gets the claim's NodeUnprepareResources
    at once (the late Unprepare of a Prepare that failed), not when its Prepare answers or kubelet's
    45 s call deadline passes."""
    release = threading.Event()
    dra_driver.hold_prepare = release
    try:
        claim_pod(raw, namespace, dra_driver, pool)
        wait_for("a NodePrepareResources call", lambda: dra_driver.prepared, 60)
        uid = dra_driver.prepared[0]
        raw.delete(PODS, "user", namespace)
        wait_for("NodeUnprepareResources while the driver's Prepare still runs",
                 lambda: dra_driver.unprepared == [uid] and not release.is_set(), 15)
        pod_gone(raw, namespace, "user")
        assert dra_driver.prepared == [uid], "the cancelled Prepare was not retried for a pod that went"
    finally:
        release.set()


def unprepare_failures(raw: RawClient, namespace: str, pod: str) -> int:
    """How often the node reported a failed NodeUnprepareResources for `pod` (Event counts)."""
    return sum(ev.get("count") or 1 for ev in raw.list(EVENTS, namespace)["items"]
               if ev.get("reason") == "FailedUnprepareDynamicResources" and ev["involvedObject"].get("name") == pod)


def test_pod_force_deleted_while_its_driver_is_away_is_unprepared_when_the_driver_is_back(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    """As kubelet's pod worker keeps a terminating pod, its object gone or not, and retries the
    termination until the pod's claims are unprepared: the claim of a failed Prepare whose pod was
    force-deleted while the driver was away gets its late NodeUnprepareResources from that worker
    once the driver registers again."""
    node = dra_driver.node
    dra_driver.fail_with = "simulated device failure: bad config"
    claim_pod(raw, namespace, dra_driver, pool)
    wait_for("a NodePrepareResources call", lambda: dra_driver.prepared, 60)
    uid = dra_driver.prepared[0]
    dra_driver.stop()
    assert node.plugins is not None and node.plugins.wait_for(dra_driver.driver, 10, present=False)
    raw.delete(PODS, "user", namespace, grace_period_seconds=0)
    wait_for("the pod object to go", lambda: raw.get_or_none(PODS, "user", namespace) is None, 10)
    # the worker keeps trying (kubelet: every 10 s at most), not once and then leaving it
    wait_for("a second failed NodeUnprepareResources", lambda: unprepare_failures(raw, namespace, "user") >= 2, 30)
    assert node.worker(namespace, "user") is not None, "the terminating pod's worker went with its claim prepared"
    assert dra_driver.unprepared == []
    dra_driver.start()
    wait_for("the late NodeUnprepareResources", lambda: dra_driver.unprepared == [uid], 30)
    wait_for("the pod's worker to end", lambda: node.worker(namespace, "user") is None, 30)


def test_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    raw.create(CLAIMS, {"metadata": {"name": "shared"}, "spec": {"devices": {"requests": [
        {"name": "dev", "exactly": {"deviceClassName": dra_driver.driver}}]}}}, namespace)
    for name in ("first", "second"):
        raw.create(PODS, pod_body(name, ["sleep", "3600"], pool, dra_driver.node.name,
                                  resourceClaims=[{"name": "gpu", "resourceClaimName": "shared"}],
                                  container={"resources": {"claims": [{"name": "gpu"}]}}), namespace)
        wait_for(f"pod {name} to be Ready", lambda n=name: pod_ready(raw, namespace, n), 60)
    uid = raw.get(CLAIMS, "shared", namespace)["metadata"]["uid"]
    assert dra_driver.prepared == [uid]

    raw.delete(PODS, "first", namespace)
    pod_gone(raw, namespace, "first")
    assert dra_driver.unprepared == []  # the second pod still uses the claim
    assert dra_driver.node.exec_in_container(namespace, "second", "main",
                                             ["test", "-c", "/dev/sim-test/dev0"]).returncode == 0
    raw.delete(PODS, "second", namespace)
    pod_gone(raw, namespace, "second")
    assert dra_driver.unprepared == [uid]


def test_deleted_pod_is_unprepared_before_its_final_status_is_posted(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str, dra_driver: SimTestDriver) -> None:
    claim_pod(raw, namespace, dra_driver, pool)
    wait_for("the claim pod to be Ready", lambda: pod_ready(raw, namespace, "user"), 60)
    seen: list[dict] = []
    dra_driver.on_unprepare = lambda claims: seen.append(container_status(get_pod(raw, namespace, "user")))
    raw.delete(PODS, "user", namespace)
    pod_gone(raw, namespace, "user")
    assert len(seen) == 1
    # the API still shows the container running: the terminated status comes after unprepare
    assert "running" in seen[0]["state"], seen[0]


# --- probes, restarts, termination -----------------------------------------------------------------

def test_exec_readiness_probe_failures_flip_ready(raw: RawClient, namespace: str, sim_nodes: list[NodeAgent],
                                                  pool: str) -> None:
    node = sim_nodes[1]
    probe = {"exec": {"command": ["test", "-f", "/opt/ready"]}, "periodSeconds": 1, "failureThreshold": 1}
    raw.create(PODS, pod_body("probed", ["sleep", "3600"], pool, node.name,
                              volumes=[{"name": "work", "emptyDir": {}}],
                              container={"readinessProbe": probe,
                                         "volumeMounts": [{"name": "work", "mountPath": "/opt"}]}), namespace)
    pod = wait_for("the probed pod to run",
                   lambda: (p := raw.get(PODS, "probed", namespace)).get("status", {}).get("phase") == "Running"
                   and p, 30)
    assert condition(pod, "Ready") == "False"
    assert container_status(pod)["ready"] is False
    assert node.exec_in_container(namespace, "probed", "main", ["touch", "/opt/ready"]).returncode == 0
    wait_for("Ready=True after the probe passes", lambda: pod_ready(raw, namespace, "probed"), 30)
    assert node.exec_in_container(namespace, "probed", "main", ["rm", "/opt/ready"]).returncode == 0
    pod = wait_for("Ready=False after the probe fails",
                   lambda: condition(p := raw.get(PODS, "probed", namespace), "Ready") == "False" and p, 30)
    assert condition(pod, "ContainersReady") == "False"
    assert container_status(pod)["restartCount"] == 0  # readiness failures never restart


BURN = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass\n{}"


def test_exec_probe_cpu_is_counted_for_its_container_timed_out_ones_too(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    """An exec probe runs from the node (nsenter), outside the container's processes; the node
    counts the CPU time it used for the container, of a probe killed for its timeout as well."""
    node = sim_nodes[0]
    passing = {"exec": {"command": [PY, "-c", BURN.format(0.2, "")]}, "periodSeconds": 1, "timeoutSeconds": 5}
    slow = {"exec": {"command": [PY, "-c", BURN.format(0.3, "time.sleep(60)")]}, "periodSeconds": 1,
            "timeoutSeconds": 2, "failureThreshold": 1000}
    raw.create(PODS, pod_body("costly-probe", ["sleep", "3600"], pool, node.name,
                              container={"readinessProbe": passing}), namespace)
    raw.create(PODS, pod_body("slow-probe", ["sleep", "3600"], pool, node.name,
                              container={"livenessProbe": slow}), namespace)
    wait_for("the pod with a costly probe Ready", lambda: pod_ready(raw, namespace, "costly-probe"), 30)
    wait_for("three probes' CPU counted",
             lambda: node.container_probe_cpu_s(namespace, "costly-probe", "main") >= 0.6, 30)
    wait_for("two timed-out probes' CPU counted",
             lambda: node.container_probe_cpu_s(namespace, "slow-probe", "main") >= 0.6, 30)
    for name in ("costly-probe", "slow-probe"):
        main = node.container_main_pid(namespace, name, "main")
        assert main
        times = psutil.Process(main).cpu_times()
        assert times.user + times.system < 0.2  # the container's own process did not burn it
        assert not set(node.container_launcher_pids(namespace, name, "main")) & set(
            node.container_tree_pids(namespace, name, "main"))
    assert container_status(raw.get(PODS, "slow-probe", namespace))["restartCount"] == 0


def test_failing_liveness_probe_restarts_the_container(raw: RawClient, namespace: str,
                                                      sim_nodes: list[NodeAgent], pool: str) -> None:
    node = sim_nodes[0]
    probe = {"exec": {"command": ["sh", "-c", "echo run >> /opt/probed; test -f /opt/alive"]}, "periodSeconds": 1,
             "failureThreshold": 1}
    raw.create(PODS, pod_body("lively", ["sh", "-c", "touch /opt/alive; exec sleep 3600"], pool, node.name,
                              terminationGracePeriodSeconds=1, volumes=[{"name": "work", "emptyDir": {}}],
                              container={"livenessProbe": probe,
                                         "volumeMounts": [{"name": "work", "mountPath": "/opt"}]}), namespace)
    wait_for("the pod with a liveness probe", lambda: pod_ready(raw, namespace, "lively"), 30)
    probed = lambda: node.exec_in_container(namespace, "lively", "main", ["cat", "/opt/probed"]).stdout  # noqa: E731
    wait_for("three passing liveness probes", lambda: probed().count(b"run") >= 3, 30)
    assert container_status(raw.get(PODS, "lively", namespace))["restartCount"] == 0  # passing probes leave it alone
    node.exec_in_container(namespace, "lively", "main", ["rm", "/opt/alive"])
    pod = wait_for("the container to be restarted after failing its liveness probe",
                   lambda: container_status(p := raw.get(PODS, "lively", namespace)).get("restartCount") == 1
                   and p, 30)
    assert container_status(pod)["lastState"]["terminated"]["exitCode"] == 143  # SIGTERM
    reasons = {e["reason"] for e in raw.list(EVENTS, namespace)["items"] if e["involvedObject"]["name"] == "lively"}
    assert {"Unhealthy", "Killing"} <= reasons


HEALTH_SERVER = r"""
import os, sys, time
from cdriver.dra.health import serve_health_tcp
server = serve_health_tcp(int(sys.argv[2]), lambda: "sick" if os.path.exists("/tmp/sick") else "", host=sys.argv[1])
time.sleep(3600)
"""


def test_grpc_probes_call_the_health_service_and_restart_on_not_serving(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    """grpc probes (the kubelet plugin's startup and liveness probes) call grpc.health.v1 on the pod IP."""
    node = sim_nodes[0]
    with socket.socket() as s:
        s.bind((node.ip, 0))
        port = s.getsockname()[1]
    probe = {"grpc": {"port": port, "service": "liveness"}, "periodSeconds": 1, "failureThreshold": 1}
    startup = {**probe, "failureThreshold": 30}  # as the chart's: until the server listens
    raw.create(PODS, pod_body("grpc-probed", [PY, "-c", HEALTH_SERVER, "$(MY_IP)", str(port)], pool, node.name,
                              terminationGracePeriodSeconds=1,
                              container={"startupProbe": startup, "livenessProbe": probe, "env": [
                                  {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}),
               namespace)
    wait_for("the startup probe to pass on SERVING", lambda: pod_ready(raw, namespace, "grpc-probed"), 30)
    node.exec_in_container(namespace, "grpc-probed", "main", ["touch", "/tmp/sick"])
    pod = wait_for("the container to be restarted after NOT_SERVING",
                   lambda: container_status(p := raw.get(PODS, "grpc-probed", namespace)).get("restartCount") == 1
                   and p, 30)
    assert container_status(pod)["lastState"]["terminated"]["exitCode"] == 143  # SIGTERM
    messages = [e["message"] for e in raw.list(EVENTS, namespace)["items"]
                if e["involvedObject"]["name"] == "grpc-probed" and e["reason"] == "Unhealthy"]
    assert 'Liveness probe failed: service unhealthy (responded with "NOT_SERVING")' in messages
    # the restarted container has its own, healthy root (no /tmp/sick): it passes again
    wait_for("the restarted container to pass its probes", lambda: pod_ready(raw, namespace, "grpc-probed"), 30)


def test_crashing_container_is_restarted_with_increasing_restart_count(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    node = sim_nodes[0]
    raw.create(PODS, pod_body("crasher", ["sh", "-c", "echo run; exit 3"], pool, node.name), namespace)
    seen: list[int] = []

    def restarts() -> bool:
        status = container_status(raw.get(PODS, "crasher", namespace))
        count = status.get("restartCount", 0)
        if not seen or count != seen[-1]:
            seen.append(count)
        return count >= 3

    wait_for("three restarts", restarts, 60)
    assert seen == sorted(seen) and len(set(seen)) >= 2
    status = container_status(raw.get(PODS, "crasher", namespace))
    assert status["lastState"]["terminated"]["exitCode"] == 3
    # every run keeps its own log file
    for run in range(3):
        path = node.layout.container_log(namespace, "crasher", raw.get(PODS, "crasher", namespace)["metadata"]["uid"],
                                         "main", run)
        assert "stdout F run" in path.read_text()


def test_killed_container_restarts_and_init_container_runs_first(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    node = sim_nodes[1]
    body = pod_body("with-init", ["sh", "-c", "cat /opt/from-init; exec sleep 3600"], pool, node.name,
                    volumes=[{"name": "work", "emptyDir": {}}],
                    initContainers=[{"name": "init", "image": "example.invalid/unused:1",
                                     "command": ["sh", "-c", "echo prepared-by-init > /opt/from-init"],
                                     "volumeMounts": [{"name": "work", "mountPath": "/opt"}]}],
                    container={"volumeMounts": [{"name": "work", "mountPath": "/opt"}]})
    raw.create(PODS, body, namespace)
    pod = wait_for("the pod with an init container", lambda: pod_ready(raw, namespace, "with-init"), 30)
    init = pod["status"]["initContainerStatuses"][0]
    assert init["state"]["terminated"]["exitCode"] == 0
    log_file = node.container_log(namespace, "with-init", "main")
    wait_for("the main container to read the init output", lambda: "prepared-by-init" in log_file.read_text(), 10)

    first = node.container_pid(namespace, "with-init", "main")
    node.kill_container(namespace, "with-init", "main", signal.SIGKILL)
    pod = wait_for("the killed container to be restarted",
                   lambda: container_status(p := raw.get(PODS, "with-init", namespace)).get("restartCount") == 1
                   and condition(p, "Ready") == "True" and p, 30)
    assert container_status(pod)["lastState"]["terminated"]["exitCode"] == 137
    assert node.container_pid(namespace, "with-init", "main") != first


def test_graceful_termination_sends_sigkill_after_the_grace_period(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    node = sim_nodes[0]
    script = "trap 'echo got-term' TERM; echo started; while true; do sleep 0.1; done"
    raw.create(PODS, pod_body("stubborn", ["sh", "-c", script], pool, node.name,
                              terminationGracePeriodSeconds=1), namespace)
    wait_for("the stubborn pod", lambda: pod_ready(raw, namespace, "stubborn"), 30)
    pid = node.container_main_pid(namespace, "stubborn", "main")
    assert pid
    log_file = node.container_log(namespace, "stubborn", "main")
    raw.delete(PODS, "stubborn", namespace)
    wait_for("the pod to be gone", lambda: raw.get_or_none(PODS, "stubborn", namespace) is None, 30)
    assert "got-term" in log_file.read_text()  # SIGTERM first
    assert not Path(f"/proc/{pid}").exists()  # then killed


def test_configmap_and_secret_reach_env_and_volumes(raw: RawClient, namespace: str,
                                                    sim_nodes: list[NodeAgent], pool: str) -> None:
    node = sim_nodes[1]
    raw.create(RESOURCES["configmaps"], {"metadata": {"name": "settings"},
                                         "data": {"mode": "fast", "file.txt": "cm-file"}}, namespace)
    raw.create(RESOURCES["secrets"], {"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}}, namespace)
    body = pod_body("configured", ["sleep", "3600"], pool, node.name,
                    volumes=[{"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "file.txt",
                                                                                          "path": "sub/f.txt"}]}},
                             {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}}],
                    container={"env": [
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                        {"name": "COMBINED", "value": "$(MODE)-$(PASSWORD)"}],
                        "volumeMounts": [{"name": "cfg", "mountPath": "/srv", "readOnly": True},
                                         {"name": "sec", "mountPath": "/media"}]})
    raw.create(PODS, body, namespace)
    wait_for("the configured pod", lambda: pod_ready(raw, namespace, "configured"), 30)
    out = node.exec_in_container(namespace, "configured", "main", ["sh", "-c",
                                 "echo $COMBINED; cat /srv/sub/f.txt; echo; cat /media/password; echo;"
                                 " stat -c %a /media/password; touch /srv/x 2>/dev/null || echo ro"])
    assert out.stdout.decode().split() == ["fast-s3cret", "cm-file", "s3cret", "400", "ro"]


# --- kubelet API: kubectl logs, TLS client authentication --------------------------------------

def test_kubectl_logs_current_previous_and_follow(raw: RawClient, namespace: str, sim_nodes: list[NodeAgent],
                                                 pool: str, cluster: Any,
                                                 kubectl: Callable[..., subprocess.CompletedProcess]) -> None:
    node = sim_nodes[1]
    script = ("n=$(cat /opt/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /opt/n; echo run-$n; "
              "[ $n -ge 2 ] || exit 1; echo waiting; while [ ! -f /opt/go ]; do sleep 0.05; done; "
              "echo after-go; exec sleep 3600")
    raw.create(PODS, pod_body("logger", ["sh", "-c", script], pool, node.name,
                              volumes=[{"name": "work", "emptyDir": {}}],
                              container={"volumeMounts": [{"name": "work", "mountPath": "/opt"}]}), namespace)
    wait_for("the second run",
             lambda: container_status(raw.get(PODS, "logger", namespace)).get("restartCount") == 1
             and b"waiting" in kubectl(namespace, "logs", "logger").stdout, 60)
    assert kubectl(namespace, "logs", "logger").stdout == b"run-2\nwaiting\n"
    assert kubectl(namespace, "logs", "logger", "--previous").stdout == b"run-1\n"
    assert kubectl(namespace, "logs", "logger", "--tail=1").stdout == b"waiting\n"
    stamped = kubectl(namespace, "logs", "logger", "--timestamps").stdout.decode().splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["run-2", "waiting"]

    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    follower = subprocess.Popen([str(cluster.binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), "-n",
                                 namespace, "logs", "-f", "logger"], stdout=subprocess.PIPE, env=env)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"run-2\n"
        assert follower.stdout.readline() == b"waiting\n"
        node.exec_in_container(namespace, "logger", "main", ["touch", "/opt/go"])
        assert follower.stdout.readline() == b"after-go\n"  # streamed while kubectl keeps following
        assert follower.poll() is None
    finally:
        follower.kill()
        follower.wait()


def _kubelet_get(node: NodeAgent, path: str, cert: Path, key: Path, ca: Path) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection((node.ip, node.kubelet_server.port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname=node.ip) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {node.ip}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_kubelet_api_serves_only_the_api_servers_client_certificate(
        cluster: Any, sim_nodes: list[NodeAgent], tmp_path: Path) -> None:
    node = sim_nodes[0]
    files = cluster.pki
    registered = cluster.raw.get(NODES, node.name)
    assert registered["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == node.kubelet_server.port
    code, body = _kubelet_get(node, "/healthz", files.kubelet_client_cert, files.kubelet_client_key, files.ca_cert)
    assert (code, body) == (200, b"ok")
    # signed by the cluster CA, but not the API server's kubelet client: forbidden
    code, body = _kubelet_get(node, "/healthz", files.admin_cert, files.admin_key, files.ca_cert)
    assert code == 403 and pki.ADMIN_USER.encode() in body
    # signed by another CA: the TLS handshake fails
    other = pki.make_ca("someone-else")
    pair = pki.issue_cert(other, pki.KUBELET_CLIENT_USER, client=True)
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_bytes(pair.cert_pem())
    key.write_bytes(pair.key_pem())
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        _kubelet_get(node, "/healthz", cert, key, files.ca_cert)


# --- faults on demand ---------------------------------------------------------------------------

def test_dropped_plugin_socket_unregisters_the_driver_and_its_slices_go(
        raw: RawClient, sim_nodes: list[NodeAgent], dra_driver: SimTestDriver) -> None:
    node = dra_driver.node
    slice_name = f"{node.name}-{dra_driver.driver}"
    assert raw.get_or_none(SLICES, slice_name) is not None
    wipe_delay = node.options.slice_wipe_delay
    node.options.slice_wipe_delay = 0.5
    try:
        removed = node.drop_plugin_socket(dra_driver.driver)
        assert not removed.exists()
        assert node.plugins is not None and node.plugins.wait_for(dra_driver.driver, 10, present=False)
        wait_for("the unregistered driver's ResourceSlice to be deleted",
                 lambda: raw.get_or_none(SLICES, slice_name) is None, 20)
    finally:
        node.options.slice_wipe_delay = wipe_delay


def test_restarted_agent_keeps_its_containers_running_and_keeps_counting_restarts(
        raw: RawClient, namespace: str, sim_nodes: list[NodeAgent], pool: str) -> None:
    """As with kubelet: a node agent restart leaves the containers running and takes them back."""
    node = sim_nodes[1]
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    raw.create(PODS, pod_body("survivor", ["sleep", "3600"], pool, node.name,
                              container={"readinessProbe": probe}), namespace)
    before = container_status(wait_for("the pod before the restart", lambda: pod_ready(raw, namespace, "survivor"), 30))
    first = node.container_pid(namespace, "survivor", "main")
    node.restart()
    # the new pod worker takes the running container back (it starts from the pod list, like kubelet)
    def taken_back() -> int | None:
        worker = node.worker(namespace, "survivor")
        live = worker.container_info("main") if worker else None
        return live.proc.pid if live else None

    taken = wait_for("the container to be taken back", taken_back, 30)
    assert taken == first  # the same process, not a new one
    assert first is not None and Path(f"/proc/{first}").exists()
    pod = wait_for("the pod to be Ready after the restart", lambda: pod_ready(raw, namespace, "survivor"), 30)
    after = container_status(pod)
    assert after["restartCount"] == 0 and after["containerID"] == before["containerID"]
    assert after["state"]["running"]["startedAt"] == before["state"]["running"]["startedAt"]
    assert condition(raw.get(NODES, node.name), "Ready") == "True"
    node.kill_container(namespace, "survivor", "main")  # the taken-back container is watched like any other
    pod = wait_for("the container to restart once",
                   lambda: (p := pod_ready(raw, namespace, "survivor"))
                   and container_status(p).get("restartCount") == 1 and p, 30)
    assert node.container_pid(namespace, "survivor", "main") not in (None, first)


def test_container_process_has_private_dev_mounts_and_hostname(tmp_path: Path) -> None:
    """The launcher alone (no cluster): namespaces, device nodes, read-only binds, start errors."""
    from cdriver.sim.node.simulated.container import ContainerProcess, DeviceSpec, LaunchSpec, StartError
    from cdriver.sim.node.simulated.volumes import BindMount

    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("volume-content")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "run-me").write_text("#!/bin/sh\necho ran\n")
    (tools / "run-me").chmod(0o755)
    # device nodes are created from the spec (type, major:minor, mode, owner), not copied from a host device
    script = ("hostname; cat /mnt/f; echo; stat -c '%F|%t:%T|%a|%u:%g' /dev/test/made /dev/test/block; "
              "touch /mnt/x 2>/dev/null || echo read-only; test -c /dev/null && echo null; "
              "/tools/run-me 2>/dev/null || echo noexec")
    spec = LaunchSpec(argv=["sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, hostname="pod-x",
                      devices=[DeviceSpec("/dev/test/made", "c", 234, 0, 0o666, 1000, 2000),
                               DeviceSpec("/dev/test/block", "b", 7, 9, 0o600)],
                      mounts=[BindMount(str(data), "/mnt", read_only=True),
                              BindMount(str(tools), "/tools", options=("noexec",))],
                      staging=str(tmp_path / "stage"))
    proc = ContainerProcess(spec, tmp_path / "spec.json", tmp_path / "logs" / "0.log", "t").start()
    assert proc.wait(10) == 0
    proc.close()
    from cdriver.sim.node.simulated import logs

    out = logs.render(logs.read_entries(tmp_path / "logs" / "0.log")).decode().split("\n")
    assert [line for line in out if line] == [
        "pod-x", "volume-content", "character special file|ea:0|666|1000:2000", "block special file|7:9|600|0:0",
        "read-only", "null", "noexec"]
    assert (tools / "run-me").exists() and not (tmp_path / "data" / "x").exists()
    assert not os.path.exists("/dev/test/made") and socket.gethostname() != "pod-x"
    spec.argv = ["no-such-command-here"]
    with pytest.raises(StartError, match="no-such-command-here"):
        ContainerProcess(spec, tmp_path / "spec2.json", tmp_path / "logs" / "1.log", "t").start()


def test_processes_left_by_a_dead_node_run_are_ended_when_the_node_starts(tmp_path: Path) -> None:
    """A process with a mount from a node's pods directory (left by an older run) is found,
    also once that run's files are gone, and ended."""
    from cdriver.sim.node.simulated.layout import NodeLayout
    from cdriver.sim.node.simulated.leftovers import kill_leftovers, leftover_pids

    layout = NodeLayout.at(tmp_path / "node").ensure()
    hosts = layout.pod_hosts_file("uid-1")
    hosts.parent.mkdir(parents=True)
    hosts.write_text("127.0.0.1\tlocalhost\n")
    left = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             f"mount --bind {hosts} /etc/hosts && echo ready && exec sleep 600"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert left.stdout is not None and left.stdout.readline().strip() == "ready"
        assert leftover_pids(layout.pods_dir) == [left.pid]
        shutil.rmtree(layout.root)  # also found once the dead run's files are gone
        assert leftover_pids(layout.pods_dir) == [left.pid]
        assert leftover_pids(tmp_path / "other") == []
        assert kill_leftovers(layout.pods_dir) == [left.pid]
        assert left.wait(10) == -signal.SIGKILL
    finally:
        left.kill()
        left.wait()


def test_node_that_cannot_start_reports_why_and_leaves_nothing_behind(raw: RawClient, tmp_path: Path) -> None:
    from cdriver.sim.node.simulated.agent import NodeError

    name = f"broken-{uuid.uuid4().hex[:6]}"
    agent = NodeAgent(raw, name, "127.0.1.250", tmp_path / "n", pki_dir=tmp_path / "no-pki",
                      options=NodeOptions.fast())
    with pytest.raises(NodeError, match="kubelet serving certificate"):
        agent.start()
    assert not agent.running
    assert raw.get_or_none(NODES, name) is None
    assert not [t for t in threading.enumerate() if t.name.startswith(f"node-{name}")]
