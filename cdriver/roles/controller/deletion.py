"""What to do next to tear a ComputeDomain down (pure).

Order: delete every generated object that is not terminating yet (workload template, daemon
template, DaemonSet — each independently, so a daemon template whose DaemonSet was never
created is deleted too); strip the domain's label from every node; release the workload
template's finalizer and wait until it is gone; then release the daemon template's and the
DaemonSet's finalizers and wait until they are gone; finally release the domain's finalizer.
The same plan cleans up after a domain that no longer exists (orphans), minus the last step.

While pods still use the domain's channels, only the workload template goes (no new workload
can join); the daemons, their DaemonSet and the node labels stay, so running jobs keep their
IMEX domain, and the domain's finalizer stays until the last pod releases its claim (as
Kubernetes protects a PersistentVolumeClaim in use).

A pod uses a channel once its claim was prepared (`holds_channel`). The kubelet plugin
refuses to prepare a channel claim of a domain being deleted, so a pod whose claim was not
prepared before the deletion began never gets a channel and holds nothing: the deletion does
not wait for it, and it stays in ContainerCreating with kubelet's Event saying why.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.kube.objects import meta_of

ROLE_WORKLOAD_TEMPLATE = "workload-template"
ROLE_DAEMON_TEMPLATE = "daemon-template"
ROLE_DAEMON_SET = "daemon-set"


@dataclass(frozen=True)
class Generated:
    """A generated object as seen in the caches."""

    role: str
    namespace: str
    name: str
    terminating: bool
    has_finalizer: bool

    def describe(self) -> str:
        kind = "DaemonSet" if self.role == ROLE_DAEMON_SET else "ResourceClaimTemplate"
        return f"{kind} {self.namespace}/{self.name}"


class Action(enum.Enum):
    DELETE = "delete"
    UNLABEL_NODE = "unlabel-node"
    REMOVE_FINALIZER = "remove-finalizer"
    RELEASE_DOMAIN = "release-domain"


@dataclass(frozen=True)
class Step:
    action: Action
    target: Generated | None = None
    node: str = ""


@dataclass(frozen=True)
class DeletionPlan:
    """Steps to run now, in order, and what the plan then waits for (watch events)."""

    steps: tuple[Step, ...]
    waiting_for: tuple[str, ...] = field(default=())

    @property
    def releases_domain(self) -> bool:
        return any(s.action is Action.RELEASE_DOMAIN for s in self.steps)

    @property
    def finished(self) -> bool:
        """Once the steps ran, nothing is left to wait for."""
        return not self.waiting_for


def generated_from(obj: dict, role: str) -> Generated:
    """Describe a cached object for the planner."""
    meta = meta_of(obj)
    return Generated(
        role=role,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        terminating=bool(meta.get("deletionTimestamp")),
        has_finalizer=constants.FINALIZER in (meta.get("finalizers") or []),
    )


def _release(objs: list[Generated]) -> tuple[list[Step], list[str]]:
    steps, waiting = [], []
    for obj in objs:
        if obj.terminating and obj.has_finalizer:
            steps.append(Step(Action.REMOVE_FINALIZER, obj))
        waiting.append(f"{obj.describe()} to disappear")
    return steps, waiting


@dataclass(frozen=True)
class WorkloadUse:
    """A workload claim of the domain that pods still hold."""

    namespace: str
    claim: str
    #: (name, uid) of each pod the claim is reserved for.
    pods: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        names = ", ".join(f"{self.namespace}/{name}" for name, _ in self.pods)
        return f"pod {names} (claim {self.claim})" if len(self.pods) == 1 else f"pods {names} (claim {self.claim})"


def _claim_domains(claim: dict) -> set[str]:
    configs = ((claim.get("spec") or {}).get("devices") or {}).get("config") or []
    out = set()
    for config in configs:
        opaque = (config or {}).get("opaque") or {}
        params = opaque.get("parameters") or {}
        if opaque.get("driver") == constants.DRIVER_NAME and isinstance(params, dict) \
                and params.get("kind") == constants.KIND_CHANNEL_CONFIG:
            out.add(str(params.get("domainID") or ""))
    return out


#: The pod condition kubelet sets True once the pod's sandbox exists, which kubelet creates
#: only after every claim of the pod was prepared.
CONDITION_READY_TO_START = "PodReadyToStartContainers"


def _container_ran(status: Mapping) -> bool:
    state = status.get("state") or {}
    return bool("running" in state or "terminated" in state or status.get("lastState")
                or status.get("restartCount") or status.get("started"))


def holds_channel(pod: Mapping | None) -> bool:
    """Whether ``pod`` may hold a prepared channel (so the domain's deletion waits for it).

    Yes once a container of it ran or kubelet reports PodReadyToStartContainers True (its
    sandbox exists, so its claims were prepared: this covers an image pull that is still
    running). No when kubelet reports that condition False and no container ever ran: Prepare
    has not succeeded. Where kubelet says neither (no status yet, a kubelet without the
    condition) or the pod is not in the list (force-deleted: its containers may still run),
    it counts, as the safe side: the wait ends when the claim's reservation goes.
    """
    if pod is None:
        return True
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        if any(_container_ran(c) for c in status.get(key) or [] if isinstance(c, Mapping)):
            return True
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION_READY_TO_START:
            return cond.get("status") == "True"
    return True


def workloads_in_use(claims: list[dict], domain_uid: str,
                     pods: Mapping[str, Mapping] | None = None) -> list[WorkloadUse]:
    """The domain's channel claims reserved for pods that hold their channel, sorted by claim
    name. ``pods`` maps pod UID to pod (the claims' namespace); None: the pods are unknown,
    every reserved pod counts."""
    out = []
    for claim in claims:
        if domain_uid not in _claim_domains(claim):
            continue
        status = claim.get("status") or {}
        pods_of = tuple((str(r.get("name") or ""), str(r.get("uid") or ""))
                        for r in status.get("reservedFor") or [] if r.get("resource") == "pods")
        if pods is not None:
            pods_of = tuple((name, uid) for name, uid in pods_of if holds_channel(pods.get(uid)))
        if status.get("allocation") and pods_of:
            meta = meta_of(claim)
            out.append(WorkloadUse(str(meta.get("namespace") or ""), str(meta.get("name") or ""), pods_of))
    return sorted(out, key=lambda u: u.claim)


def plan_deletion(objects: list[Generated], labelled_nodes: list[str],
                  domain_exists: bool = True, in_use: list[WorkloadUse] | None = None) -> DeletionPlan:
    """The next steps given the generated objects, nodes labelled for the domain and the
    workload claims pods still hold."""
    if in_use:
        workload = [o for o in objects if o.role == ROLE_WORKLOAD_TEMPLATE]
        steps = [Step(Action.DELETE, o) for o in workload if not o.terminating]
        steps += [Step(Action.REMOVE_FINALIZER, o) for o in workload if o.terminating and o.has_finalizer]
        return DeletionPlan(tuple(steps), tuple(f"{u.describe()} to end" for u in in_use))
    steps = [Step(Action.DELETE, o) for o in objects if not o.terminating]
    steps += [Step(Action.UNLABEL_NODE, node=n) for n in sorted(labelled_nodes)]
    workload = [o for o in objects if o.role == ROLE_WORKLOAD_TEMPLATE]
    daemon = [o for o in objects if o.role != ROLE_WORKLOAD_TEMPLATE]
    phase = workload or daemon
    if phase:
        release, waiting = _release(phase)
        return DeletionPlan(tuple(steps + release), tuple(waiting))
    if domain_exists:
        steps.append(Step(Action.RELEASE_DOMAIN))
    return DeletionPlan(tuple(steps))
