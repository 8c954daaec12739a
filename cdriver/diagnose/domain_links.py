"""Cluster- and domain-level links: installation, ResourceSlices, the ComputeDomain, its template."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.diagnose import names
from cdriver.diagnose.causes import CAUSES
from cdriver.diagnose.model import Link, Verdict
from cdriver.diagnose.snapshot import (
    COMPONENT_CONTROLLER,
    CRD_NAMES,
    LABEL_COMPONENT,
    Snapshot,
    event_line,
    pod_ready,
    pod_restarts,
    pod_waiting,
    template_domain_id,
)
from cdriver.kube.objects import finalizers_of, labels_of, meta_of, name_of, namespace_of, uid_of

#: An object younger than this that is not in place yet is still bootstrapping (WAIT).
SETTLE_SECONDS = 120.0
#: A Warning Event seen this many times marks a stable failure rather than a bootstrap delay.
REPEATS_STABLE = 3

#: Finalizer-related condition reasons the controller reports for problems a user must fix.
PROBLEM_SUFFIXES = ("Conflict", "CreateFailed")


def link(key: str, title: str, verdict: Verdict, summary: str, evidence: list[str] | None = None,
         ids: dict | None = None, next_command: str = "") -> Link:
    return Link(key, title, verdict, summary, list(evidence or []), dict(ids or {}), CAUSES.get(key, []),
                next_command)


def hidden(key: str, title: str, kind: str, message: str, alternative: str) -> Link:
    """A link RBAC kept us from checking: say what was refused and how to get past it."""
    text = (f"cannot list {kind}: forbidden ({message}) — run as a user who can "
            f"(kubectl auth can-i list {kind}), or {alternative}")
    out = link(key, title, Verdict.SKIP, text)
    out.hidden = text
    return out


# -- 1. installation ------------------------------------------------------------------------
def check_installation(snap: Snapshot, mode: str) -> Link:
    key, title = "installation", "driver installation (controller, DeviceClasses, CRDs)"
    if snap.refused("deployments", snap.driver_namespace):
        return hidden(key, title, "deployments", snap.refused("deployments", snap.driver_namespace),
                      "pass --driver-namespace of a namespace you can read")
    evidence: list[str] = []
    problems: list[str] = []
    wait = False
    dep = snap.controller()
    ns = snap.driver_namespace or "<driver namespace>"
    next_cmd = f"kubectl -n {ns} get deployment,pods -l {LABEL_COMPONENT}={COMPONENT_CONTROLLER} -o wide"
    if dep is None:
        problems.append("no cdriver controller Deployment found (chart label "
                        f"{LABEL_COMPONENT}={COMPONENT_CONTROLLER}); is the chart installed?")
        next_cmd = "helm list -A; kubectl get deployments -A -l app.kubernetes.io/component=controller"
    else:
        spec_replicas = int((dep.get("spec") or {}).get("replicas", 1) or 0)
        ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
        evidence.append(f"Deployment {namespace_of(dep)}/{name_of(dep)}: {ready}/{spec_replicas} ready, mode {mode}")
        if spec_replicas == 0:
            problems.append(f"controller Deployment {namespace_of(dep)}/{name_of(dep)} is scaled to 0 replicas")
            next_cmd = f"kubectl -n {namespace_of(dep)} get deployment {name_of(dep)} -o yaml"
        elif ready < 1:
            pods = [p for p in snap.pods_in(namespace_of(dep))
                    if labels_of(p).get(LABEL_COMPONENT) == COMPONENT_CONTROLLER]
            for pod in pods:
                evidence.append(f"controller pod {name_of(pod)}: {pod_waiting(pod) or 'not ready'}, "
                                f"restarts {pod_restarts(pod)}")
            young = snap.age(dep) < SETTLE_SECONDS or any(
                snap.age(p) < SETTLE_SECONDS and pod_restarts(p) < REPEATS_STABLE for p in pods)
            problems.append(f"controller Deployment {namespace_of(dep)}/{name_of(dep)} has no ready replica")
            wait = young
            next_cmd = f"kubectl -n {namespace_of(dep)} logs deployment/{name_of(dep)} --tail=50"
    wanted = [constants.DEVICE_CLASS_DEFAULT_CHANNEL]
    if mode != names.IMEX_MODE_HOST_MANAGED:
        wanted.append(constants.DEVICE_CLASS_DAEMON)
    if snap.refused("deviceclasses"):
        evidence.append(f"DeviceClasses not checked: {snap.refused('deviceclasses')}")
    else:
        for name in wanted:
            if snap.find("deviceclasses", name) is None:
                problems.append(f"DeviceClass {name} is missing")
                wait = False
                next_cmd = ("kubectl get deviceclass; helm upgrade the release to recreate it "
                            "(resources.computeDomains.enabled=true)")
            else:
                evidence.append(f"DeviceClass {name}")
    if snap.refused("crds"):
        evidence.append(f"CRDs not checked: {snap.refused('crds')}")
    else:
        for name in CRD_NAMES:
            crd = snap.find("crds", name)
            served = [v.get("name") for v in ((crd or {}).get("spec") or {}).get("versions") or [] if v.get("served")]
            if crd is None or constants.VERSION not in served:
                problems.append(f"CRD {name} is missing or does not serve {constants.VERSION} "
                                f"(served: {served or 'none'})")
                wait = False
                next_cmd = f"kubectl get crd {name} -o yaml"
            else:
                evidence.append(f"CRD {name} serves {constants.VERSION}")
    if problems:
        verdict = Verdict.WAIT if wait else Verdict.FAIL
        return link(key, title, verdict, "; ".join(problems), evidence, next_command=next_cmd)
    return link(key, title, Verdict.PASS, f"controller running, DeviceClasses and CRDs present ({mode})", evidence,
                {"driverNamespace": snap.driver_namespace})


# -- 2. ResourceSlices ----------------------------------------------------------------------
def check_slices(snap: Snapshot, mode: str, nodes: list[str]) -> Link:
    key, title = "resourceslices", f"ResourceSlices of {constants.DRIVER_NAME} with {constants.DEVICE_CHANNEL_0}"
    if snap.refused("resourceslices"):
        return hidden(key, title, "resourceslices", snap.refused("resourceslices"),
                      "ask an administrator to run `kubectl get resourceslices`")
    want = [constants.DEVICE_CHANNEL_0] + ([] if mode == names.IMEX_MODE_HOST_MANAGED else [constants.DEVICE_DAEMON_0])
    if not nodes:
        return link(key, title, Verdict.FAIL,
                    f"no node is labelled {constants.LABEL_NODE_CLIQUE} and no workload is placed: "
                    "nothing can offer channels",
                    next_command=f"kubectl get nodes -L {constants.LABEL_NODE_CLIQUE}")
    evidence: list[str] = []
    plugin_hidden = bool(snap.refused("pods", snap.driver_namespace))
    broken: list[tuple[bool, str, str]] = []  # (still bootstrapping, node, problem)
    for node in nodes:
        devices = sorted({d.get("name") for s in snap.slices_of(node)
                          for d in (s.get("spec") or {}).get("devices") or []})
        plugin = snap.plugin_pod(node)
        plugin_text = (f"plugin pod {name_of(plugin)} {'Ready' if pod_ready(plugin) else 'not ready'}"
                       if plugin else "no plugin pod")
        if plugin_hidden:
            plugin_text = "plugin pod not visible (RBAC)"
        missing = [d for d in want if d not in devices]
        pools = sorted({((s.get("spec") or {}).get("pool") or {}).get("name", "") for s in snap.slices_of(node)})
        evidence.append(f"{node}: pool {','.join(pools) or '-'} devices {','.join(devices) or 'none'}; {plugin_text}")
        if missing or (not plugin_hidden and (plugin is None or not pod_ready(plugin))):
            young = plugin is not None and snap.age(plugin) < SETTLE_SECONDS and pod_restarts(plugin) < REPEATS_STABLE
            what = f"missing {', '.join(missing)}" if missing else "published"
            broken.append((young, node, f"node {node}: {what}, {plugin_text}"))
    if broken:
        broken.sort(key=lambda b: b[0])  # stable failures first
        verdict = Verdict.WAIT if broken[0][0] else Verdict.FAIL
        node = broken[0][1]
        ns = snap.driver_namespace or "<driver namespace>"
        return link(key, title, verdict, "; ".join(b[2] for b in broken), evidence,
                    next_command=f"kubectl -n {ns} get pods -o wide --field-selector spec.nodeName={node}; "
                                 f"kubectl get resourceslices --field-selector spec.nodeName={node} -o yaml")
    return link(key, title, Verdict.PASS, f"{', '.join(want)} published on {', '.join(nodes)}", evidence)


# -- 3. the ComputeDomain -------------------------------------------------------------------
def ready_condition(cd: dict) -> dict:
    conditions = (cd.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == names.CONDITION_READY), {})


def _late_pods_link(key: str, title: str, cd: dict, late: list[str], evidence: list[str], ids: dict) -> Link:
    ns, name = namespace_of(cd), name_of(cd)
    pods = ", ".join(late)
    return link(key, title, Verdict.FAIL,
                f"ComputeDomain {ns}/{name} is being deleted and {pods} had no IMEX channel when the deletion "
                "began: no new pod joins a domain being deleted, so they stay in ContainerCreating and never get "
                "one; delete them (or recreate them for a new ComputeDomain)", evidence, ids,
                f"kubectl -n {ns} delete pod " + " ".join(p.rsplit("/", 1)[-1] for p in late))


def check_domain(snap: Snapshot, cd: dict, mode: str, late: list[str] | None = None) -> Link:
    """The domain's admission and deletion; ``late`` names the workload pods (``ns/name``)
    that had no channel yet when a deletion began (none get one)."""
    key, title = "computedomain", "ComputeDomain and its IMEX mode"
    uid, ns, name = uid_of(cd), namespace_of(cd), name_of(cd)
    spec = cd.get("spec") or {}
    status = cd.get("status") or {}
    cond = ready_condition(cd)
    finalizers = finalizers_of(cd)
    num_nodes = int(spec.get("numNodes") or 0)
    evidence = [f"ComputeDomain {ns}/{name} uid {uid}, mode {mode}, numNodes {num_nodes}, "
                f"status {status.get('status', '-')}"
                + (f" ({cond.get('reason')}: {cond.get('message')})" if cond else ""),
                f"finalizers: {', '.join(finalizers) or 'none'}"]
    ids = {"cdUID": uid, "mode": mode}
    describe = f"kubectl -n {ns} describe computedomain {name}"
    deleting = meta_of(cd).get("deletionTimestamp")
    if deleting:
        others = [f for f in finalizers if f != constants.FINALIZER]
        pending = snap.since(deleting)
        evidence.append(f"deletion requested {pending:.0f} s ago")
        if constants.FINALIZER not in finalizers and others:
            return link(key, title, Verdict.FAIL,
                        f"deletion is blocked by finalizer(s) {', '.join(others)} that the driver does not own; "
                        "the driver's cleanup is done", evidence, ids,
                        f"kubectl -n {ns} get computedomain {name} -o jsonpath='{{.metadata.finalizers}}' "
                        "(find the owner of that finalizer; do not force-remove it first)")
        if late:
            return _late_pods_link(key, title, cd, late, evidence, ids)
        if cond.get("reason") == names.REASON_DELETION_WAITS:
            return link(key, title, Verdict.WAIT, f"deletion waits for the pods that hold its IMEX channels: "
                        f"{cond.get('message', '')}", evidence, ids, describe)
        verdict = Verdict.WAIT if pending < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"deletion in progress for {pending:.0f} s; the controller still holds "
                    f"{constants.FINALIZER} while it removes generated templates, DaemonSet and node labels",
                    evidence, ids,
                    f"kubectl get resourceclaimtemplates,daemonsets -A -l {constants.LABEL_COMPUTE_DOMAIN}={uid}; "
                    f"kubectl get nodes -l {constants.LABEL_COMPUTE_DOMAIN}={uid}")
    if constants.FINALIZER not in finalizers:
        verdict = Verdict.WAIT if snap.age(cd) < SETTLE_SECONDS else Verdict.FAIL
        return link(key, title, verdict, f"the controller has not admitted the ComputeDomain (no {constants.FINALIZER} "
                    "finalizer)", evidence, ids, describe)
    fabric = snap.fabric_nodes()
    if mode != names.IMEX_MODE_HOST_MANAGED and num_nodes > len(fabric) and not snap.refused("nodes"):
        return link(key, title, Verdict.FAIL,
                    f"spec.numNodes is {num_nodes} but only {len(fabric)} fabric-attached node(s) exist; the "
                    "status can never become Ready (numNodes is deprecated: use 0)", evidence, ids,
                    f"kubectl get nodes -L {constants.LABEL_NODE_CLIQUE}; {describe}")
    return link(key, title, Verdict.PASS, f"admitted, uid {uid}, status {status.get('status', '-')}", evidence, ids)


# -- 4. the workload template -----------------------------------------------------------------
def template_name(cd: dict) -> str:
    return str((((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name") or "")


def check_template(snap: Snapshot, cd: dict) -> Link:
    key, title = "template", "workload ResourceClaimTemplate"
    uid, ns, name = uid_of(cd), namespace_of(cd), name_of(cd)
    tname = template_name(cd)
    if snap.refused("resourceclaimtemplates", ns):
        return hidden(key, title, "resourceclaimtemplates", snap.refused("resourceclaimtemplates", ns),
                      f"ask for read access to namespace {ns}")
    rct = snap.find("resourceclaimtemplates", tname, ns)
    cond = ready_condition(cd)
    events = [e for e in snap.events_about(name, ns, constants.KIND_COMPUTE_DOMAIN) if e.get("type") == "Warning"]
    evidence = [event_line(e) for e in events[-2:]]
    ids = {"template": f"{ns}/{tname}"}
    if rct is not None:
        owner = labels_of(rct).get(constants.LABEL_COMPUTE_DOMAIN) or template_domain_id(rct)
        if owner == uid:
            requests = (((rct.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
            classes = [((r.get("exactly") or r).get("deviceClassName") or "") for r in requests]
            return link(key, title, Verdict.PASS, f"{ns}/{tname} generated for uid {uid}",
                        [f"ResourceClaimTemplate {ns}/{tname} domainID {uid} deviceClass {', '.join(classes)}"], ids)
        whose = f"ComputeDomain {owner}" if owner else "no ComputeDomain (created by someone else)"
        return link(key, title, Verdict.FAIL,
                    f"name conflict: ResourceClaimTemplate {ns}/{tname} already exists and belongs to {whose}; "
                    "the controller left it untouched", evidence + [f"ResourceClaimTemplate {ns}/{tname} uid "
                                                                    f"{uid_of(rct)} owner {owner or '-'}"], ids,
                    f"kubectl -n {ns} get resourceclaimtemplate {tname} -o yaml  (then rename or delete it, or use "
                    "another spec.channel.resourceClaimTemplate.name)")
    if str(cond.get("reason", "")).endswith(PROBLEM_SUFFIXES):
        return link(key, title, Verdict.FAIL, f"{cond.get('reason')}: {cond.get('message')}", evidence, ids,
                    f"kubectl -n {ns} describe computedomain {name}")
    verdict = Verdict.WAIT if snap.age(cd) < SETTLE_SECONDS else Verdict.FAIL
    dep = snap.controller()
    logs = (f"kubectl -n {namespace_of(dep)} logs deployment/{name_of(dep)} --tail=50" if dep
            else "kubectl get deployments -A -l app.kubernetes.io/component=controller")
    return link(key, title, verdict, f"ResourceClaimTemplate {ns}/{tname} does not exist yet", evidence, ids,
                f"kubectl -n {ns} get events --field-selector involvedObject.name={name}; {logs}")
