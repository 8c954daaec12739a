"""Binding conditions: what the plugin says of a channel claim waiting in the scheduler's PreBind."""

from __future__ import annotations

from typing import Any

from cdriver.api import constants
from cdriver.roles.kubelet_plugin import binding, device_status
from cdriver.roles.kubelet_plugin.devices import DeviceRef, slice_device
from cdriver.roles.kubelet_plugin.errors import REASON_API_ERROR, REASON_CHANNEL_IN_USE, retryable

NODE = "node-a"
CD_UID = "0d5f8a3e-1111-2222-3333-444455556666"
CD = {"metadata": {"name": "cd", "namespace": "team-a", "uid": CD_UID}}


def claim(uid: str = "c1", node: str = NODE, binding_conditions: bool = True, devices: list | None = None,
          domain: str = CD_UID) -> dict:
    result: dict[str, Any] = {"request": "channel", "driver": constants.DRIVER_NAME, "pool": node,
                              "device": "channel-0", "shareID": f"share-{uid}"}
    if binding_conditions:
        result |= {"bindingConditions": ["Ready"], "bindingFailureConditions": ["BindingFailed"]}
    params = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": domain,
              "allocationMode": "Single"}
    return {"metadata": {"name": f"claim-{uid}", "namespace": "team-a", "uid": uid},
            "status": {"allocation": {"devices": {"results": [result], "config": [
                {"source": "FromClaim", "requests": ["channel"],
                 "opaque": {"driver": constants.DRIVER_NAME, "parameters": params}}]}},
                       "devices": devices or []}}


def verdict(**kw: Any) -> binding.Verdict:
    args: dict[str, Any] = dict(node_name=NODE, plan_error=None, clique_id="x.1", cd=CD, label_error=None,
                                ready=False, why="daemon not Ready", waited=1.0, timeout=120.0)
    args.update(kw)
    return binding.decide(**args)


def test_a_channel_published_with_binding_conditions_binds_to_its_node() -> None:
    channel = slice_device(DeviceRef(constants.DEVICE_TYPE_CHANNEL, 0), binding=True)
    assert (channel["bindsToNode"], channel["bindingConditions"], channel["bindingFailureConditions"]) == (
        True, ["Ready"], ["BindingFailed"])
    assert "bindingConditions" not in slice_device(DeviceRef(constants.DEVICE_TYPE_DAEMON, 0), binding=True)
    assert "bindingConditions" not in slice_device(DeviceRef(constants.DEVICE_TYPE_CHANNEL, 0))


def test_only_this_nodes_results_with_binding_conditions_wait_here() -> None:
    assert len(binding.waiting_results(claim(), NODE)) == 1
    assert binding.waiting_results(claim(node="node-b"), NODE) == []
    assert binding.waiting_results(claim(binding_conditions=False), NODE) == []


def test_a_claim_is_decided_once_its_shares_entry_says_ready_or_failed() -> None:
    entry = {"driver": constants.DRIVER_NAME, "pool": NODE, "device": "channel-0", "shareID": "share-c1",
             "conditions": [{"type": "Ready", "status": "False"}]}
    assert not binding.decided(claim(devices=[entry]), binding.waiting_results(claim(), NODE))
    for kind in ("Ready", "BindingFailed"):
        done = {**entry, "conditions": [{"type": kind, "status": "True"}]}
        assert binding.decided(claim(devices=[done]), binding.waiting_results(claim(), NODE))
    other_share = {**entry, "shareID": "share-c2", "conditions": [{"type": "Ready", "status": "True"}]}
    assert not binding.decided(claim(devices=[other_share]), binding.waiting_results(claim(), NODE))


def test_ready_when_the_domains_daemon_here_is_ready() -> None:
    assert verdict(ready=True).outcome == binding.READY
    waiting = verdict()
    assert (waiting.outcome, waiting.reason) == (binding.WAIT, device_status.REASON_WAITING_FOR_DAEMON)
    assert "daemon not Ready" in waiting.message


