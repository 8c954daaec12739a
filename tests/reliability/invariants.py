"""Convergence invariants of the driver, as pure functions over one snapshot.

A snapshot is what `cdriver.diagnose.collect.Collector` reads from the API (one list of plain
dicts per kind), plus what each node holds on disk, under ``nodeFiles``::

    {"nodeFiles": {"<node>": {"checkpoint": {"<claim uid>": {"state", "domainID", "kind", ...}},
                              "checkpointError": "<why it could not be read>" (only then),
                              "cdiClaims": ["<claim uid>", ...],     # claim CDI specs on disk
                              "domainDirs": ["<domain id>", ...]}}}   # plugin per-domain dirs

What the containers themselves show (read with exec) is checked in `tests.reliability.inside`.
Each check returns the violations it finds, one readable line each; an empty list means the
invariant holds. `violations` runs them all. Nothing here talks to the API or the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdriver.api import constants
from cdriver.diagnose.snapshot import Snapshot, allocation_results, claim_node, pod_node, pod_phase, pod_ready
from cdriver.kube.objects import labels_of, meta_of, name_of, namespace_of

COMPLETED = "PrepareCompleted"

Check = Callable[[Snapshot], list[str]]


def uid_of(obj: dict) -> str:
    return str(meta_of(obj).get("uid") or "")


def node_files(snap: Snapshot) -> dict[str, dict[str, Any]]:
    return dict(snap.data.get("nodeFiles") or {})


def domain_uids(snap: Snapshot) -> set[str]:
    """UIDs of the ComputeDomains that exist (deleting ones included)."""
    return {uid_of(cd) for cd in snap.items("computedomains")}


def claims_by_uid(snap: Snapshot) -> dict[str, dict]:
    return {uid_of(c): c for c in snap.items("resourceclaims")}


def driver_results(claim: dict) -> list[dict]:
    return [r for r in allocation_results(claim) if r.get("driver") == constants.DRIVER_NAME]


def claim_domain(claim: dict) -> str:
    """domainID of the claim's allocated opaque config (channel or daemon), or ''."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    for cfg in (alloc.get("devices") or {}).get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if (cfg.get("opaque") or {}).get("driver") == constants.DRIVER_NAME and params.get("domainID"):
            return str(params["domainID"])
    return ""


def is_channel_claim(claim: dict) -> bool:
    return any(str(r.get("device", "")).startswith("channel-") for r in driver_results(claim))


def pod_claims(snap: Snapshot, pod: dict) -> list[dict]:
    """The pod's ResourceClaims that the driver allocated."""
    out = []
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        claim = snap.find("resourceclaims", str(status.get("resourceClaimName") or ""), namespace_of(pod))
        if claim and driver_results(claim):
            out.append(claim)
    return out


def running(pod: dict) -> bool:
    return pod_phase(pod) == "Running" and pod_ready(pod) and not meta_of(pod).get("deletionTimestamp")


def running_workloads(snap: Snapshot) -> list[dict]:
    """Running pods outside the driver's namespace (the users' workloads)."""
    return [p for p in snap.items("pods") if namespace_of(p) != snap.driver_namespace and running(p)]


def channel_claims(snap: Snapshot, pod: dict) -> list[dict]:
    """The pod's channel claims that the driver allocated."""
    return [c for c in pod_claims(snap, pod) if is_channel_claim(c)]


def runs_daemons(snap: Snapshot, domain: str) -> bool:
    """Whether the driver runs IMEX daemons for `domain` (its DaemonSet exists; not so when host-managed)."""
    return any(labels_of(ds).get(constants.LABEL_COMPUTE_DOMAIN) == domain for ds in snap.items("daemonsets"))


def daemon_pods_of(snap: Snapshot, domain: str, node: str = "") -> list[dict]:
    """The IMEX daemon pods of `domain` (on `node`, if given)."""
    return [p for p in snap.pods_in(snap.driver_namespace)
            if labels_of(p).get(constants.LABEL_COMPUTE_DOMAIN) == domain and (not node or pod_node(p) == node)]


def serving_daemons(snap: Snapshot) -> list[tuple[dict, str]]:
    """(workload pod, domain) for each running workload's channel whose domain runs daemons."""
    out = []
    for pod in running_workloads(snap):
        for claim in channel_claims(snap, pod):
            domain = claim_domain(claim)
            if domain and runs_daemons(snap, domain):
                out.append((pod, domain))
    return out


