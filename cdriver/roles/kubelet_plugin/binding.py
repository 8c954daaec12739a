"""Binding conditions: channel claims wait in the scheduler, not in ContainerCreating.

With gate ``ComputeDomainBindingConditions`` the node's channel is published with binding
conditions (KEP-5007): the scheduler allocates a claim and then waits in PreBind until the claim's
`status.devices` entry says ``Ready`` (bind the pod) or ``BindingFailed`` (free the allocation and
place the pod again, perhaps on another node). This module decides and writes those conditions
for the claims allocated on this node: it labels the node for the claim's ComputeDomain at once
(so the domain's IMEX daemon starts here while the pod is still being scheduled), reports Ready
when that daemon is Ready in its clique, and a failure with a reason when this node cannot serve
the domain. Kubelet's Prepare then finds everything in place and succeeds at its first call.

`decide` is the pure decision; `Binder` watches claims, applies it and removes a label it set
for claims that went away (deleted or placed elsewhere) before any was prepared here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.imex.names import dns_name
from cdriver.kube.informer import Informer
from cdriver.kube.objects import meta_of, uid_of
from cdriver.roles.kubelet_plugin import device_status
from cdriver.roles.kubelet_plugin.claims import KIND_CHANNEL, ClaimPlan, our_results, plan_claim
from cdriver.roles.kubelet_plugin.errors import REASON_CHANNEL_IN_USE, ClaimError

log = logging.getLogger(__name__)

#: Ready condition reasons and binding failure reasons written here
REASON_NODE_HELD = "NodeHeldByAnotherDomain"
REASON_DAEMON_NOT_READY = "DaemonNotReady"
REASON_DOMAIN_NOT_FOUND = "DomainNotFound"
REASON_DOMAIN_DELETING = "DomainDeleting"
REASON_INVALID_CONFIG = "InvalidConfig"
#: Seconds a claim's ComputeDomain may be missing from the cache before binding fails (a new
#: domain reaches the watch cache within moments of its claim).
DOMAIN_GRACE_S = 30.0
#: Verdicts
READY, WAIT, FAIL = "ready", "wait", "fail"


@dataclass(frozen=True)
class Verdict:
    """What to write for a claim waiting in PreBind."""

    outcome: str  # READY, WAIT or FAIL
    reason: str
    message: str


def waiting_results(claim: dict, node_name: str) -> list[dict]:
    """This driver's allocation results on this node that carry binding conditions."""
    return [r for r in our_results(claim) if r.get("pool") == node_name and r.get("bindingConditions")]


def _condition_true(entry: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in entry.get("conditions") or [])


def decided(claim: dict, results: list[dict]) -> bool:
    """Whether every result already has its Ready or BindingFailed condition True."""
    entries = [e for e in (claim.get("status") or {}).get("devices") or [] if e.get("driver") == constants.DRIVER_NAME]

    def entry_for(r: dict) -> dict | None:
        key = (r.get("pool"), r.get("device"), r.get("shareID") or "")
        return next((e for e in entries if (e.get("pool"), e.get("device"), e.get("shareID") or "") == key), None)

    for r in results:
        entry = entry_for(r)
        if entry is None or not (_condition_true(entry, device_status.CONDITION_READY)
                                 or _condition_true(entry, device_status.CONDITION_BINDING_FAILED)):
            return False
    return True


def decide(node_name: str, plan_error: ClaimError | None, clique_id: str, cd: dict | None,
           label_error: ClaimError | None, ready: bool, why: str, waited: float, timeout: float) -> Verdict:
    """Whether this node can serve a channel claim waiting in PreBind, from what it knows now.

    ``label_error``: labelling the node for the claim's domain failed (another domain holds it,
    or the API server did not answer); ``ready``/``why``: the domain's IMEX daemon on this node;
    ``waited``: seconds since the claim was first seen waiting.
    """
    if plan_error is not None:
        return Verdict(FAIL, REASON_INVALID_CONFIG, str(plan_error))
    if not clique_id:
        return Verdict(FAIL, device_status.REASON_NOT_FABRIC_ATTACHED,
                       f"node {node_name} is not attached to a multi-node NVLink fabric (no clique ID): it cannot "
                       "give this claim an IMEX channel; the scheduler places the pod again")
    if cd is None:
        if waited < DOMAIN_GRACE_S:
            return Verdict(WAIT, device_status.REASON_WAITING_FOR_DAEMON, "the claim's ComputeDomain is not known yet")
        return Verdict(FAIL, REASON_DOMAIN_NOT_FOUND, f"the claim's ComputeDomain was not found after {waited:.0f}s")
    if meta_of(cd).get("deletionTimestamp"):
        return Verdict(FAIL, REASON_DOMAIN_DELETING, f"ComputeDomain {meta_of(cd).get('name')} is being deleted")
    if label_error is not None:
        if label_error.reason == REASON_CHANNEL_IN_USE:
            return Verdict(FAIL, REASON_NODE_HELD, str(label_error))
        return Verdict(WAIT, device_status.REASON_WAITING_FOR_DAEMON, str(label_error))
    if ready:
        return Verdict(READY, device_status.REASON_DAEMON_READY,
                       f"this domain's IMEX daemon on node {node_name} is Ready")
    if waited >= timeout:
        return Verdict(FAIL, REASON_DAEMON_NOT_READY,
                       f"this domain's IMEX daemon on node {node_name} is not Ready after {waited:.0f}s: {why}; "
                       "the scheduler places the pod again")
    return Verdict(WAIT, device_status.REASON_WAITING_FOR_DAEMON,
                   f"waiting for this domain's IMEX daemon on node {node_name}: {why}")


