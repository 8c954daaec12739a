"""Per-workload-pod links: claim reference, allocation, node label, daemon, clique or host socket,
CDI device ID, and the device inside the container. Each returns one `Link` for one pod."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.cdi.model import qualified_name
from cdriver.diagnose import names
from cdriver.diagnose.causes import CAUSES
from cdriver.diagnose.domain_links import REPEATS_STABLE, SETTLE_SECONDS, hidden, link
from cdriver.diagnose.model import Link, Verdict
from cdriver.diagnose.snapshot import (
    Snapshot,
    allocation_results,
    claim_node,
    event_count,
    event_line,
    pod_ip,
    pod_node,
    pod_phase,
    pod_ready,
    pod_restarts,
    pod_waiting,
)
from cdriver.kube.objects import labels_of, name_of, namespace_of, uid_of

#: Warning reasons of the IMEX daemon that mean nvidia-imex could not start or keeps dying.
DAEMON_FAILURE_REASONS = (names.EVENT_IMEX_START_FAILED, names.EVENT_IMEX_PORT_CONFLICT,
                          names.EVENT_IMEX_RESTARTED)
FAILED_PREPARE = names.EVENT_FAILED_PREPARE
FAILED_SCHEDULING = names.EVENT_FAILED_SCHEDULING


@dataclass
class Workload:
    """One workload pod and the claim it takes from the domain's template."""

    pod: dict
    claim_ref: str  # the pod's spec.resourceClaims[].name
    claim: dict | None = None

    @property
    def label(self) -> str:
        return f"pod {namespace_of(self.pod)}/{name_of(self.pod)}"

    @property
    def started(self) -> bool:
        """Containers started: kubelet got the claim's CDI IDs from Prepare."""
        if pod_phase(self.pod) in ("Running", "Succeeded"):
            return True
        return any((s.get("state") or {}).get("running") or s.get("started")
                   for s in (self.pod.get("status") or {}).get("containerStatuses") or [])

    @property
    def prepared(self) -> bool:
        """Kubelet got past Prepare: a container started, or the pod's sandbox exists."""
        conditions = (self.pod.get("status") or {}).get("conditions") or []
        return self.started or any(c.get("type") == names.CONDITION_READY_TO_START and c.get("status") == "True"
                                   for c in conditions if isinstance(c, dict))

    @property
    def node(self) -> str:
        return pod_node(self.pod) or (claim_node(self.claim) if self.claim else "")

    def results(self) -> list[dict]:
        return [r for r in allocation_results(self.claim or {}) if r.get("driver") == constants.DRIVER_NAME]


def claim_name_of(pod: dict, ref: str) -> str:
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == ref:
            return str(status.get("resourceClaimName") or "")
    for claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if claim.get("name") == ref and claim.get("resourceClaimName"):
            return str(claim["resourceClaimName"])
    return ""


def claim_users(pod: dict, claim_ref: str) -> list[str]:
    """Names of the containers (init containers first) that list the pod claim in resources.claims."""
    spec = pod.get("spec") or {}
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    return [str(c.get("name")) for c in containers
            if any(r.get("name") == claim_ref for r in (c.get("resources") or {}).get("claims") or [])]


def claim_cdi_id(claim_uid: str, device: str) -> str:
    """The CDI device ID the kubelet plugin returns for a claim's device (``<kind>=<claim uid>-<device>``)."""
    return qualified_name(constants.CDI_KIND_CLAIM, f"{claim_uid}-{device}")


def first_clause(message: str, limit: int = 200) -> str:
    """The message up to its first ';' (Event messages put the fix after it), at most `limit` characters."""
    head = message.split("; ", 1)[0]
    return head if len(head) <= limit else head[: limit - 3] + "..."


def _warnings(snap: Snapshot, obj: dict, reasons: tuple[str, ...] = ()) -> list[dict]:
    events = snap.events_about(name_of(obj), namespace_of(obj))
    return [e for e in events if e.get("type") == "Warning" and (not reasons or e.get("reason") in reasons)]


