"""Real nodes against the real control plane: kubelet v1.37 registers its Node, containerd runs
pods in runc containers on the pod network, `kubectl logs`/`exec` reach kubelet through the API
server, pods reach the API server and each other across nodes, and stopping a node leaves nothing
behind on the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdriver.kube.resources import RESOURCES
from cdriver.sim.controlplane.binaries import control_plane_binaries
from cdriver.sim.controlplane.cluster import LocalCluster
from cdriver.sim.node.real import cgroups
from cdriver.sim.node.real.fleet import RealFleet, RealNodeSpec
from cdriver.sim.node.real.images import node_images
from cdriver.sim.node.real.plan import API_SERVICE_IP, API_SERVICE_PORT

NODES = ("real-a", "real-b")


@dataclass
class RealWorld:
    cluster: LocalCluster
    fleet: RealFleet
    busybox: str
    kubectl: Path

    def kubectl_run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.kubectl), "--kubeconfig", str(self.cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def real() -> Iterator[RealWorld]:
    base = Path(f"/tmp/cdi-{os.getuid()}-rn")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    fleet = RealFleet(base)
    fleet.start_proxy()
    cluster = LocalCluster(run_dir=base / "cluster", egress_proxy=fleet.egress_socket)
    try:
        cluster.start()
        images = node_images(driver=False)
        fleet.start(cluster, [RealNodeSpec(n, {"cdriver.test/real": "true"}) for n in NODES], images, base / "nodes")
        yield RealWorld(cluster, fleet, images.refs["workload"], control_plane_binaries(echo=False).kubectl)
    finally:
        fleet.stop()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def run_pod(world: RealWorld, name: str, node: str, script: str, namespace: str = "default") -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": world.busybox, "imagePullPolicy": "Never",
                                    "command": ["/bin/sh", "-c", script]}]}}
    world.cluster.raw.create(RESOURCES["pods"], pod, namespace)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = world.cluster.raw.get(RESOURCES["pods"], name, namespace)
        if got.get("status", {}).get("phase") == "Running" and got["status"].get("podIP"):
            return got
        time.sleep(0.3)
    raise AssertionError(f"pod {name} not Running on {node}: {got.get('status')}")


def test_kubelet_registers_a_ready_node_with_its_namespace_address(real: RealWorld) -> None:
    for node in real.fleet.nodes:
        obj = real.cluster.raw.get(RESOURCES["nodes"], node.name)
        addresses = {a["type"]: a["address"] for a in obj["status"]["addresses"]}
        info = obj["status"]["nodeInfo"]
        assert addresses["InternalIP"] == node.ip
        assert info["kubeletVersion"] == "v1.37.2"
        assert info["containerRuntimeVersion"] == "containerd://2.4.2"
        assert obj["metadata"]["labels"]["cdriver.test/real"] == "true"


def test_pod_runs_in_runc_under_the_nodes_cgroup_with_logs_and_exec(real: RealWorld) -> None:
    node = real.fleet.nodes[0]
    pod = run_pod(real, "logs-exec", node.name, "echo started-in-runc; sleep 3600")
    assert pod["status"]["podIP"].startswith("10.202.1.")
    deadline = time.monotonic() + 20
    while "started-in-runc" not in (logs := real.kubectl_run("logs", "logs-exec").stdout):
        assert time.monotonic() < deadline, f"no log line; kubectl logs said: {logs!r}"
        time.sleep(0.3)
    out = real.kubectl_run("exec", "logs-exec", "--", "cat", "/proc/self/cgroup")
    assert out.returncode == 0, out.stderr
    assert f"{node.plan.cgroup}/kubepods/" in out.stdout
    hostname = real.kubectl_run("exec", "logs-exec", "--", "cat", "/proc/sys/kernel/hostname")
    assert hostname.stdout.strip() == "logs-exec"


def test_pods_reach_each_other_across_nodes_and_the_api_server(real: RealWorld) -> None:
    server = run_pod(real, "listener", NODES[1], "echo pong | nc -l -p 5001; sleep 3600")
    client = run_pod(real, "caller", NODES[0], "sleep 3600")
    assert server["status"]["podIP"].startswith("10.202.2.")
    out = subprocess.CompletedProcess([], 1)
    for _ in range(20):  # the listener may not be listening yet
        out = real.kubectl_run("exec", "caller", "--", "sh", "-c",
                               f"echo ping | nc -w 2 {server['status']['podIP']} 5001")
        if "pong" in out.stdout:
            break
        time.sleep(0.3)
    assert "pong" in out.stdout, out
    # the `kubernetes` Service address answers like the API server (plain HTTP to its TLS port)
    env = real.kubectl_run("exec", "caller", "--", "sh", "-c", "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    assert env.stdout.strip() == f"{API_SERVICE_IP}:{API_SERVICE_PORT}"
    request = "printf 'GET /version HTTP/1.0\\r\\n\\r\\n'"
    probe = real.kubectl_run("exec", client["metadata"]["name"], "--", "sh", "-c",
                             f"{request} | nc -w 3 {API_SERVICE_IP} {API_SERVICE_PORT}")
    assert "Client sent an HTTP request to an HTTPS server" in probe.stdout, probe


def test_kubelet_restart_keeps_the_running_container(real: RealWorld) -> None:
    node = real.fleet.nodes[1]
    before = run_pod(real, "survivor", node.name, "sleep 3600")["status"]["containerStatuses"][0]
    node.restart_kubelet()
    node.wait_ready(real.cluster.raw)  # the new kubelet's heartbeat
    node.wait_pods_synced(real.cluster.raw)  # and its syncs of every pod: a restart would show as a new container ID
    after = real.cluster.raw.get(RESOURCES["pods"], "survivor", "default")["status"]["containerStatuses"][0]
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0 and "running" in after["state"]
    assert real.kubectl_run("exec", "survivor", "--", "true").returncode == 0


def test_stopping_a_node_leaves_no_process_mount_cgroup_or_namespace(real: RealWorld, tmp_path: Path) -> None:
    base = Path(f"/tmp/cdi-{os.getuid()}-rn2")
    shutil.rmtree(base, ignore_errors=True)
    fleet = RealFleet(base)
    images = node_images(driver=False)
    try:
        node = fleet.start(real.cluster, [RealNodeSpec("real-gone")], images, base / "nodes")[0]
        run_pod(real, "doomed", "real-gone", "sleep 3600")
        assert cgroups.pids(node.plan.cgroup)
    finally:
        problems = fleet.stop()
    assert problems == []
    assert not cgroups.pids(node.plan.cgroup)
    assert not any((h / node.plan.cgroup.lstrip("/")).exists() for h in cgroups.hierarchies())
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"cdr{fleet.tag}-" not in netns
    assert str(base) not in Path("/proc/self/mountinfo").read_text()
    real.cluster.raw.delete(RESOURCES["pods"], "doomed", "default", grace_period_seconds=0)
    shutil.rmtree(base, ignore_errors=True)