# -- the invariants ---------------------------------------------------------------------------
def running_pods_have_their_channel(snap: Snapshot) -> list[str]:
    """Every running workload pod's channel claim is allocated on its node, reserved for it,
    prepared there (checkpoint) and has its CDI spec there; its node carries the domain label."""
    out = []
    files = node_files(snap)
    for pod in running_workloads(snap):
        node, who = pod_node(pod), f"pod {namespace_of(pod)}/{name_of(pod)} on {pod_node(pod)}"
        for claim in channel_claims(snap, pod):
            uid = uid_of(claim)
            if claim_node(claim) != node:
                out.append(f"{who}: claim {name_of(claim)} is allocated on {claim_node(claim)!r}")
            reserved = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
            if uid_of(pod) not in reserved:
                out.append(f"{who}: claim {name_of(claim)} is not reserved for the pod")
            local = files.get(node)
            if local is None or "checkpointError" in local:
                out.append(f"{who}: node files unreadable: {(local or {}).get('checkpointError', 'none')}")
                continue
            state = (local.get("checkpoint") or {}).get(uid, {}).get("state")
            if state != COMPLETED:
                out.append(f"{who}: claim {name_of(claim)} ({uid}) is {state or 'absent'} in the checkpoint")
            if uid not in (local.get("cdiClaims") or []):
                out.append(f"{who}: claim {name_of(claim)} ({uid}) has no CDI spec on the node")
            domain = claim_domain(claim)
            labels = labels_of(snap.node(node) or {})
            if domain and labels.get(constants.LABEL_COMPUTE_DOMAIN) != domain:
                out.append(f"{who}: node labelled {labels.get(constants.LABEL_COMPUTE_DOMAIN)!r}, "
                           f"its channel is for domain {domain}")
    return out


def running_pods_have_a_ready_imex_daemon(snap: Snapshot) -> list[str]:
    """Every running workload's node runs a Running and Ready IMEX daemon pod of the workload's
    domain, and that node's entry in the domain's clique is Ready (where the driver runs daemons)."""
    out = []
    for pod, domain in serving_daemons(snap):
        node, who = pod_node(pod), f"pod {namespace_of(pod)}/{name_of(pod)} on {pod_node(pod)}"
        ready = [d for d in daemon_pods_of(snap, domain, node) if running(d)]
        if not ready:
            out.append(f"{who}: no Running and Ready IMEX daemon pod of domain {domain} on the node")
            continue
        clique_id = labels_of(ready[0]).get(constants.LABEL_CLIQUE_ID, "")
        clique = snap.find("cliques", f"{domain}.{clique_id}", snap.driver_namespace)
        entry = next((d for d in (clique or {}).get("daemons") or [] if d.get("nodeName") == node), None)
        if clique is None:
            out.append(f"{who}: no clique {domain}.{clique_id} for its IMEX daemon")
        elif (entry or {}).get("status") != constants.STATUS_READY:
            out.append(f"{who}: clique {domain}.{clique_id} lists the node's IMEX daemon as "
                       f"{(entry or {}).get('status') or 'absent'}")
    return out


def each_channel_has_one_owner(snap: Snapshot) -> list[str]:
    """No channel device of a node is allocated to, or prepared for, two claims."""
    out = []
    owners: dict[tuple[str, str], set[str]] = {}
    for claim in snap.items("resourceclaims"):
        for result in driver_results(claim):
            if str(result.get("device", "")).startswith("channel-"):
                owners.setdefault((str(result.get("pool")), str(result["device"])), set()).add(uid_of(claim))
    for node, local in node_files(snap).items():
        for uid, rec in (local.get("checkpoint") or {}).items():
            if rec.get("state") != COMPLETED:
                continue
            for dev in rec.get("devices") or []:
                name = str(dev.get("device_name") or "")
                if name.startswith("channel-"):
                    owners.setdefault((node, name), set()).add(uid)
    for (pool, device), uids in sorted(owners.items()):
        if len(uids) > 1:
            out.append(f"{device} of {pool} is owned by {len(uids)} claims: {sorted(uids)}")
    return out