def _describe(w: Workload) -> str:
    return f"kubectl -n {namespace_of(w.pod)} describe pod {name_of(w.pod)}"


# -- 5. the workload pod refers to the claim ----------------------------------------------------
def check_workload(w: Workload) -> Link:
    key, title = "workload", "workload pod references the channel claim"
    users = claim_users(w.pod, w.claim_ref)
    evidence = [f"{w.label} on {pod_node(w.pod) or '<unscheduled>'}: {pod_phase(w.pod) or '-'}"
                f"{' ' + pod_waiting(w.pod) if pod_waiting(w.pod) else ''}, claim {w.claim_ref!r}, "
                f"containers using it: {', '.join(users) or 'none'}"]
    if not users:
        return link(key, title, Verdict.FAIL,
                    f"{w.label} lists claim {w.claim_ref!r} in spec.resourceClaims but no container lists it in "
                    "resources.claims, so no container gets the channel", evidence, {},
                    f"kubectl -n {namespace_of(w.pod)} get pod {name_of(w.pod)} -o jsonpath="
                    "'{.spec.containers[*].resources.claims}'")
    return link(key, title, Verdict.PASS, f"{w.label}: container(s) {', '.join(users)} use claim {w.claim_ref!r}",
                evidence, {})


# -- 6. claim allocation ----------------------------------------------------------------------------
def tainted_channels(snap: Snapshot, node: str = "") -> list[str]:
    """This driver's channel devices that carry a taint (on `node`, or on every node), one line each."""
    out = []
    for sl in snap.items("resourceslices"):
        spec = sl.get("spec") or {}
        if spec.get("driver") != constants.DRIVER_NAME or (node and spec.get("nodeName") != node):
            continue
        for dev in spec.get("devices") or []:
            for t in dev.get("taints") or []:
                out.append(f"{dev.get('name')} on node {spec.get('nodeName')} is tainted "
                           f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}")
    return sorted(out)


def check_allocation(snap: Snapshot, w: Workload) -> Link:
    key, title = "allocation", "workload claim allocation (pool, device, node)"
    if snap.refused("resourceclaims", namespace_of(w.pod)):
        return hidden(key, title, "resourceclaims", snap.refused("resourceclaims", namespace_of(w.pod)),
                      f"ask for read access to namespace {namespace_of(w.pod)}")
    young = snap.age(w.pod) < SETTLE_SECONDS
    sched = [e for e in _warnings(snap, w.pod, (FAILED_SCHEDULING,))]
    evidence = [event_line(e) for e in sched[-1:]]
    if w.claim is None:
        verdict = Verdict.WAIT if young and not sched else Verdict.FAIL
        return link(key, title, verdict, f"{w.label}: no ResourceClaim generated for {w.claim_ref!r} yet",
                    evidence, {}, _describe(w))
    claim_label = f"claim {namespace_of(w.claim)}/{name_of(w.claim)} uid {uid_of(w.claim)}"
    results = w.results()
    if not results:
        stable = bool(sched) and (not young or event_count(sched[-1]) >= REPEATS_STABLE)
        verdict = Verdict.FAIL if stable or not young else Verdict.WAIT
        msg = sched[-1].get("message", "") if sched else "not scheduled yet"
        # a node whose fabric or host IMEX service is unusable has its channel devices tainted
        tainted = tainted_channels(snap, pod_node(w.pod))
        if tainted:
            msg += f" (the plugin tainted: {'; '.join(tainted)})"
            if sched:
                verdict = Verdict.FAIL  # a node that cannot give a channel is no bootstrap delay
        return link(key, title, verdict, f"{w.label}: {claim_label} has no allocation: {msg}", evidence + tainted,
                    {w.label: {"claimUID": uid_of(w.claim)}},
                    "kubectl get resourceslices -o yaml  (the channel's taint says why; the kubelet plugin's log "
                    "has the detail)" if tainted else _describe(w))
    r = results[0]
    node = w.node
    ids = {w.label: {"claimUID": uid_of(w.claim), "pool": r.get("pool"), "device": r.get("device"), "node": node}}
    evidence.insert(0, f"{w.label}: {claim_label} -> {r.get('driver')} pool {r.get('pool')} device "
                       f"{r.get('device')} on node {node or '-'}")
    if r.get("bindingConditions") and not pod_node(w.pod):
        return _waiting_for_binding(w, r, node, key, title, evidence, ids)
    node_obj = snap.node(node) if node else None
    if node_obj is not None and not labels_of(node_obj).get(constants.LABEL_NODE_CLIQUE):
        return link(key, title, Verdict.FAIL,
                    f"{w.label} was placed on node {node}, which is not attached to an NVLink fabric (no "
                    f"{constants.LABEL_NODE_CLIQUE} label): the claim is prepared without any IMEX channel",
                    evidence, ids,
                    f"kubectl get nodes -L {constants.LABEL_NODE_CLIQUE}  "
                    f"(add node affinity on {constants.LABEL_NODE_CLIQUE})")
    return link(key, title, Verdict.PASS, f"{w.label}: {r.get('device')} from pool {r.get('pool')} on {node}",
                evidence, ids)


