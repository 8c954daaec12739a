"""Schedulable Node objects without a kubelet: registration and Lease heartbeat.

Node strategy of the local cluster: node-lifecycle-controller stays on, as in a real cluster.
The TaintNodesByCondition admission plugin puts ``node.kubernetes.io/not-ready:NoSchedule``
on every new Node; node-lifecycle-controller removes it once the Node reports Ready=True, and
keeps the Node healthy while its Lease ``kube-node-lease/<node>`` is renewed (as kubelet does,
every ~10 s for a 40 s lease). A Node whose heartbeat stops becomes unreachable after the
node-monitor grace period and gets NoSchedule/NoExecute taints, just like a dead kubelet.

`node_object` and `lease_object` are pure; `NodeHeartbeat` renews the Lease in a thread;
`register_node` creates both and waits until the scheduler may use the Node.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEFAULT_CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}


class NodeRegistrationError(CdriverError):
    """A Node could not be registered or did not become schedulable."""


def rfc3339(now: dt.datetime) -> str:
    """metav1.Time text (seconds)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(now: dt.datetime) -> str:
    """metav1.MicroTime text (microseconds), as Leases need."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def node_object(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    internal_ip: str = "127.0.0.1",
    capacity: dict[str, str] | None = None,
    kubelet_port: int = 10250,
    taints: list[dict[str, str]] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """A Node as kubelet registers it: Ready, with capacity, addresses and node info."""
    now = now or _now()
    stamp = rfc3339(now)
    cap = dict(DEFAULT_CAPACITY if capacity is None else capacity)

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}

    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": list(taints or [])},
        "status": {
            "capacity": cap,
            "allocatable": dict(cap),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated node"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated node"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated node"),
                cond("Ready", "True", "KubeletReady", "simulated node is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "machineID": name, "systemUUID": name, "bootID": name,
                "kernelVersion": "simulated", "osImage": "cdriver simulated node",
                "containerRuntimeVersion": "cdriver-sim://0", "kubeletVersion": "v1.37.2",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        },
    }


def lease_object(node: dict[str, Any], now: dt.datetime | None = None,
                 duration: int = LEASE_DURATION_SECONDS) -> dict[str, Any]:
    """The node's heartbeat Lease, owned by the Node (garbage-collected with it)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta["name"],
                                 "uid": meta["uid"]}],
        },
        "spec": {
            "holderIdentity": meta["name"],
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(now or _now()),
        },
    }


def blocking_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Taints that keep ordinary pods off the Node (NoSchedule / NoExecute)."""
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute")]


def has_ready_condition(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


@dataclass
class NodeHeartbeat:
    """Renews ``kube-node-lease/<node>`` every `interval` seconds in a daemon thread."""

    raw: Any
    node_name: str
    interval: float = HEARTBEAT_SECONDS
    renewals: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def renew(self) -> None:
        """One renewal (merge patch of spec.renewTime)."""
        from cdriver.kube.resources import RESOURCES

        self.raw.patch(RESOURCES["leases"], self.node_name,
                       {"spec": {"renewTime": micro_time(_now())}}, NODE_LEASE_NAMESPACE)
        self.renewals += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.renew()
            except Exception as exc:  # keep beating through API server restarts
                log.warning("lease renewal for node %s failed: %s", self.node_name, exc)

    def start(self) -> NodeHeartbeat:
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.node_name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass
class RegisteredNode:
    """A Node with a running heartbeat; `delete()` stops it and removes the Node."""

    raw: Any
    name: str
    heartbeat: NodeHeartbeat

    def stop(self) -> None:
        """Stop renewing the Lease (the Node turns unreachable after the grace period)."""
        self.heartbeat.stop()

    def delete(self) -> None:
        """Stop the heartbeat and delete the Node (its Lease is garbage-collected)."""
        from cdriver.kube.errors import ApiError
        from cdriver.kube.resources import RESOURCES

        self.stop()
        try:
            self.raw.delete(RESOURCES["nodes"], self.name)
        except ApiError as exc:
            if not exc.not_found:
                raise

    def __enter__(self) -> RegisteredNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


def wait_schedulable(raw: Any, name: str, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the Node is Ready and carries no NoSchedule/NoExecute taint."""
    from cdriver.kube.resources import RESOURCES

    deadline = time.monotonic() + timeout
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        node = raw.get(RESOURCES["nodes"], name)
        if has_ready_condition(node) and not blocking_taints(node):
            return node
        time.sleep(0.1)
    raise NodeRegistrationError(
        f"node {name} not schedulable after {timeout:.0f} s (taints {blocking_taints(node)}, "
        f"Ready={has_ready_condition(node)}); node-lifecycle-controller removes the "
        f"{NOT_READY_TAINT} taint of a Ready node: check kube-controller-manager's log")


def register_node(
    raw: Any,
    name: str,
    labels: dict[str, str] | None = None,
    *,
    internal_ip: str = "127.0.0.1",
    capacity: dict[str, str] | None = None,
    heartbeat_interval: float = HEARTBEAT_SECONDS,
    wait: bool = True,
    timeout: float = 30.0,
) -> RegisteredNode:
    """Create a Ready Node and its Lease, start the heartbeat, and (by default) wait until
    node-lifecycle-controller has cleared the not-ready taint."""
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    body = node_object(name, labels, internal_ip=internal_ip, capacity=capacity)
    created = raw.create(RESOURCES["nodes"], body)
    if not has_ready_condition(created):  # status is normally kept on create, as for kubelet
        created["status"] = body["status"]
        created = raw.update_status(RESOURCES["nodes"], created)
    lease = lease_object(created)
    try:
        raw.create(RESOURCES["leases"], lease, NODE_LEASE_NAMESPACE)
    except ApiError as exc:  # a Lease left by an earlier Node of the same name
        if not exc.already_exists:
            raise
        old = raw.get(RESOURCES["leases"], name, NODE_LEASE_NAMESPACE)
        lease["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        raw.update(RESOURCES["leases"], lease, NODE_LEASE_NAMESPACE)
    heartbeat = NodeHeartbeat(raw, name, heartbeat_interval).start()
    registered = RegisteredNode(raw, name, heartbeat)
    if wait:
        try:
            wait_schedulable(raw, name, timeout)
        except Exception:
            registered.delete()
            raise
    return registered


#: Name used by tests: a Node that the scheduler and the DaemonSet controller will use.
register_test_node = register_node