@dataclass
class BindingHooks:
    """What the binder needs of the plugin (the preparer's view of the node)."""

    clique_id: Callable[[], str]
    compute_domain: Callable[[str, str], dict | None]  # (UID, the claim's namespace)
    ensure_label: Callable[[str], object]  # raises ClaimError
    release_label: Callable[[str], None]  # removes the domain's label if nothing here uses it
    node_ready: Callable[[ClaimPlan], tuple[bool, str]]
    daemon_index: Callable[[str], int | None]
    report: Callable[[device_status.ClaimStatusReport], None]


class Binder:
    """Answers the binding conditions of the channel claims allocated on this node."""

    def __init__(self, node_name: str, claims: Informer, hooks: BindingHooks, timeout: float,
                 interval: float = 1.0) -> None:
        self.node_name = node_name
        self.claims = claims
        self.hooks = hooks
        self.timeout = timeout
        self.interval = interval
        self._first_seen: dict[str, float] = {}
        self._labelled: dict[str, str] = {}  # claim UID -> domain this binder labelled the node for
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        claims.add_handler(on_add=self.poke, on_update=lambda _o, _n: self.poke(), on_delete=self.poke)

    def poke(self, *_: object) -> None:
        self._wake.set()

    def start(self) -> Binder:
        self._thread = threading.Thread(target=self._run, name="binding", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the loop must survive; the next sweep retries
                log.exception("binding sweep failed")

    def sweep(self, now: float | None = None) -> None:
        """Evaluate every claim waiting here; release labels of claims that went away."""
        now = time.monotonic() if now is None else now
        here: set[str] = set()
        for claim in self.claims.objects():
            results = waiting_results(claim, self.node_name)
            if not results:
                continue
            uid = uid_of(claim)
            here.add(uid)
            if decided(claim, results):
                continue
            first = self._first_seen.setdefault(uid, now)
            self._evaluate(claim, results, now - first)
        for uid in [u for u in self._first_seen if u not in here]:
            del self._first_seen[uid]
        for uid in [u for u in self._labelled if u not in here]:
            domain = self._labelled.pop(uid)
            if domain not in self._labelled.values():
                self.hooks.release_label(domain)

    def _evaluate(self, claim: dict, results: list[dict], waited: float) -> None:
        hooks, uid = self.hooks, uid_of(claim)
        plan: ClaimPlan | None = None
        plan_error: ClaimError | None = None
        try:
            plan = plan_claim(claim, self.node_name)
        except ClaimError as exc:
            plan_error = exc
        if plan is not None and plan.kind != KIND_CHANNEL:
            return
        clique_id = hooks.clique_id()
        cd = hooks.compute_domain(plan.domain_id, plan.namespace) if plan is not None else None
        label_error: ClaimError | None = None
        ready, why = False, ""
        usable = plan is not None and clique_id and cd is not None and not meta_of(cd).get("deletionTimestamp")
        if usable and plan is not None:
            try:
                hooks.ensure_label(plan.domain_id)
                self._labelled[uid] = plan.domain_id
                ready, why = hooks.node_ready(plan)
            except ClaimError as exc:
                label_error = exc
        verdict = decide(self.node_name, plan_error, clique_id, cd, label_error, ready, why, waited, self.timeout)
        if verdict.outcome == FAIL:
            log.warning("claim %s/%s cannot be bound to node %s: %s", meta_of(claim).get("namespace"),
                        meta_of(claim).get("name"), self.node_name, verdict.message)
        elif verdict.outcome == READY:
            log.info("claim %s/%s: node %s ready, binding may proceed (after %.1fs)", meta_of(claim).get("namespace"),
                     meta_of(claim).get("name"), self.node_name, waited)
        hooks.report(self._report(claim, results, plan, cd, clique_id, verdict))

    def _report(self, claim: dict, results: list[dict], plan: ClaimPlan | None, cd: dict | None, clique_id: str,
                verdict: Verdict) -> device_status.ClaimStatusReport:
        meta, cd_meta = meta_of(claim), meta_of(cd) if cd is not None else {}
        index = self.hooks.daemon_index(plan.domain_id) if plan is not None else None
        return device_status.ClaimStatusReport(
            namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), uid=uid_of(claim),
            devices=tuple(device_status.DeviceRef(str(r.get("pool", "")), str(r.get("device", "")),
                                                  str(r.get("shareID") or "")) for r in results),
            ready=verdict.outcome == READY, reason=verdict.reason, message=verdict.message,
            domain_uid=plan.domain_id if plan is not None else "", domain_name=str(cd_meta.get("name", "")),
            domain_namespace=str(cd_meta.get("namespace", "")), kind=KIND_CHANNEL, clique_id=clique_id,
            daemon_index=index,
            daemon_dns_name=dns_name(plan.domain_id, index)
            if plan is not None and index is not None else "",
            binding_failed=verdict.outcome == FAIL,
        )