def _waiting_for_binding(w: Workload, r: dict, node: str, key: str, title: str, evidence: list[str],
                         ids: dict) -> Link:
    """The pod waits in the scheduler's PreBind for the channel's binding conditions (gate
    ComputeDomainBindingConditions): what the node's plugin said of the claim so far."""
    entry: dict = next((d for d in (w.claim or {}).get("status", {}).get("devices") or []
                  if d.get("driver") == constants.DRIVER_NAME and (d.get("pool"), d.get("device"),
                                                                   d.get("shareID")) ==
                  (r.get("pool"), r.get("device"), r.get("shareID"))), {})
    conditions = {c.get("type"): c for c in entry.get("conditions") or []}
    failed = (conditions.get("BindingFailed") or {}).get("status") == "True"
    said = conditions.get("BindingFailed") if failed else conditions.get("Ready")
    state = f"{said.get('reason')}: {said.get('message')}" if said else "the node's plugin has not answered yet"
    evidence.append(f"{w.label}: status.devices of {r.get('device')}: {state}")
    verdict = Verdict.FAIL if failed else Verdict.WAIT
    summary = (f"{w.label} waits in scheduling until node {node} can serve its channel (binding conditions "
               f"{', '.join(r.get('bindingConditions') or [])}): {state}")
    if failed:
        summary += "; the scheduler frees the allocation and places the pod again"
    claim = w.claim or {}
    return link(key, title, verdict, summary, evidence, ids,
                f"kubectl get resourceclaim {name_of(claim)} -n {namespace_of(claim)} -o yaml  (status.devices)")


# -- 7. node label ------------------------------------------------------------------------------------
def check_node_label(snap: Snapshot, w: Workload, uid: str, mode: str) -> Link:
    key, title = "node-label", f"node label {constants.LABEL_COMPUTE_DOMAIN}"
    if mode == names.IMEX_MODE_HOST_MANAGED:
        return link(key, title, Verdict.SKIP, "host-managed IMEX: no per-domain node label is expected")
    if snap.refused("nodes"):
        return hidden(key, title, "nodes", snap.refused("nodes"), "ask an administrator for `kubectl get nodes`")
    node = w.node
    if not node or not w.results():
        return link(key, title, Verdict.SKIP, f"{w.label}: not allocated to a node yet")
    obj = snap.node(node)
    value = labels_of(obj or {}).get(constants.LABEL_COMPUTE_DOMAIN, "")
    evidence = [f"node {node}: {constants.LABEL_COMPUTE_DOMAIN}={value or '<unset>'}"]
    ids = {w.label: {"node": node}}
    show = f"kubectl get node {node} -L {constants.LABEL_COMPUTE_DOMAIN} -L {constants.LABEL_NODE_CLIQUE}"
    if value == uid:
        return link(key, title, Verdict.PASS, f"node {node} is labelled for uid {uid}", evidence, ids)
    if value:
        return link(key, title, Verdict.FAIL, f"node {node} is labelled for another ComputeDomain ({value})",
                    evidence, ids, show)
    if w.started:
        out = link(key, title, Verdict.FAIL,
                   f"node {node} lost its label although {w.label} was prepared there (removed by hand?): the "
                   "daemon DaemonSet no longer selects the node", evidence, ids, show)
        out.causes = CAUSES[key][1:]
        return out
    failures = _warnings(snap, w.pod, (FAILED_PREPARE,))
    stable = failures and event_count(failures[-1]) >= REPEATS_STABLE and snap.age(w.pod) >= SETTLE_SECONDS
    evidence += [event_line(e) for e in failures[-1:]]
    return link(key, title, Verdict.FAIL if stable else Verdict.WAIT,
                f"node {node} is not labelled yet; the plugin labels it when it prepares {w.label}", evidence, ids,
                show)


