"""ComputeDomain status from cliques and daemon pods (pure).

- Cliques gate on: ``status.nodes`` is every daemon entry of the domain's cliques plus one entry
  per non-fabric daemon pod (its clique label present and empty).
- Cliques gate off (legacy): daemons write their own fabric entries; entries whose IP no longer
  belongs to a fabric daemon pod of the domain are dropped, non-fabric entries are rebuilt.
- Either way an entry is Ready only while its daemon pod is Ready: a daemon killed outright
  cannot report itself NotReady, kubelet's view of its pod can.
- ``status.status``: Ready unless fewer nodes than ``numNodes`` or any node NotReady; always
  Ready in host-managed mode (meaning: admitted and workload template created); NotReady while
  a problem (e.g. a name conflict) blocks the domain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.imex.config import DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
from cdriver.imex.indices import assign_indices
from cdriver.kube.objects import labels_of

CONDITION_READY = "Ready"

#: Reasons of the Ready condition.
REASON_NODES_READY = "NodesReady"
REASON_AWAITING_WORKLOADS = "AwaitingWorkloads"
REASON_WAITING_FOR_NODES = "WaitingForNodes"
REASON_NODES_NOT_READY = "NodesNotReady"
REASON_HOST_MANAGED = "HostManagedAdmitted"


@dataclass(frozen=True)
class Problem:
    """Something that blocks the domain and that a user must fix (reason + message)."""

    reason: str
    message: str
    #: Worth a Warning Event (a user can act on it); transient states are not.
    warn: bool = True


# --- daemon pods -------------------------------------------------------------------------

def pod_node_name(pod: dict) -> str:
    """Node a daemon pod runs on or is bound for (DaemonSet pods name it in their affinity
    before the scheduler binds them)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                values = field.get("values") or []
                if len(values) == 1:
                    return str(values[0])
    return ""


def pod_ready(pod: dict) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def is_non_fabric(pod: dict) -> bool:
    """The daemon labelled its pod with an empty clique ID: the node has no NVLink fabric."""
    labels = labels_of(pod)
    return constants.LABEL_CLIQUE_ID in labels and labels[constants.LABEL_CLIQUE_ID] == ""


def non_fabric_entries(pods: list[dict]) -> list[dict]:
    """Node entries for daemons on nodes without fabric (index -1, clique "")."""
    out = []
    for pod in pods:
        if not is_non_fabric(pod):
            continue
        name = (pod.get("spec") or {}).get("nodeName") or ""
        ip = (pod.get("status") or {}).get("podIP") or ""
        if not name or not ip:
            continue
        out.append({
            "name": name, "ipAddress": ip, "cliqueID": "", "index": -1,
            "status": constants.STATUS_READY if pod_ready(pod) else constants.STATUS_NOT_READY,
        })
    return out


# --- node list ---------------------------------------------------------------------------

def _clique_entry(daemon: dict) -> dict:
    entry = {
        "name": str(daemon.get("nodeName") or ""),
        "ipAddress": str(daemon.get("ipAddress") or ""),
        "cliqueID": str(daemon.get("cliqueID") or ""),
        "index": int(daemon.get("index", 0) or 0),
        # The CRDs default a missing status to NotReady; write it out so what we compare is
        # what the API server stores.
        "status": str(daemon.get("status") or constants.STATUS_NOT_READY),
    }
    return entry


def _dedup_sorted(entries: list[dict]) -> list[dict]:
    by_name: dict[str, dict] = {}
    for entry in entries:
        if entry.get("name"):
            by_name.setdefault(entry["name"], entry)
    return [by_name[name] for name in sorted(by_name)]


def nodes_from_cliques(cliques: list[dict], pods: list[dict]) -> list[dict]:
    """status.nodes with the cliques gate on: clique daemon entries + non-fabric pods."""
    entries = [_clique_entry(d) for clique in cliques for d in (clique.get("daemons") or [])]
    return _dedup_sorted(entries + non_fabric_entries(pods))


