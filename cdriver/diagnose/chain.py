"""Walk the chain for a ComputeDomain, a pod, or every ComputeDomain (pure: snapshot in, chains out)."""

from __future__ import annotations

from cdriver.diagnose import domain_links, names, pod_links
from cdriver.diagnose.model import Chain, Link, Verdict, fold
from cdriver.diagnose.snapshot import Snapshot, event_line
from cdriver.kube.objects import meta_of, name_of, namespace_of, uid_of


class TargetNotFound(LookupError):
    """The named ComputeDomain or pod does not exist (or is hidden)."""


def workloads_of(snap: Snapshot, cd: dict, only: dict | None = None) -> list[pod_links.Workload]:
    """Pods in the domain's namespace that take a claim from its workload template."""
    template = domain_links.template_name(cd)
    pods = [only] if only is not None else snap.pods_in(namespace_of(cd))
    out = []
    for pod in pods:
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            if ref.get("resourceClaimTemplateName") == template:
                claim = snap.claim(pod_links.claim_name_of(pod, ref.get("name", "")), namespace_of(pod))
                out.append(pod_links.Workload(pod, str(ref.get("name", "")), claim))
    return sorted(out, key=lambda w: name_of(w.pod))


def relevant_nodes(snap: Snapshot, workloads: list[pod_links.Workload]) -> list[str]:
    placed = sorted({w.node for w in workloads if w.node})
    return placed or snap.fabric_nodes()


def diagnose_domain(snap: Snapshot, cd: dict, only_pod: dict | None = None) -> Chain:
    """Every link for one ComputeDomain (restricted to one workload pod when `only_pod` is given)."""
    mode = snap.mode()
    uid = uid_of(cd)
    target = (f"pod {namespace_of(only_pod)}/{name_of(only_pod)}" if only_pod is not None
              else f"computedomain {namespace_of(cd)}/{name_of(cd)}")
    workloads = workloads_of(snap, cd, only_pod)
    chain = Chain(target, mode)
    late = [w.label.removeprefix("pod ") for w in workloads if not w.prepared] \
        if meta_of(cd).get("deletionTimestamp") and mode != names.IMEX_MODE_HOST_MANAGED else []
    chain.links += [domain_links.check_installation(snap, mode),
                    domain_links.check_slices(snap, mode, relevant_nodes(snap, workloads)),
                    domain_links.check_domain(snap, cd, mode, late), domain_links.check_template(snap, cd)]
    if not workloads:
        chain.links.append(domain_links.link("workload", "workload pod references the channel claim", Verdict.SKIP,
                                  f"no pod in {namespace_of(cd)} uses ResourceClaimTemplate "
                                  f"{domain_links.template_name(cd)!r} yet "
                                  "(so zero daemon pods is expected); the per-node links are checked once one "
                                  "does"))
        return chain
    per_pod: dict[str, list[Link]] = {}
    for w in workloads:
        alloc = pod_links.check_allocation(snap, w)
        label = pod_links.check_node_label(snap, w, uid, mode)
        daemon = pod_links.check_daemon(snap, w, uid, mode, label.verdict == Verdict.PASS)
        if mode == names.IMEX_MODE_HOST_MANAGED:
            ready = pod_links.check_host_socket(snap, w)
        else:
            ready = pod_links.check_clique(snap, w, cd, daemon.verdict == Verdict.PASS)
        links = [pod_links.check_workload(w), alloc, label, daemon, ready,
                 pod_links.check_cdi(snap, w), pod_links.check_device(snap, w)]
        for link in links:
            per_pod.setdefault(link.key, []).append(link)
    for key, parts in per_pod.items():
        chain.links.append(fold(key, parts[0].title, parts))
    return chain


def diagnose_pod(snap: Snapshot, namespace: str, name: str) -> Chain:
    pod = snap.find("pods", name, namespace)
    if pod is None:
        raise TargetNotFound(f"pod {namespace}/{name} not found")
    templates = {ref.get("resourceClaimTemplateName") for ref in (pod.get("spec") or {}).get("resourceClaims") or []}
    for cd in snap.items("computedomains"):
        if namespace_of(cd) == namespace and domain_links.template_name(cd) in templates:
            return diagnose_domain(snap, cd, pod)
    mode = snap.mode()
    chain = Chain(f"pod {namespace}/{name}", mode)
    chain.links.append(domain_links.check_installation(snap, mode))
    refused = _refused_for_deleted_domain(snap, pod)
    if refused is not None:
        chain.links.append(domain_links.link(
            "computedomain", "ComputeDomain and its IMEX mode", Verdict.FAIL,
            f"pod {namespace}/{name} takes its channel claim from a ComputeDomain that was deleted before the "
            "claim was prepared: the pod never gets an IMEX channel and stays in ContainerCreating; delete it "
            "(or recreate it for a new ComputeDomain)", [event_line(refused)], {},
            f"kubectl -n {namespace} delete pod {name}"))
        return chain
    chain.links.append(domain_links.link("workload", "workload pod references the channel claim", Verdict.FAIL,
                              f"pod {namespace}/{name} takes no claim from the ResourceClaimTemplate of any "
                              f"ComputeDomain in {namespace} (templates it uses: "
                              f"{', '.join(sorted(t for t in templates if t)) or 'none'})",
                              next_command=f"kubectl -n {namespace} get computedomains -o "
                                           "custom-columns=NAME:.metadata.name,"
                                           "TEMPLATE:.spec.channel.resourceClaimTemplate.name"))
    return chain


def _refused_for_deleted_domain(snap: Snapshot, pod: dict) -> dict | None:
    """kubelet's latest failed-Prepare Event on the pod, if it says the pod's domain is being
    deleted or gone."""
    for event in reversed(snap.events_about(name_of(pod), namespace_of(pod))):
        if event.get("reason") == names.EVENT_FAILED_PREPARE:
            message = str(event.get("message") or "")
            if names.PREPARE_DOMAIN_DELETING in message or names.PREPARE_DOMAIN_GONE in message:
                return event
            return None
    return None


def diagnose_computedomain(snap: Snapshot, namespace: str, name: str) -> Chain:
    cd = snap.find("computedomains", name, namespace)
    if cd is None:
        raise TargetNotFound(f"ComputeDomain {namespace}/{name} not found")
    return diagnose_domain(snap, cd)


def diagnose_all(snap: Snapshot) -> list[Chain]:
    cds = sorted(snap.items("computedomains"), key=lambda c: (namespace_of(c), name_of(c)))
    if not cds:
        mode = snap.mode()
        chain = Chain("all ComputeDomains", mode, [domain_links.check_installation(snap, mode),
                                                  domain_links.check_slices(snap, mode, snap.fabric_nodes())])
        return [chain]
    return [diagnose_domain(snap, cd) for cd in cds]