# -- 8. daemon DaemonSet, pod and claim -------------------------------------------------------------
def daemon_pod_on(snap: Snapshot, uid: str, node: str) -> dict | None:
    for pod in snap.pods_in(snap.driver_namespace):
        if labels_of(pod).get(constants.LABEL_COMPUTE_DOMAIN) == uid and pod_node(pod) == node:
            return pod
    return None


def check_daemon(snap: Snapshot, w: Workload, uid: str, mode: str, label_ok: bool) -> Link:
    key, title = "daemon", "IMEX daemon DaemonSet, its pod on the node, and the daemon claim"
    if mode == names.IMEX_MODE_HOST_MANAGED:
        return link(key, title, Verdict.SKIP, "host-managed IMEX: no daemon DaemonSet or pods are expected")
    ns = snap.driver_namespace
    if snap.refused("pods", ns):
        return hidden(key, title, "pods", snap.refused("pods", ns), f"ask for read access to namespace {ns}, or pass "
                      "--driver-namespace")
    ds_name = constants.daemon_object_name(uid)
    ds = snap.find("daemonsets", ds_name, ns)
    node = w.node
    evidence = [f"DaemonSet {ns}/{ds_name}: " + (f"{(ds.get('status') or {}).get('numberReady', 0)}/"
                                                  f"{(ds.get('status') or {}).get('desiredNumberScheduled', 0)} ready"
                                                  if ds else "missing")]
    if ds is None:
        verdict = Verdict.WAIT if snap.age(w.pod) < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"daemon DaemonSet {ns}/{ds_name} does not exist", evidence, {},
                    f"kubectl -n {ns} get daemonsets -l {constants.LABEL_COMPUTE_DOMAIN}={uid}")
    if not node or not label_ok:
        return link(key, title, Verdict.SKIP, f"{w.label}: its node is not labelled for the domain, so the "
                    "DaemonSet places no daemon pod there", evidence)
    pod = daemon_pod_on(snap, uid, node)
    list_cmd = f"kubectl -n {ns} get pods -o wide -l {constants.LABEL_COMPUTE_DOMAIN}={uid}"
    if pod is None:
        verdict = Verdict.WAIT if snap.age(w.pod) < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"node {node} is labelled but has no daemon pod (node-label/selector "
                    "mismatch if this lasts)", evidence, {}, list_cmd)
    ids = {w.label: {"daemonPod": f"{ns}/{name_of(pod)}", "daemonIP": pod_ip(pod), "node": node}}
    evidence.append(f"daemon pod {name_of(pod)} on {node} IP {pod_ip(pod) or '-'}: {pod_phase(pod)}"
                    f"{' ' + pod_waiting(pod) if pod_waiting(pod) else ''}, ready={pod_ready(pod)}, "
                    f"restarts {pod_restarts(pod)}")
    logs = f"kubectl -n {ns} logs {name_of(pod)} -c {names.DAEMON_CONTAINER} --tail=50"
    failures = _warnings(snap, pod, DAEMON_FAILURE_REASONS)
    if failures:
        evidence.append(event_line(failures[-1]))
        out = link(key, title, Verdict.FAIL, f"nvidia-imex in daemon pod {name_of(pod)} failed: "
                   f"{failures[-1].get('reason')}: {first_clause(str(failures[-1].get('message', '')))}", evidence,
                   ids, logs)
        out.causes = [CAUSES[key][3], CAUSES[key][2]]
        return out
    ref = next((c.get("name") for c in (pod.get("spec") or {}).get("resourceClaims") or []), "")
    dclaim = snap.claim(claim_name_of(pod, ref), ns) if ref else None
    dresults = [r for r in allocation_results(dclaim or {}) if r.get("driver") == constants.DRIVER_NAME]
    if dclaim is not None:
        ids[w.label]["daemonClaimUID"] = uid_of(dclaim)
        evidence.append(f"daemon claim {name_of(dclaim)} uid {uid_of(dclaim)} -> "
                        + (f"pool {dresults[0].get('pool')} device {dresults[0].get('device')}" if dresults
                           else "not allocated"))
    crash = pod_waiting(pod) == "CrashLoopBackOff" or pod_restarts(pod) >= REPEATS_STABLE
    if crash:
        return link(key, title, Verdict.FAIL, f"daemon pod {name_of(pod)} keeps restarting "
                    f"({pod_restarts(pod)} restarts)", evidence, ids, logs)
    if not pod_ready(pod):
        prepare = _warnings(snap, pod, (FAILED_PREPARE,))
        evidence += [event_line(e) for e in prepare[-1:]]
        stable = snap.age(pod) >= SETTLE_SECONDS
        return link(key, title, Verdict.FAIL if stable else Verdict.WAIT,
                    f"daemon pod {name_of(pod)} on {node} is not ready"
                    + ("" if dresults else " (its daemon claim is not allocated)"), evidence, ids,
                    f"kubectl -n {ns} describe pod {name_of(pod)}; {logs}")
    return link(key, title, Verdict.PASS, f"daemon pod {name_of(pod)} Ready on {node} ({pod_ip(pod)})", evidence, ids)