def nodes_legacy(current: list[dict], pods: list[dict]) -> list[dict]:
    """status.nodes with the cliques gate off: keep daemon-written fabric entries whose IP is a
    live fabric daemon pod's, rebuild the non-fabric ones."""
    fabric_ips = {
        (pod.get("status") or {}).get("podIP")
        for pod in pods if not is_non_fabric(pod)
    } - {None, ""}
    ready_ips = {
        (pod.get("status") or {}).get("podIP")
        for pod in pods if not is_non_fabric(pod) and pod_ready(pod)
    } - {None, ""}
    kept = [dict(e) for e in current
            if e.get("cliqueID") and e.get("ipAddress") in fabric_ips]
    for entry in kept:
        if entry.get("ipAddress") not in ready_ips:
            entry["status"] = constants.STATUS_NOT_READY
    return _dedup_sorted(kept + non_fabric_entries(pods))


def aggregate_nodes(current: list[dict], cliques: list[dict], pods: list[dict],
                    cliques_enabled: bool) -> list[dict]:
    """The domain's node list from its cliques and daemon pods (both already filtered)."""
    if cliques_enabled:
        return nodes_from_cliques(cliques, pods)
    return nodes_legacy(current, pods)


# --- clique pruning ----------------------------------------------------------------------

def prune_clique(clique: dict, nodes_with_pods: set[str]) -> list[dict] | None:
    """The clique's daemons without entries for nodes that run no daemon pod of the domain,
    or None when nothing must go."""
    daemons = clique.get("daemons") or []
    kept = [d for d in daemons if d.get("nodeName") in nodes_with_pods]
    if len(kept) == len(daemons):
        return None
    return kept


def demote_unready(daemons: list[dict], ready_nodes: set[str]) -> list[dict] | None:
    """The daemons with every Ready entry of a node whose daemon pod is not Ready turned
    NotReady, or None when nothing changes.

    A daemon writes its own entry, Ready only while its pod is Ready; a daemon killed (SIGKILL,
    out of memory) cannot write NotReady, but kubelet marks its pod not Ready, so the
    controller writes what the daemon would have. A restarted daemon writes Ready again once
    its pod is Ready."""
    changed = False
    out = []
    for daemon in daemons:
        if daemon.get("status") == constants.STATUS_READY and daemon.get("nodeName") not in ready_nodes:
            daemon = {**daemon, "status": constants.STATUS_NOT_READY}
            changed = True
        out.append(daemon)
    return out if changed else None


def corrected_clique(clique: dict, nodes_with_pods: set[str], ready_nodes: set[str],
                     max_nodes: int = DEFAULT_MAX_NODES_PER_IMEX_DOMAIN) -> list[dict] | None:
    """The clique's daemons after pruning entries without a daemon pod, demoting entries
    whose pod is not Ready and giving each entry without a valid index (none, a duplicate, or
    one out of range) the lowest free one; None when the clique is right as it is.

    Daemons write only their own entry, without an index, so daemons joining at once never
    conflict; the controller assigns the indices of all that joined meanwhile in one write."""
    pruned = prune_clique(clique, nodes_with_pods)
    daemons = (clique.get("daemons") or []) if pruned is None else pruned
    demoted = demote_unready(daemons, ready_nodes)
    indexed = assign_indices(demoted if demoted is not None else daemons, max_nodes)
    if indexed.assigned:
        return indexed.entries
    if demoted is not None:
        return demoted
    return pruned


# --- global status -----------------------------------------------------------------------

def global_status(num_nodes: int, nodes: list[dict], host_managed: bool = False,
                  problem: Problem | None = None) -> str:
    """Ready or NotReady per the numNodes rule (numNodes is a minimum)."""
    if problem is not None:
        return constants.STATUS_NOT_READY
    if host_managed:
        return constants.STATUS_READY
    if len(nodes) < num_nodes:
        return constants.STATUS_NOT_READY
    if any(n.get("status") == constants.STATUS_NOT_READY for n in nodes):
        return constants.STATUS_NOT_READY
    return constants.STATUS_READY


def entries_by_status(entries: Iterable[dict]) -> dict[str, int]:
    """Daemon entries (of cliques, or of ``status.nodes``) by status: Ready, else NotReady."""
    counts = {constants.STATUS_READY: 0, constants.STATUS_NOT_READY: 0}
    for entry in entries:
        ready = isinstance(entry, dict) and entry.get("status") == constants.STATUS_READY
        counts[constants.STATUS_READY if ready else constants.STATUS_NOT_READY] += 1
    return counts


def ready_count(nodes: list[dict]) -> int:
    return sum(1 for n in nodes if n.get("status") == constants.STATUS_READY)