def node_files_agree_with_the_api(snap: Snapshot) -> list[str]:
    """Each node's prepared claims, CDI specs and per-domain directories belong to claims and
    domains that exist, allocated to that node; every CDI spec has its checkpoint record."""
    out = []
    claims = claims_by_uid(snap)
    domains = domain_uids(snap)
    for node, local in sorted(node_files(snap).items()):
        if "checkpointError" in local:
            out.append(f"{node}: checkpoint unreadable: {local['checkpointError']}")
            continue
        checkpoint = local.get("checkpoint") or {}
        for uid, rec in sorted(checkpoint.items()):
            claim = claims.get(uid)
            state = rec.get("state")
            if state == "PrepareAborted":
                continue
            if claim is None:
                out.append(f"{node}: checkpoint holds {state} claim {rec.get('namespace')}/{rec.get('name')} "
                           f"({uid}) that no longer exists")
            elif claim_node(claim) != node:
                out.append(f"{node}: checkpoint holds claim {uid} allocated on {claim_node(claim)!r}")
        for uid in sorted(local.get("cdiClaims") or []):
            if uid not in claims:
                out.append(f"{node}: CDI spec of claim {uid} that no longer exists")
            elif checkpoint.get(uid, {}).get("state") != COMPLETED:
                out.append(f"{node}: CDI spec of claim {uid} without a completed checkpoint record")
        for domain in sorted(local.get("domainDirs") or []):
            if domain not in domains:
                out.append(f"{node}: directory of domain {domain} that no longer exists")
    return out


def node_labels_agree_with_the_api(snap: Snapshot) -> list[str]:
    """A node labelled for a domain holds an allocated claim of that domain, and the domain exists."""
    out = []
    domains = domain_uids(snap)
    in_use: dict[str, set[str]] = {}
    for claim in snap.items("resourceclaims"):
        if driver_results(claim) and claim_domain(claim):
            in_use.setdefault(claim_node(claim), set()).add(claim_domain(claim))
    for node in snap.items("nodes"):
        label = labels_of(node).get(constants.LABEL_COMPUTE_DOMAIN)
        if not label:
            continue
        if label not in domains:
            out.append(f"node {name_of(node)} is labelled for domain {label}, which does not exist")
        elif label not in in_use.get(name_of(node), set()):
            out.append(f"node {name_of(node)} is labelled for domain {label} but holds none of its claims")
    return out


def no_orphan_objects(snap: Snapshot) -> list[str]:
    """No DaemonSet, clique, daemon pod or claim template for a domain that does not exist."""
    out = []
    domains = domain_uids(snap)
    for kind in ("daemonsets", "resourceclaimtemplates", "pods"):
        for obj in snap.items(kind):
            domain = labels_of(obj).get(constants.LABEL_COMPUTE_DOMAIN)
            if domain and domain not in domains:
                out.append(f"{kind} {namespace_of(obj)}/{name_of(obj)} of domain {domain}, which does not exist")
    for clique in snap.items("cliques"):
        domain = labels_of(clique).get(constants.LABEL_COMPUTE_DOMAIN) or name_of(clique).split(".", 1)[0]
        if domain not in domains:
            out.append(f"clique {name_of(clique)} of domain {domain}, which does not exist")
    return out


def deletions_complete(snap: Snapshot) -> list[str]:
    """Nothing the test deleted is still there (finalizers released, pods gone)."""
    out = []
    for kind in ("computedomains", "pods", "resourceclaims", "daemonsets"):
        for obj in snap.items(kind):
            if meta_of(obj).get("deletionTimestamp"):
                out.append(f"{kind} {namespace_of(obj)}/{name_of(obj)} is still being deleted "
                           f"(finalizers {meta_of(obj).get('finalizers') or []})")
    return out


INVARIANTS: tuple[Check, ...] = (running_pods_have_their_channel, running_pods_have_a_ready_imex_daemon,
                                 each_channel_has_one_owner,
                                 node_files_agree_with_the_api, node_labels_agree_with_the_api,
                                 no_orphan_objects, deletions_complete)


def violations(data: dict[str, Any], checks: tuple[Check, ...] = INVARIANTS) -> list[str]:
    """Every violation of `checks` in the snapshot dict `data`."""
    snap = Snapshot(data)
    return [line for check in checks for line in check(snap)]