# -- 9. clique entry, or the host socket ----------------------------------------------------------
def check_clique(snap: Snapshot, w: Workload, cd: dict, daemon_ok: bool) -> Link:
    key, title = "clique", "ComputeDomainClique entry of the node (index, IP, status)"
    uid, ns = uid_of(cd), snap.driver_namespace
    node = w.node
    if not node or not daemon_ok:
        return link(key, title, Verdict.SKIP, f"{w.label}: no ready daemon on its node to register yet")
    if snap.refused("cliques", ns):
        return hidden(key, title, "computedomaincliques", snap.refused("cliques", ns),
                      f"ask for read access to namespace {ns}")
    clique_id = labels_of(snap.node(node) or {}).get(constants.LABEL_NODE_CLIQUE, "")
    obj_name = constants.clique_object_name(uid, clique_id)
    clique = snap.find("cliques", obj_name, ns)
    entries = [d for d in (clique or {}).get("daemons") or [] if d.get("nodeName") == node]
    source = f"ComputeDomainClique {ns}/{obj_name}"
    if clique is None:  # cliques gate off: the daemons write the legacy entries into the CD status
        entries = [n for n in (cd.get("status") or {}).get("nodes") or [] if n.get("name") == node]
        source = "ComputeDomain status.nodes"
    ids = {w.label: {"cliqueID": clique_id, "node": node}}
    show = f"kubectl -n {ns} get computedomainclique {obj_name} -o yaml"
    if not entries:
        pod = daemon_pod_on(snap, uid, node)
        verdict = Verdict.WAIT if pod is not None and snap.age(pod) < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"no entry for node {node} in {source}", [f"{source}: no entry for {node}"],
                    ids, show)
    e = entries[0]
    ids[w.label].update({"index": e.get("index"), "ip": e.get("ipAddress")})
    evidence = [f"{source}: {node} index {e.get('index')} IP {e.get('ipAddress')} clique "
                f"{e.get('cliqueID', clique_id) or '-'} {e.get('status')}"]
    if e.get("status") != constants.STATUS_READY:
        pod = daemon_pod_on(snap, uid, node)
        verdict = Verdict.WAIT if pod is not None and snap.age(pod) < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"node {node} is {e.get('status')} in {source}", evidence, ids, show)
    return link(key, title, Verdict.PASS, f"{node} Ready at index {e.get('index')} in clique {clique_id}",
                evidence, ids)


