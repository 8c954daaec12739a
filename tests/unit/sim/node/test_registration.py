"""Node and Lease objects of kubelet-less simulated nodes."""

from __future__ import annotations

import datetime as dt

from cdriver.sim.node import registration as nodes

NOW = dt.datetime(2026, 5, 4, 3, 2, 1, 123456, tzinfo=dt.UTC)


def test_node_is_ready_with_capacity_and_address() -> None:
    node = nodes.node_object("n1", {"pool": "a"}, internal_ip="127.0.1.3", now=NOW)
    labels = node["metadata"]["labels"]
    assert labels["pool"] == "a" and labels["kubernetes.io/hostname"] == "n1"
    assert nodes.has_ready_condition(node)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastHeartbeatTime"] == "2026-05-04T03:02:01Z"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert int(node["status"]["capacity"]["pods"]) > 0
    assert {"type": "InternalIP", "address": "127.0.1.3"} in node["status"]["addresses"]
    assert nodes.blocking_taints(node) == []


def test_caller_labels_override_defaults_and_capacity_is_copied() -> None:
    cap = {"cpu": "4", "memory": "8Gi", "pods": "10"}
    node = nodes.node_object("n1", {"kubernetes.io/os": "custom"}, capacity=cap, now=NOW)
    assert node["metadata"]["labels"]["kubernetes.io/os"] == "custom"
    node["status"]["capacity"]["cpu"] = "99"
    assert cap["cpu"] == "4" and node["status"]["allocatable"]["cpu"] == "4"


def test_lease_is_owned_by_the_node_and_uses_micro_time() -> None:
    node = nodes.node_object("n1", now=NOW)
    node["metadata"]["uid"] = "u-1"
    lease = nodes.lease_object(node, now=NOW)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1"}]
    assert lease["spec"]["renewTime"] == "2026-05-04T03:02:01.123456Z"
    assert lease["spec"]["holderIdentity"] == "n1"
    assert lease["spec"]["leaseDurationSeconds"] == nodes.LEASE_DURATION_SECONDS


def test_blocking_taints_ignore_prefer_no_schedule() -> None:
    node = {"spec": {"taints": [
        {"key": "a", "effect": "PreferNoSchedule"},
        {"key": nodes.NOT_READY_TAINT, "effect": "NoSchedule"},
        {"key": "b", "effect": "NoExecute"},
    ]}}
    assert [t["key"] for t in nodes.blocking_taints(node)] == [nodes.NOT_READY_TAINT, "b"]


def test_not_ready_node_has_no_ready_condition() -> None:
    node = nodes.node_object("n1", now=NOW)
    for cond in node["status"]["conditions"]:
        if cond["type"] == "Ready":
            cond["status"] = "False"
    assert not nodes.has_ready_condition(node)
    assert not nodes.has_ready_condition({"metadata": {"name": "bare"}})
