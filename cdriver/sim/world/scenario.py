"""ComputeDomain workflows on a simulated cluster: objects to apply and the evidence to read.

Used by `cdriver sim demo` and the end-to-end tests. Every `wait_*` has a deadline and, when
it expires, says what it was waiting for and what it saw last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.resources import RESOURCES
from cdriver.sim.images.refs import image_ref

PODS = RESOURCES["pods"]
NODES = RESOURCES["nodes"]
CDS = COMPUTE_DOMAINS
CLIQUES = COMPUTE_DOMAIN_CLIQUES
RCTS = RESOURCES["resourceclaimtemplates"]
CLAIMS = RESOURCES["resourceclaims"]
DAEMONSETS = RESOURCES["daemonsets"]
EVENTS = RESOURCES["events"]

#: the local cluster's workload image (busybox; `cdriver sim images workload`), imported into every
#: real node; simulated nodes ignore images
WORKLOAD_IMAGE = image_ref("workload")
SLEEP_COMMAND = ["sleep", "86400"]


class ScenarioError(CdriverError):
    """A check of the workflow failed; the message says what was expected and what was seen."""


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 90.0, interval: float = 0.25) -> Any:
    """Poll `probe` until it holds; raise ScenarioError naming `what` and the last observation.

    `probe` returns a `Seen`, or any value (truthy = done, and that value is returned).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            seen = probe()
        except ApiError as e:
            seen = Seen(False, None, f"API error: {e}")
        if not isinstance(seen, Seen):
            seen = Seen(bool(seen), seen, repr(seen))
        if seen.ok:
            return seen.value
        if time.monotonic() > deadline:
            raise ScenarioError(f"timed out after {timeout:.0f} s waiting for {what}; last seen: {seen.detail}")
        time.sleep(interval)


@dataclass
class Seen:
    """A probe's answer: whether the condition holds, its value, and what was observed."""

    ok: bool
    value: Any = None
    detail: str = ""


# -- objects --------------------------------------------------------------------------------
def compute_domain(name: str, namespace: str, template: str, mode: str | None = constants.ALLOCATION_MODE_SINGLE,
                   num_nodes: int = 0) -> dict:
    """A ComputeDomain asking for a workload claim template named `template` (`mode` None: no
    allocationMode, the CRD's default)."""
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template}}
    if mode is not None:
        channel["allocationMode"] = mode
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": num_nodes, "channel": channel},
    }


def workload_pod(name: str, namespace: str, template: str, clique: str | None = None,
                 node: str | None = None, group: str = "") -> dict:
    """A workload pod with one channel claim from `template`, pinned to a clique or a node."""
    affinity: dict[str, Any] = {}
    if clique:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": constants.LABEL_NODE_CLIQUE, "operator": "In", "values": [clique]}]}]}}
    if group:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"demo.cdriver/group": group}},
            "topologyKey": "kubernetes.io/hostname"}]}
    spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 2,
        "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
        "containers": [{"name": "workload", "image": WORKLOAD_IMAGE, "command": SLEEP_COMMAND,
                        "resources": {"claims": [{"name": "channel"}]}}],
    }
    if affinity:
        spec["affinity"] = affinity
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"demo.cdriver/group": group or name}},
            "spec": spec}


def ensure_namespace(raw: Any, name: str) -> None:
    try:
        raw.create(RESOURCES["namespaces"], {"metadata": {"name": name}})
    except ApiError as e:
        if not e.already_exists:
            raise


# -- evidence -------------------------------------------------------------------------------
def pod_phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "")


def pod_ready(pod: dict) -> bool:
    return any(cond.get("type") == "Ready" and cond.get("status") == "True"
               for cond in (pod.get("status") or {}).get("conditions") or [])


def pod_waiting_reason(pod: dict) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return waiting.get("reason", "")
    return ""


def wait_pods_running(raw: Any, namespace: str, names: list[str], timeout: float = 120.0) -> list[dict]:
    """Wait until every named pod is Running and Ready; on timeout, say where each one is stuck."""
    def probe() -> Seen:
        pods = [raw.get_or_none(PODS, n, namespace) for n in names]
        ok = all(p and pod_phase(p) == "Running" and pod_ready(p) for p in pods)
        if ok:
            return Seen(True, pods)
        state: dict[str, Any] = {}
        for n, p in zip(names, pods, strict=True):
            if not p:
                state[n] = "missing"
                continue
            last = events_for(raw, namespace, n)[-1:] if not pod_ready(p) else []
            state[n] = [pod_phase(p), pod_waiting_reason(p), p["spec"].get("nodeName", ""),
                        *(f"{e.get('reason')}: {e.get('message', '')[:300]}" for e in last)]
        return Seen(False, pods, json.dumps(state))

    return wait_for(f"pods {names} Running and Ready in {namespace}", probe, timeout)


def claim_of(raw: Any, pod: dict, claim: str = "channel") -> dict:
    """The ResourceClaim generated for the pod's claim `claim`."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == claim and status.get("resourceClaimName"):
            return raw.get(CLAIMS, status["resourceClaimName"], pod["metadata"]["namespace"])
    raise ScenarioError(f"pod {pod['metadata']['name']} has no generated claim {claim!r}")


def allocation(claim: dict) -> list[dict]:
    """[{driver, pool, device, request}] of an allocated claim."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def nodes_labelled(raw: Any, cd_uid: str) -> list[str]:
    items = raw.list(NODES, label_selector=f"{constants.LABEL_COMPUTE_DOMAIN}={cd_uid}")["items"]
    return sorted(n["metadata"]["name"] for n in items)


def daemon_pods(raw: Any, namespace: str, cd_uid: str) -> list[dict]:
    return raw.list(PODS, namespace=namespace, label_selector=f"{constants.LABEL_COMPUTE_DOMAIN}={cd_uid}")["items"]


def clique_entries(raw: Any, namespace: str, cd_uid: str) -> dict[str, list[dict]]:
    """clique object name -> its daemons entries, for one CD."""
    items = raw.list(CLIQUES, namespace=namespace, label_selector=f"{constants.LABEL_COMPUTE_DOMAIN}={cd_uid}")["items"]
    if not items:  # clique objects may carry only their name; fall back to the name prefix
        items = [i for i in raw.list(CLIQUES, namespace=namespace)["items"]
                 if i["metadata"]["name"].startswith(f"{cd_uid}.")]
    return {i["metadata"]["name"]: list(i.get("daemons") or []) for i in items}


def generated_objects(raw: Any, driver_namespace: str, cd_uid: str) -> dict[str, list[str]]:
    """Everything the driver created for a CD that still exists (empty lists when clean)."""
    sel = f"{constants.LABEL_COMPUTE_DOMAIN}={cd_uid}"
    return {
        "resourceclaimtemplates": sorted(f"{t['metadata']['namespace']}/{t['metadata']['name']}"
                                         for t in raw.list(RCTS, label_selector=sel)["items"]),
        "daemonsets": sorted(d["metadata"]["name"] for d in raw.list(DAEMONSETS, label_selector=sel)["items"]),
        "daemon pods": sorted(p["metadata"]["name"] for p in daemon_pods(raw, driver_namespace, cd_uid)),
        "node labels": nodes_labelled(raw, cd_uid),
        "cliques": sorted(clique_entries(raw, driver_namespace, cd_uid)),
    }


def events_for(raw: Any, namespace: str, name: str) -> list[dict]:
    items = raw.list(EVENTS, namespace=namespace, field_selector=f"involvedObject.name={name}")["items"]
    return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