def check_host_socket(snap: Snapshot, w: Workload) -> Link:
    key, title = "host-socket", "host nvidia-imex service (plugin's socket check at Prepare)"
    node = w.node
    if not node or w.claim is None:
        return link(key, title, Verdict.SKIP, f"{w.label}: not allocated to a node yet")
    failures = _warnings(snap, w.claim, (names.EVENT_HOST_IMEX_NOT_READY,))
    evidence = [event_line(e) for e in failures[-1:]]
    ids = {w.label: {"node": node}}
    plugin = snap.plugin_pod(node)
    cmd = (f"kubectl -n {snap.driver_namespace} logs {name_of(plugin)} --tail=50; on node {node}: "
           f"systemctl status {names.HOST_IMEX_SERVICE}; {names.IMEX_CTL} -q --u=<imex.hostSocketPath>"
           if plugin else f"on node {node}: systemctl status {names.HOST_IMEX_SERVICE}")
    if w.started:
        return link(key, title, Verdict.PASS, f"the plugin found the host IMEX service READY on {node}",
                    [f"{w.label} prepared and started on {node}"], ids)
    if failures:
        stable = event_count(failures[-1]) >= REPEATS_STABLE or snap.age(w.pod) >= SETTLE_SECONDS
        problem = first_clause(re.sub(r"^claim \S+ ", "", str(failures[-1].get("message", ""))), 300)
        return link(key, title, Verdict.FAIL if stable else Verdict.WAIT,
                    f"host IMEX service on {node} is not READY: {problem}", evidence, ids, cmd)
    return link(key, title, Verdict.WAIT, f"{w.label} is not prepared yet on {node}", evidence, ids, _describe(w))


# -- 10. CDI device ID -------------------------------------------------------------------------------
def device_status_of(claim: dict) -> tuple[str, str, str, str] | None:
    """(status, reason, message, device) of the Ready condition the kubelet plugin wrote in the claim's
    status.devices for this driver's device (None: not written, e.g. before Kubernetes 1.33)."""
    for entry in (claim.get("status") or {}).get("devices") or []:
        if entry.get("driver") != constants.DRIVER_NAME:
            continue
        for cond in entry.get("conditions") or []:
            if cond.get("type") == "Ready":
                return (str(cond.get("status", "")), str(cond.get("reason", "")), str(cond.get("message", "")),
                        f"{entry.get('pool')}/{entry.get('device')}")
    return None


def device_status_line(w: Workload) -> list[str]:
    """The evidence line of the claim's status.devices (empty when the plugin wrote none)."""
    found = device_status_of(w.claim or {})
    if found is None:
        return []
    status, reason, message, device = found
    return [f"{w.label}: claim status.devices {device}: Ready={status} {reason}: "
            f"{first_clause(re.sub(r'^claim [^:]+:[^:]+: ', '', message), 200)}"]


def channel_health_lines(w: Workload) -> list[str]:
    """What kubelet shows of the claim's devices' health in the pod's status (ResourceHealthStatus,
    Kubernetes 1.36+): one line per container and device that is not Healthy, else one saying so."""
    lines, healthy = [], 0
    for cs in (w.pod.get("status") or {}).get("containerStatuses") or []:
        for status in cs.get("allocatedResourcesStatus") or []:
            if status.get("name") not in (f"claim:{w.claim_ref}",) and not str(status.get("name", "")).startswith(
                    f"claim:{w.claim_ref}/"):
                continue
            for res in status.get("resources") or []:
                if res.get("health") == "Healthy":
                    healthy += 1
                    continue
                lines.append(f"{w.label}: container {cs.get('name')}: {res.get('resourceID')} is "
                             f"{res.get('health')}" + (f": {res['message']}" if res.get("message") else ""))
    if not lines and healthy:
        lines.append(f"{w.label}: kubelet reports the channel Healthy")
    return lines


