"""The local control plane is a real Kubernetes 1.37: API groups, CRD CEL validation, RBAC,
the resourceclaim and DaemonSet controllers, the scheduler's DRA allocator, Node heartbeats,
crash recovery of kube-apiserver, and the `cdriver sim cluster` command line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client as k8s_client

from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES, Resource
from cdriver.sim.controlplane import cluster as cluster_mod
from cdriver.sim.controlplane.binaries import ControlPlaneBinaries
from cdriver.sim.node.registration import NOT_READY_TAINT, blocking_taints, node_object, register_test_node
from tests.support.waiting import wait_for

PODS, NODES, CLAIMS = RESOURCES["pods"], RESOURCES["nodes"], RESOURCES["resourceclaims"]
TEST_GROUP = "test.cdriver.dev"


def suffix() -> str:
    return uuid.uuid4().hex[:8]


def pause_pod(name: str, **spec: Any) -> dict:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                     "terminationGracePeriodSeconds": 0, **spec}}


# --- API surface -------------------------------------------------------------------------

def test_resource_k8s_io_v1_is_served(raw: RawClient) -> None:
    group = raw.request("GET", "/apis/resource.k8s.io/v1")
    served = {r["name"] for r in group["resources"]}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served
    version = raw.request("GET", "/version")
    assert (version["major"], version["minor"]) == ("1", "37")


def test_crd_cel_immutability_rule_rejects_update(raw: RawClient, namespace: str) -> None:
    plural = f"widgets{suffix()}"
    crd_name = f"{plural}.{TEST_GROUP}"
    crd = {
        "metadata": {"name": crd_name},
        "spec": {
            "group": TEST_GROUP, "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": f"W{plural[1:]}"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {"size": {"type": "integer"}, "note": {"type": "string"}},
                    "x-kubernetes-validations": [{
                        "rule": "self.size == oldSelf.size", "message": "size is immutable"}],
                }}}},
            }],
        },
    }
    crds = RESOURCES["customresourcedefinitions"]
    raw.create(crds, crd)
    try:
        def established() -> bool:
            conds = raw.get(crds, crd_name).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        wait_for(f"CRD {crd_name} to be established", established, 30)
        res = Resource(TEST_GROUP, "v1", plural, True, f"W{plural[1:]}")

        def create_widget() -> dict | None:
            try:
                return raw.create(res, {"metadata": {"name": "w1"}, "spec": {"size": 1, "note": "a"}},
                                  namespace)
            except ApiError as exc:  # the new resource's endpoint may need a moment
                if exc.not_found:
                    return None
                raise

        widget = wait_for("the custom resource endpoint", create_widget, 30)
        widget["spec"]["note"] = "b"
        widget = raw.update(res, widget, namespace)  # other fields stay mutable
        assert widget["spec"]["note"] == "b"
        widget["spec"]["size"] = 2
        with pytest.raises(ApiError) as err:
            raw.update(res, widget, namespace)
        assert err.value.status == 422
        assert "size is immutable" in err.value.message
        assert raw.get(res, "w1", namespace)["spec"]["size"] == 1
    finally:
        raw.delete(crds, crd_name)


def _token_client(cluster: cluster_mod.LocalCluster, token: str) -> RawClient:
    configuration = k8s_client.Configuration()
    configuration.host = cluster.server
    configuration.ssl_ca_cert = str(cluster.ca_file)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return RawClient(k8s_client.ApiClient(configuration))


def test_rbac_denies_service_account_until_role_is_bound(
    cluster: cluster_mod.LocalCluster, raw: RawClient, namespace: str
) -> None:
    sas = RESOURCES["serviceaccounts"]
    raw.create(sas, {"metadata": {"name": "reader"}}, namespace)
    request = raw.create_subresource(sas, "reader", "token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}}, namespace)
    as_reader = _token_client(cluster, request["status"]["token"])
    configmaps = RESOURCES["configmaps"]

    with pytest.raises(ApiError) as err:
        as_reader.list(configmaps, namespace)
    assert err.value.forbidden
    assert f"system:serviceaccount:{namespace}:reader" in err.value.message

    raw.create(RESOURCES["roles"], {
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    }, namespace)
    raw.create(RESOURCES["rolebindings"], {
        "metadata": {"name": "reader-binding"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    }, namespace)

    def allowed() -> dict | None:
        try:
            return as_reader.list(configmaps, namespace)
        except ApiError as exc:
            if exc.forbidden:
                return None
            raise

    listing = wait_for("the RoleBinding to take effect", allowed, 30)
    assert any(i["metadata"]["name"] == "kube-root-ca.crt" for i in listing["items"])
    with pytest.raises(ApiError) as err:  # the Role grants reads in its namespace only
        as_reader.create(configmaps, {"metadata": {"name": "x"}}, namespace)
    assert err.value.forbidden
    with pytest.raises(ApiError) as err:
        as_reader.list(configmaps, "default")
    assert err.value.forbidden


# --- DRA -----------------------------------------------------------------------------

def test_resourceclaim_controller_creates_claim_from_template(raw: RawClient, namespace: str) -> None:
    raw.create(RESOURCES["resourceclaimtemplates"], {
        "metadata": {"name": "one-device"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "dev", "exactly": {"deviceClassName": f"absent.{TEST_GROUP}"}}]}}},
    }, namespace)
    pod = pause_pod(
        "claimer",
        resourceClaims=[{"name": "dev", "resourceClaimTemplateName": "one-device"}],
        nodeSelector={f"{TEST_GROUP}/no-such-node": "true"},  # never scheduled
    )
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
    created = raw.create(PODS, pod, namespace)

    def claim_status() -> list | None:
        return raw.get(PODS, "claimer", namespace).get("status", {}).get("resourceClaimStatuses")

    statuses = wait_for("pod.status.resourceClaimStatuses", claim_status, 30)
    assert statuses[0]["name"] == "dev"
    claim = raw.get(CLAIMS, statuses[0]["resourceClaimName"], namespace)
    owners = claim["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"], o.get("controller")) for o in owners] == [
        ("Pod", created["metadata"]["uid"], True)]
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "dev"
    request = claim["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == f"absent.{TEST_GROUP}"


def test_scheduler_allocates_device_selected_by_device_class_cel(raw: RawClient, namespace: str) -> None:
    tag = suffix()
    driver = f"sim-{tag}.{TEST_GROUP}"
    node_label = {f"{TEST_GROUP}/dra": tag}
    class_name = f"fast-{tag}.{TEST_GROUP}"
    slices, classes = RESOURCES["resourceslices"], RESOURCES["deviceclasses"]
    with register_test_node(raw, f"dra-node-{tag}", node_label) as node:
        expression = f'device.driver == "{driver}" && device.attributes["{driver}"].model == "fast"'
        raw.create(classes, {"metadata": {"name": class_name},
                             "spec": {"selectors": [{"cel": {"expression": expression}}]}})
        raw.create(slices, {"metadata": {"name": f"slice-{tag}"}, "spec": {
            "driver": driver, "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "dev-slow", "attributes": {"model": {"string": "slow"}}},
                {"name": "dev-fast", "attributes": {"model": {"string": "fast"}}},
            ]}})
        try:
            raw.create(CLAIMS, {"metadata": {"name": "want-fast"}, "spec": {"devices": {"requests": [
                {"name": "dev", "exactly": {"deviceClassName": class_name}}]}}}, namespace)
            pod = pause_pod("user", nodeSelector=node_label,
                            resourceClaims=[{"name": "dev", "resourceClaimName": "want-fast"}])
            pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
            created = raw.create(PODS, pod, namespace)

            bound = wait_for("the scheduler to bind the pod",
                             lambda: raw.get(PODS, "user", namespace)["spec"].get("nodeName"), 60)
            assert bound == node.name
            claim = raw.get(CLAIMS, "want-fast", namespace)
            results = claim["status"]["allocation"]["devices"]["results"]
            assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
                (driver, node.name, "dev-fast")]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [created["metadata"]["uid"]]
        finally:
            raw.delete(slices, f"slice-{tag}")
            raw.delete(classes, class_name)


def test_daemonset_pod_only_for_labelled_node(raw: RawClient, namespace: str) -> None:
    tag = suffix()
    select = {f"{TEST_GROUP}/ds-{tag}": "yes"}
    daemonsets = RESOURCES["daemonsets"]
    with register_test_node(raw, f"ds-a-{tag}") as node_a, register_test_node(raw, f"ds-b-{tag}"):
        raw.create(daemonsets, {"metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": f"agent-{tag}"}},
            "template": {"metadata": {"labels": {"app": f"agent-{tag}"}},
                         "spec": pause_pod("agent", nodeSelector=select)["spec"]},
        }}, namespace)

        def observed(desired: int) -> Callable[[], bool]:
            def check() -> bool:
                ds = raw.get(daemonsets, "agent", namespace)
                status = ds.get("status") or {}
                return (status.get("observedGeneration") == ds["metadata"]["generation"]
                        and status.get("desiredNumberScheduled") == desired)
            return check

        wait_for("the DaemonSet controller to process the DaemonSet", observed(0), 30)
        assert raw.list(PODS, namespace)["items"] == []

        raw.patch(NODES, node_a.name, {"metadata": {"labels": select}})
        pods = wait_for("a DaemonSet pod", lambda: raw.list(PODS, namespace)["items"], 30)
        wait_for("DaemonSet status desiredNumberScheduled=1", observed(1), 30)
        assert len(raw.list(PODS, namespace)["items"]) == 1
        terms = pods[0]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == [node_a.name]
        bound = wait_for("the scheduler to bind the DaemonSet pod",
                         lambda: raw.get(PODS, pods[0]["metadata"]["name"], namespace)["spec"].get("nodeName"),
                         60)
        assert bound == node_a.name


# --- Node strategy ---------------------------------------------------------------------

def test_ready_node_with_heartbeat_becomes_schedulable_and_lease_is_renewed(raw: RawClient) -> None:
    name = f"hb-{suffix()}"
    leases = RESOURCES["leases"]
    with register_test_node(raw, name, heartbeat_interval=0.3) as node:
        assert blocking_taints(raw.get(NODES, name)) == []  # the not-ready taint was cleared
        first = raw.get(leases, name, "kube-node-lease")["spec"]["renewTime"]
        # the heartbeat counts a renewal once the API server answered its write, which a reader can
        # see a moment before: wait for both
        wait_for("a lease renewal by the heartbeat", lambda: node.heartbeat.renewals >= 1
                 and raw.get(leases, name, "kube-node-lease")["spec"]["renewTime"] != first, 10)


def test_node_without_ready_status_keeps_not_ready_taint(raw: RawClient) -> None:
    name = f"unready-{suffix()}"
    body = node_object(name)
    for cond in body["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond.update(status="False", reason="KubeletNotReady")
    created = raw.create(NODES, body)
    try:
        assert NOT_READY_TAINT in [t["key"] for t in blocking_taints(created)]
        # a Ready sibling registered afterwards is cleared, proving the controller has run
        with register_test_node(raw, f"{name}-ok"):
            pass
        assert NOT_READY_TAINT in [t["key"] for t in blocking_taints(raw.get(NODES, name))]
    finally:
        raw.delete(NODES, name)


# --- faults ------------------------------------------------------------------------------

def test_kube_apiserver_crash_is_recovered(
    cluster: cluster_mod.LocalCluster, raw: RawClient, namespace: str
) -> None:
    configmaps = RESOURCES["configmaps"]
    raw.create(configmaps, {"metadata": {"name": "before"}, "data": {"k": "v"}}, namespace)
    old_pid = cluster.pid(cluster_mod.APISERVER)
    cluster.kill(cluster_mod.APISERVER)  # SIGKILL, like a crash
    assert cluster.dead_components() == [cluster_mod.APISERVER]
    with pytest.raises(ApiError) as err:
        raw.get(configmaps, "before", namespace)
    assert err.value.unavailable

    assert cluster.ensure_healthy() == [cluster_mod.APISERVER]
    assert cluster.pid(cluster_mod.APISERVER) not in (None, old_pid)
    assert raw.get(configmaps, "before", namespace)["data"] == {"k": "v"}  # etcd kept the data
    # kube-controller-manager re-established its watches: a new namespace gets its account
    cluster.create_namespace(f"{namespace}-after", timeout=60)
    raw.delete(RESOURCES["namespaces"], f"{namespace}-after")

    cluster.restart_apiserver(kill=False)  # graceful restart on the same port
    assert raw.get(configmaps, "before", namespace)["data"] == {"k": "v"}


def test_start_failure_names_component_and_log_tail(
    cluster: cluster_mod.LocalCluster, tmp_path: Path
) -> None:
    broken = tmp_path / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'E0101 unknown flag: --frobnicate' >&2\nexit 3\n")
    broken.chmod(0o755)
    real = cluster.binaries
    assert real is not None
    bins = ControlPlaneBinaries(real.etcd, broken, real.kube_controller_manager, real.kube_scheduler,
                                real.kubectl)
    local = cluster_mod.LocalCluster(run_dir=tmp_path / "run", binaries=bins, start_timeout=30)
    with pytest.raises(cluster_mod.ClusterError) as err:
        local.start()
    msg = str(err.value)
    assert "kube-apiserver exited with code 3" in msg
    assert "unknown flag: --frobnicate" in msg
    assert (tmp_path / "run" / "logs" / "kube-apiserver.log").is_file()  # kept for inspection
    leftovers = [p.pid for p in psutil.process_iter(["cmdline"])
                 if any(str(tmp_path / "run") in arg for arg in p.info["cmdline"] or [])]
    assert leftovers == []  # etcd, started first, was stopped again
    local.stop()
    assert not (tmp_path / "run").exists()


# --- command line --------------------------------------------------------------------

def test_cli_up_detach_status_down(cluster: cluster_mod.LocalCluster, tmp_path: Path) -> None:
    """`up --detach` prints a kubeconfig kubectl can use; `status` reports; `down` stops all."""
    real = cluster.binaries
    assert real is not None
    env = dict(os.environ, CDRIVER_ETCD_BIN_DIR=str(real.etcd.parent),
               CDRIVER_KUBE_BIN_DIR=str(real.kube_apiserver.parent))
    base = tmp_path / "state"
    cli = [sys.executable, "-m", "cdriver.sim.controlplane.cli"]

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args, "--base-dir", str(base)], env=env, capture_output=True,
                              text=True, timeout=timeout)

    up = run("up", "--detach", timeout=300)
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip())
    try:
        assert kubeconfig.is_file()
        kubectl = subprocess.run([str(real.kubectl), "--kubeconfig", str(kubeconfig), "get", "namespaces",
                                  "-o", "name"], capture_output=True, text=True, timeout=60)
        assert kubectl.returncode == 0, kubectl.stderr
        assert "namespace/kube-system" in kubectl.stdout.split()
        status = run("status")
        assert status.returncode == 0 and status.stdout.startswith("ready"), status.stdout
        components = dict(line.split(": pid ") for line in status.stdout.splitlines() if ": pid " in line)
        assert set(components) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
        assert all(v.endswith(" running") for v in components.values()), status.stdout
        pids = [int(v.split()[0]) for v in components.values()]
        again = run("up", "--detach")
        assert again.returncode != 0 and "already running" in again.stderr
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not kubeconfig.exists()
    assert run("status").stdout.strip() == "stopped"