def explain(num_nodes: int, nodes: list[dict], template: str, host_managed: bool,
            problem: Problem | None, forced_single: bool = False) -> tuple[str, str]:
    """(reason, message) of the Ready condition."""
    if problem is not None:
        return problem.reason, problem.message
    if host_managed:
        message = (
            f"host-managed IMEX: the domain is admitted and its workload ResourceClaimTemplate "
            f"{template!r} exists. Ready does NOT report the health of the host nvidia-imex "
            "service; the node plugin checks it when a channel is prepared."
        )
        if forced_single:
            message += " allocationMode All was reduced to Single (host-managed mode gives "\
                       "channel 0 only)."
        return REASON_HOST_MANAGED, message
    ready, total = ready_count(nodes), len(nodes)
    if total < num_nodes:
        return REASON_WAITING_FOR_NODES, (
            f"{total} of at least {num_nodes} nodes (spec.numNodes) run a daemon, {ready} ready")
    not_ready = sorted(n["name"] for n in nodes if n.get("status") == constants.STATUS_NOT_READY)
    if not_ready:
        return REASON_NODES_NOT_READY, (
            f"{ready} of {total} nodes ready; not ready: {', '.join(not_ready)}")
    if total == 0:
        return REASON_AWAITING_WORKLOADS, (
            "no node runs a daemon for this domain yet; nodes join when workload pods using "
            f"ResourceClaimTemplate {template!r} are prepared (each workload waits for its own "
            "node's daemon)")
    return REASON_NODES_READY, f"{ready} of {total} nodes ready"


def desired_status(
    current: dict, num_nodes: int, nodes: list[dict], template: str, host_managed: bool,
    problem: Problem | None, generation: int, now: str, forced_single: bool = False,
) -> dict:
    """The full status to write. ``current`` is the status as read; lastTransitionTime is
    kept while the condition's status does not change."""
    status = global_status(num_nodes, nodes, host_managed, problem)
    reason, message = explain(num_nodes, nodes, template, host_managed, problem, forced_single)
    cond_status = "True" if status == constants.STATUS_READY else "False"
    previous = next((c for c in current.get("conditions") or []
                     if c.get("type") == CONDITION_READY), None)
    transition = now
    if previous and previous.get("status") == cond_status and previous.get("lastTransitionTime"):
        transition = previous["lastTransitionTime"]
    out: dict = {"status": status}
    if nodes:
        out["nodes"] = nodes
    out["readyNodes"] = f"{ready_count(nodes)}/{len(nodes)}"
    out["conditions"] = [{
        "type": CONDITION_READY, "status": cond_status, "reason": reason,
        "message": message, "lastTransitionTime": transition,
        "observedGeneration": int(generation or 0),
    }]
    return out


def pruned_fields(sent: dict, stored: dict) -> set[str]:
    """Status fields the API server dropped from a write: top-level keys, and node-entry keys
    as ``nodes.<key>``. An older ComputeDomain CRD (e.g. the upstream driver's, which Helm
    does not upgrade) prunes the fields it does not know."""
    dropped = {key for key in sent if key not in stored}
    stored_nodes = _nodes_key(stored.get("nodes") or [])
    for node in sent.get("nodes") or []:
        kept = stored_nodes.get(node.get("name"))
        if kept is not None:
            dropped |= {f"nodes.{key}" for key in node if key not in kept}
    return dropped


def without_fields(status: dict, fields: set[str]) -> dict:
    """``status`` less the given fields (as `pruned_fields` names them)."""
    if not fields:
        return status
    out = {k: v for k, v in status.items() if k not in fields}
    node_keys = {f.split(".", 1)[1] for f in fields if f.startswith("nodes.")}
    if node_keys and "nodes" in out:
        out["nodes"] = [{k: v for k, v in n.items() if k not in node_keys} for n in out["nodes"]]
    return out


def _nodes_key(nodes: list[dict]) -> dict[str | None, dict]:
    return {n.get("name"): n for n in nodes or []}


def status_differs(current: dict, desired: dict) -> bool:
    """True when writing ``desired`` would change anything (node order is irrelevant)."""
    if current.get("status") != desired.get("status"):
        return True
    if current.get("readyNodes") != desired.get("readyNodes"):
        return True
    if _nodes_key(current.get("nodes") or []) != _nodes_key(desired.get("nodes") or []):
        return True
    return (current.get("conditions") or []) != (desired.get("conditions") or [])