def check_cdi(snap: Snapshot, w: Workload) -> Link:
    key, title = "cdi", "claim prepared: CDI device ID handed to the runtime"
    if w.claim is None or not w.results():
        return link(key, title, Verdict.SKIP, f"{w.label}: claim not allocated")
    r = w.results()[0]
    cdi_id = claim_cdi_id(uid_of(w.claim), str(r.get("device")))
    ids = {w.label: {"cdiID": cdi_id, "claimUID": uid_of(w.claim)}}
    not_injected = _warnings(snap, w.claim, (names.EVENT_CHANNEL_NOT_INJECTED,))
    if not_injected:
        return link(key, title, Verdict.FAIL, f"{w.label}: the claim was prepared without IMEX channel devices "
                    f"(node {w.node} is not fabric-attached)", [event_line(not_injected[-1])], ids,
                    f"kubectl get nodes -L {constants.LABEL_NODE_CLIQUE}")
    reported = device_status_line(w)
    if w.started:
        return link(key, title, Verdict.PASS, f"{w.label}: prepared, CDI {cdi_id}",
                    [f"{w.label}: CDI {cdi_id}", *reported, *channel_health_lines(w)], ids)
    failures = _warnings(snap, w.pod, (FAILED_PREPARE,))
    waits = snap.events_about(name_of(w.claim), namespace_of(w.claim))
    evidence = reported + [event_line(e) for e in (failures[-1:] + waits[-1:])]
    stable = bool(failures) and event_count(failures[-1]) >= REPEATS_STABLE and snap.age(w.pod) >= SETTLE_SECONDS
    found = device_status_of(w.claim)
    why = f": the plugin reports {found[1]}" if found is not None and found[0] != "True" else ""
    return link(key, title, Verdict.FAIL if stable else Verdict.WAIT,
                f"{w.label}: Prepare has not completed on {w.node}{why}"
                + (" and keeps failing" if stable
                   else " (a wait for local readiness is expected while the node's IMEX side starts)"),
                evidence, ids, _describe(w))


# -- 11. the device inside the container ---------------------------------------------------------------
def exec_key(pod: dict) -> str:
    return f"{namespace_of(pod)}/{name_of(pod)}"


def check_device(snap: Snapshot, w: Workload) -> Link:
    key, title = "device", f"{names.CHANNELS_DIR} inside the container"
    if not snap.exec_enabled:
        return link(key, title, Verdict.SKIP, "not checked: add --exec to run `ls -l "
                    f"{names.CHANNELS_DIR}` in the container (kubectl exec)")
    if not w.started:
        return link(key, title, Verdict.SKIP, f"{w.label} has not started")
    result = snap.exec.get(exec_key(w.pod))
    cmd = f"kubectl -n {namespace_of(w.pod)} exec {name_of(w.pod)} -- ls -l {names.CHANNELS_DIR}"
    if result is None:
        return link(key, title, Verdict.SKIP, f"{w.label}: exec was not run")
    output = str(result.get("output", "")).strip()
    lines = [ln for ln in output.splitlines() if ln.strip()]
    channel = [ln for ln in lines if ln.startswith("c") and ln.split()[-1] == "channel0"]
    shown = [ln for ln in lines if not ln.startswith("total ")][:4] or ["<no output>"]
    evidence = [f"{w.label}: ls -l {names.CHANNELS_DIR}: {ln}" for ln in shown]
    if int(result.get("rc", 1)) != 0 or not channel:
        return link(key, title, Verdict.FAIL, f"{w.label}: no character device channel0 in {names.CHANNELS_DIR}",
                    evidence, {}, cmd)
    return link(key, title, Verdict.PASS, f"{w.label}: {names.CHANNEL_0_PATH} is a character device", evidence,
                {w.label: {"device": names.CHANNEL_0_PATH}})