def test_binding_fails_where_the_node_cannot_serve_the_domain() -> None:
    held = retryable("node node-a already belongs to ComputeDomain other", reason=REASON_CHANNEL_IN_USE)
    cases = {
        "no clique": (verdict(clique_id=""), device_status.REASON_NOT_FABRIC_ATTACHED),
        "another domain": (verdict(label_error=held), binding.REASON_NODE_HELD),
        "daemon never ready": (verdict(waited=121.0), binding.REASON_DAEMON_NOT_READY),
        "domain deleting": (verdict(cd={"metadata": {"name": "cd", "deletionTimestamp": "x"}}),
                            binding.REASON_DOMAIN_DELETING),
        "domain gone": (verdict(cd=None, waited=binding.DOMAIN_GRACE_S), binding.REASON_DOMAIN_NOT_FOUND),
    }
    for what, (got, reason) in cases.items():
        assert (got.outcome, got.reason) == (binding.FAIL, reason), what
    assert "already belongs to ComputeDomain other" in cases["another domain"][0].message
    assert "not Ready after 121s" in cases["daemon never ready"][0].message


def test_what_may_still_change_waits() -> None:
    assert verdict(cd=None, waited=2.0).outcome == binding.WAIT  # the domain reaches the cache soon
    api = retryable("cannot label node node-a: timeout", reason=REASON_API_ERROR)
    assert verdict(label_error=api).outcome == binding.WAIT


class Claims:
    """The claims informer's part the binder reads."""

    def __init__(self, objects: list[dict]) -> None:
        self.items = objects

    def objects(self) -> list[dict]:
        return list(self.items)

    def add_handler(self, **_: Any) -> None:
        pass


class Node:
    """This node as the binder's hooks see it: its label, its daemons' readiness, the reports."""

    def __init__(self) -> None:
        self.label = ""
        self.ready = False
        self.reports: list[device_status.ClaimStatusReport] = []
        self.released: list[str] = []

    def ensure(self, domain: str) -> None:
        if self.label and self.label != domain:
            raise retryable(f"node node-a already belongs to ComputeDomain {self.label}", reason=REASON_CHANNEL_IN_USE)
        self.label = domain

    def release(self, domain: str) -> None:
        self.released.append(domain)
        if self.label == domain:
            self.label = ""

    def hooks(self) -> binding.BindingHooks:
        return binding.BindingHooks(
            clique_id=lambda: "x.1", compute_domain=lambda uid, _ns: CD if uid == CD_UID else None,
            ensure_label=self.ensure, release_label=self.release,
            node_ready=lambda _plan: (self.ready, "the daemon has not joined its clique"),
            daemon_index=lambda _uid: 2 if self.ready else None, report=self.reports.append)


def test_the_binder_labels_at_once_reports_ready_and_releases_the_label_of_claims_gone_elsewhere() -> None:
    node, claims = Node(), Claims([claim("c1"), claim("c2"), claim("elsewhere", node="node-b")])
    binder = binding.Binder(NODE, claims, node.hooks(), timeout=120.0)  # type: ignore[arg-type]
    binder.sweep(now=0.0)
    assert node.label == CD_UID  # the daemon can start while the pods are still being scheduled
    assert [(r.uid, r.ready, r.reason) for r in node.reports] == [
        ("c1", False, "WaitingForDaemon"), ("c2", False, "WaitingForDaemon")]
    node.ready = True
    binder.sweep(now=5.0)
    ready = node.reports[-1]
    assert (ready.uid, ready.ready, ready.reason, ready.binding_failed) == ("c2", True, "DaemonReady", False)
    assert (ready.devices[0].share_id, ready.daemon_index, ready.domain_name) == ("share-c2", 2, "cd")
    claims.items = [claims.items[1]]  # c1 was freed by the scheduler (placed elsewhere)
    binder.sweep(now=6.0)
    assert node.released == [] and node.label == CD_UID  # c2 still holds the node for the domain
    claims.items = []
    binder.sweep(now=7.0)
    assert node.released == [CD_UID] and node.label == ""


def test_the_binder_fails_a_claim_of_another_domain_and_one_whose_daemon_never_gets_ready() -> None:
    node, claims = Node(), Claims([claim("c1")])
    node.label = "someone-else"
    binder = binding.Binder(NODE, claims, node.hooks(), timeout=60.0)  # type: ignore[arg-type]
    binder.sweep(now=0.0)
    (failed,) = node.reports
    assert (failed.binding_failed, failed.reason) == (True, binding.REASON_NODE_HELD)
    (entry,) = device_status.status_entries(failed, "2026-12-05T00:00:00Z")
    assert [(c["type"], c["status"]) for c in entry["conditions"]] == [("Ready", "False"), ("BindingFailed", "True")]
    node.label = ""
    node.reports.clear()
    binder.sweep(now=30.0)
    assert node.reports[-1].reason == "WaitingForDaemon"
    binder.sweep(now=61.0)
    assert (node.reports[-1].binding_failed, node.reports[-1].reason) == (True, binding.REASON_DAEMON_NOT_READY)
