"""Reconcile one ComputeDomain against the caches; run deletion and orphan-cleanup plans.

Decisions come from the pure modules (`desired`, `status`, `deletion`, `cleanup`); this module
reads the informer caches (through the read-your-writes `Overlay`) and performs the writes.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.api.types import ComputeDomain, ValidationError
from cdriver.kube.errors import ApiError
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer
from cdriver.kube.objects import being_deleted, finalizers_of, generation_of, meta_of, name_of, object_key, uid_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES, Resource
from cdriver.kube.workqueue import RequeueAfter
from cdriver.roles.controller import daemon_gates, deletion
from cdriver.roles.controller.cleanup import objects_of, orphan_domains
from cdriver.roles.controller.desired import (
    DAEMON_CONTAINER_NAME,
    allocation_mode_forced,
    daemon_claim_template,
    daemon_set,
    domain_uid_of,
    has_finalizer,
    is_terminating,
    labels_of,
    owned_by,
    workload_claim_template,
)
from cdriver.roles.controller.metrics import ControllerMetrics
from cdriver.roles.controller.overlay import Overlay
from cdriver.roles.controller.settings import ControllerSettings
from cdriver.roles.controller.status import (
    CONDITION_READY,
    Problem,
    aggregate_nodes,
    corrected_clique,
    desired_status,
    pod_node_name,
    pod_ready,
    pruned_fields,
    status_differs,
    without_fields,
)
from cdriver.roles.controller.trim import (
    Trim,
    daemon_set_summary,
    metadata_only,
    pod_summary,
    without_managed_fields,
)

log = logging.getLogger(__name__)

CDS = COMPUTE_DOMAINS
TEMPLATES = RESOURCES["resourceclaimtemplates"]
DAEMON_SETS = RESOURCES["daemonsets"]
PODS = RESOURCES["pods"]
NODES = RESOURCES["nodes"]
CLAIMS = RESOURCES["resourceclaims"]
CLIQUES = COMPUTE_DOMAIN_CLIQUES

INDEX_UID = "uid"
INDEX_DOMAIN = "domain"
INDEX_DOMAIN_TARGET = "domain-target"

EVENT_INVALID = "InvalidComputeDomain"
EVENT_ALLOCATION_MODE_FORCED = "AllocationModeForced"
#: Condition reason and Event reason of a deletion that waits for workload pods.
REASON_DELETION_WAITS = "DeletionWaitsForWorkloads"
REASON_CONFLICT = "{kind}Conflict"
REASON_CREATE_FAILED = "{kind}CreateFailed"
REASON_TERMINATING = "{kind}Terminating"

#: Cache trimming per resource: objects written back whole keep everything but managedFields.
TRIMS: dict[str, Trim] = {
    CDS.plural: without_managed_fields,
    CLIQUES.plural: without_managed_fields,
    TEMPLATES.plural: metadata_only,
    DAEMON_SETS.plural: daemon_set_summary,
    NODES.plural: metadata_only,
    PODS.plural: pod_summary,
}

_ROLE_TARGET = {
    deletion.ROLE_WORKLOAD_TEMPLATE: constants.TARGET_WORKLOAD,
    deletion.ROLE_DAEMON_TEMPLATE: constants.TARGET_DAEMON,
    deletion.ROLE_DAEMON_SET: constants.TARGET_DAEMON,
}


def domain_target_index(obj: dict) -> list[str]:
    """Index ``<uid>/<target>`` of generated objects."""
    labels = labels_of(obj)
    uid = labels.get(constants.LABEL_COMPUTE_DOMAIN)
    return [f"{uid}/{labels.get(constants.LABEL_TARGET, '')}"] if uid else []


def domain_index(obj: dict) -> list[str]:
    """Index by the domain label (cliques: also the ``<uid>.`` name prefix)."""
    uid = domain_uid_of(obj)
    if uid:
        return [uid]
    if obj.get("kind") == constants.KIND_COMPUTE_DOMAIN_CLIQUE:
        name = name_of(obj)
        return [name.split(".", 1)[0]] if "." in name else []
    return []


def parse_domain(obj: dict) -> ComputeDomain:
    """Decode a domain's metadata and spec strictly (status is the controller's own output)."""
    return ComputeDomain.from_dict({k: v for k, v in obj.items() if k != "status"})


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kind(role: str) -> str:
    return "DaemonSet" if role == deletion.ROLE_DAEMON_SET else "ResourceClaimTemplate"


@dataclass
class Caches:
    """The informers the reconciler reads; daemon-side ones are None in host-managed mode."""

    domains: Informer
    templates: Informer
    daemon_sets: Informer | None = None
    pods: Informer | None = None
    cliques: Informer | None = None
    nodes: Informer | None = None

    def all(self) -> list[Informer]:
        return [i for i in (self.domains, self.templates, self.daemon_sets, self.pods,
                            self.cliques, self.nodes) if i is not None]


@dataclass
class Timing:
    """Retry intervals (short in tests)."""

    #: Re-check a domain blocked by a problem a user must fix (no watch event tells us).
    problem_retry_seconds: float = 30.0
    #: Safety re-check while waiting for watch events (deletions, recreations).
    wait_retry_seconds: float = 10.0
    #: Re-check of a deletion that waits for workload pods to release their claims (claims are
    #: not watched: only a deleting domain with running workloads asks).
    workload_retry_seconds: float = 2.0


class Reconciler:
    """Brings one ComputeDomain (by cache key) to its desired state."""

    def __init__(self, raw: RawClient, caches: Caches, settings: ControllerSettings,
                 recorder: EventRecorder, metrics: ControllerMetrics,
                 overlay: Overlay | None = None, timing: Timing | None = None,
                 clock: Callable[[], str] = _now) -> None:
        self.raw = raw
        self.caches = caches
        self.settings = settings
        self.recorder = recorder
        self.metrics = metrics
        self.overlay = overlay or Overlay()
        self.timing = timing or Timing()
        self.clock = clock
        #: How objects are trimmed in the caches, per resource (our records match them).
        self.trims: dict[str, Trim] = dict(TRIMS)
        self._invalid_seen: dict[str, str] = {}
        #: Status fields the installed CRD prunes: not written again (no endless re-writes).
        self._pruned_status: set[str] = set()
        #: Pods told that the domain they use is being deleted, per domain UID.
        self._deletion_announced: dict[str, set[tuple[str, str]]] = {}
        #: DaemonSets whose gates a newer controller set, with its stamp (logged once).
        self._gates_left: dict[str, str] = {}

    # --- cache reads --------------------------------------------------------------------
    def domain(self, key: str) -> dict | None:
        return self.overlay.resolve(CDS.plural, key, self.caches.domains.get(key))

    def domain_keys(self, uid: str) -> list[str]:
        return [object_key(o) for o in self.caches.domains.by_index(INDEX_UID, uid)]

    def known_uids(self) -> set[str]:
        return {uid_of(o) for o in self.caches.domains.objects()}

    def generated(self, role: str, uid: str) -> list[dict]:
        """Generated objects of ``role`` labelled for ``uid`` (cache + our recent writes)."""
        target = _ROLE_TARGET[role]
        if role == deletion.ROLE_DAEMON_SET:
            if self.caches.daemon_sets is None:
                return []
            informer, plural = self.caches.daemon_sets, DAEMON_SETS.plural
            cached = informer.by_index(INDEX_DOMAIN, uid)
        else:
            informer, plural = self.caches.templates, TEMPLATES.plural
            cached = informer.by_index(INDEX_DOMAIN_TARGET, f"{uid}/{target}")
            if role == deletion.ROLE_DAEMON_TEMPLATE and self.settings.host_managed:
                return []

        found = [o for o in self.overlay.merge(plural, cached, uid)
                 if role == deletion.ROLE_DAEMON_SET or labels_of(o).get(constants.LABEL_TARGET) == target]
        if role == deletion.ROLE_DAEMON_TEMPLATE:  # only the driver namespace holds daemon templates
            found = [o for o in found if meta_of(o).get("namespace")
                     == self.settings.namespace]
        return sorted(found, key=object_key)

    def labelled_nodes(self, uid: str) -> list[str]:
        if self.caches.nodes is None:
            return []
        nodes = self.overlay.merge(NODES.plural, self.caches.nodes.by_index(INDEX_DOMAIN, uid))
        return sorted(name_of(o) for o in nodes
                      if domain_uid_of(o) == uid)

    def pods(self, uid: str) -> list[dict]:
        if self.caches.pods is None:
            return []
        return self.caches.pods.by_index(INDEX_DOMAIN, uid)

    def cliques(self, uid: str) -> list[dict]:
        if self.caches.cliques is None:
            return []
        return self.overlay.merge(CLIQUES.plural,
                                  self.caches.cliques.by_index(INDEX_DOMAIN, uid))

    # --- writes -------------------------------------------------------------------------
    def _record(self, verb: str, plural: str, obj: dict) -> dict:
        self.metrics.write(verb, plural)
        if obj.get("metadata"):
            self.overlay.record(plural, self.trims.get(plural, without_managed_fields)(obj))
        return obj

    def _update(self, res: Resource, body: dict) -> dict:
        return self._record("update", res.plural, self.raw.update(res, body))

    def _create(self, res: Resource, obj: dict) -> dict:
        """Create with compact JSON. Opaque device parameters are stored byte for byte: sent
        with spaces they would differ from the server's own re-encoding, and every later patch
        of the claim template (even a label) would fail as a change of its immutable spec."""
        return self.raw.create(res, obj)  # RawClient sends compact JSON

    def _patch_finalizers(self, res: Resource, obj: dict, finalizers: list[str],
                          labels: dict[str, str] | None = None) -> dict:
        """Set the finalizers (and add `labels`) with an optimistic-concurrency merge patch (the
        cached copy may be trimmed, so never a full update)."""
        meta = obj["metadata"]
        patch: dict = {"metadata": {"resourceVersion": meta["resourceVersion"],
                                    "finalizers": finalizers}}
        if labels:
            patch["metadata"]["labels"] = labels
        try:
            return self.raw.patch(res, meta["name"], patch, namespace=meta.get("namespace"))
        except ApiError as exc:
            if not exc.invalid:
                raise
        # Written by a client that sent opaque parameters with whitespace: the server cannot
        # patch it (see `_create`), but a full update with its own bytes works.
        current = self.raw.get(res, meta["name"], meta.get("namespace"))
        if current["metadata"].get("resourceVersion") != meta["resourceVersion"]:
            raise ApiError(409, "Conflict", f"{object_key(obj)} changed; retrying")
        current["metadata"]["finalizers"] = finalizers
        if labels:
            current["metadata"]["labels"] = {**(current["metadata"].get("labels") or {}), **labels}
        return self.raw.update(res, current)

    def _with_finalizer(self, res: Resource, obj: dict) -> dict:
        finalizers = list(finalizers_of(obj)) + [constants.FINALIZER]
        return self._record("patch", res.plural, self._patch_finalizers(res, obj, finalizers))

    def _claim_domain(self, obj: dict) -> dict:
        """Our finalizer and the UID label (which the kubelet plugins watch a domain by) on a
        domain, in one write."""
        finalizers = list(finalizers_of(obj))
        if constants.FINALIZER not in finalizers:
            finalizers.append(constants.FINALIZER)
        return self._record("patch", CDS.plural, self._patch_finalizers(
            CDS, obj, finalizers, {constants.LABEL_DOMAIN_UID: uid_of(obj)}))

    def _without_finalizer(self, res: Resource, obj: dict) -> None:
        finalizers = [f for f in finalizers_of(obj)
                      if f != constants.FINALIZER]
        try:
            result = self._patch_finalizers(res, obj, finalizers)
        except ApiError as exc:
            if not exc.not_found:
                raise
            self.overlay.record_gone(res.plural, object_key(obj), obj)
            return
        self._record_result("patch", res, result, object_key(obj))
        log.debug("released finalizer of %s %s", res.kind, object_key(obj))

    def _record_result(self, verb: str, res: Resource, result: dict, key: str) -> None:
        """Record a write that may have removed the object (last finalizer released)."""
        self.metrics.write(verb, res.plural)
        meta = meta_of(result)
        terminating = bool(meta.get("deletionTimestamp"))
        if verb == "delete":
            exists = terminating and bool(meta.get("finalizers"))
        else:
            exists = not terminating or bool(meta.get("finalizers"))
        if result.get("kind") == res.kind and exists:
            self.overlay.record(res.plural, self.trims.get(res.plural, without_managed_fields)(
                result))
        else:
            self.overlay.record_gone(res.plural, key, result if meta else None)

    # --- reconcile ----------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        log.debug("reconciling ComputeDomain %s", key)
        obj = self.domain(key)
        if obj is None:
            return
        if being_deleted(obj):
            self.finalize(obj)
            return
        try:
            cd = parse_domain(obj)
        except ValidationError as exc:
            self._invalid(obj, exc)
            return
        if constants.FINALIZER not in finalizers_of(obj) or labels_of(obj).get(constants.LABEL_DOMAIN_UID) != cd.uid:
            obj = self._claim_domain(obj)
        problem: Problem | None = None
        complete = True
        daemon_name = constants.daemon_object_name(cd.uid)
        if not self.settings.host_managed:
            template, problem = self._ensure(
                obj, deletion.ROLE_DAEMON_TEMPLATE, self.settings.namespace, daemon_name,
                lambda: daemon_claim_template(cd, self.settings))
            if template is not None:
                template_name = template["metadata"]["name"]
                ds, ds_problem = self._ensure(
                    obj, deletion.ROLE_DAEMON_SET, self.settings.namespace, daemon_name,
                    lambda: daemon_set(cd, self.settings, template_name))
                if ds is not None:
                    ds = self._follow_gates(obj, ds)
                problem = problem or ds_problem
                complete = ds is not None
            else:
                complete = False
        workload, wl_problem = self._ensure(
            obj, deletion.ROLE_WORKLOAD_TEMPLATE, cd.namespace, cd.channel_template_name,
            lambda: workload_claim_template(cd, self.settings))
        problem = wl_problem or problem
        complete = complete and workload is not None
        nodes = [] if self.settings.host_managed else self._nodes(obj, cd.uid)
        self._write_status(obj, cd, nodes, problem)
        if problem is not None:
            raise RequeueAfter(self.timing.problem_retry_seconds
                               if problem.warn else self.timing.wait_retry_seconds,
                               f"{key}: {problem.reason}")
        if not complete:  # pragma: no cover - every incomplete path carries a problem
            raise RequeueAfter(self.timing.wait_retry_seconds, f"{key}: incomplete")

    def _follow_gates(self, cd_obj: dict, ds: dict) -> dict:
        """Rewrite the daemon feature gates of a DaemonSet created under other gates (see
        `daemon_gates`); say so on the domain. Returns the DaemonSet as it now is."""
        settings = self.settings
        decision = daemon_gates.decide(ds, DAEMON_CONTAINER_NAME, settings.feature_gates_env, settings.started_at)
        if not decision.changes:
            return ds
        key = object_key(ds)
        if not decision.update:
            if self._gates_left.get(key) != decision.newer_stamp:
                self._gates_left[key] = decision.newer_stamp
                log.info("%s: DaemonSet %s differs from this controller's gates (%s) but a controller started "
                         "at %s, after this one (%s), set them: left as they are", object_key(cd_obj), key,
                         daemon_gates.describe(decision.changes), decision.newer_stamp, settings.started_at)
            return ds
        meta = meta_of(ds)
        current = self.raw.get_or_none(DAEMON_SETS, meta["name"], meta.get("namespace"))
        if current is None or is_terminating(current):
            return ds
        decision = daemon_gates.decide(current, DAEMON_CONTAINER_NAME, settings.feature_gates_env,
                                       settings.started_at)
        if not decision.update:  # set meanwhile (by a newer controller, or as wanted)
            return current
        updated = self._update(DAEMON_SETS, daemon_gates.with_gates(
            current, DAEMON_CONTAINER_NAME, settings.feature_gates_env, settings.started_at))
        message = (f"the IMEX daemons of this domain (DaemonSet {key}) ran with "
                   f"{daemon_gates.describe(decision.changes)} of the controller's feature gates: their pod "
                   "template now carries the controller's gates, and every daemon pod restarts once, all at "
                   "once, to register where the kubelet plugins look")
        log.info("%s: %s", object_key(cd_obj), message)
        self.recorder.normal(cd_obj, daemon_gates.EVENT_FOLLOW_GATES, message)
        return updated

    def _invalid(self, obj: dict, exc: ValidationError) -> None:
        """Nothing is generated for an invalid domain; its status and an Event say why."""
        meta = meta_of(obj)
        uid, rv = meta.get("uid", ""), meta.get("resourceVersion", "")
        log.warning("%s: %s", object_key(obj), exc)
        message = f"{exc}; fix the ComputeDomain (its spec is immutable: delete and recreate it)"
        if self._invalid_seen.get(uid) != rv:
            self._invalid_seen[uid] = rv
            self.recorder.warning(obj, EVENT_INVALID, message)
        current = obj.get("status") or {}
        want = desired_status(current, 0, [], "", self.settings.host_managed,
                              Problem(EVENT_INVALID, message), generation_of(obj), self.clock())
        want = without_fields(want, self._pruned_status)
        if status_differs(current, want):
            self._record("update_status", CDS.plural,
                         self.raw.update_status(CDS, {**copy.deepcopy(obj), "status": want}))

    def _ensure(self, cd_obj: dict, role: str, namespace: str, name: str,
                build: Callable[[], dict]) -> tuple[dict | None, Problem | None]:
        """Create (from ``build()``) or adopt one generated object; never overwrite someone
        else's. Objects are found by the domain's label, preferring ``namespace/name``."""
        res = DAEMON_SETS if role == deletion.ROLE_DAEMON_SET else TEMPLATES
        uid = meta_of(cd_obj)["uid"]
        existing = [o for o in self.generated(role, uid)
                    if o["metadata"].get("namespace") == namespace]
        if existing:
            chosen = next((o for o in existing if o["metadata"]["name"] == name
                           and o["metadata"].get("namespace") == namespace), existing[0])
            if len(existing) > 1:
                log.warning("%s: %d %ss labelled for domain %s; using %s", object_key(cd_obj),
                            len(existing), _kind(role), uid, object_key(chosen))
            return self._adopt(res, role, chosen)
        want = build()
        try:
            created = self._record("create", res.plural, self._create(res, want))
        except ApiError as exc:
            return self._create_failed(cd_obj, res, role, want, uid, exc)
        log.info("%s: created %s %s", object_key(cd_obj), _kind(role), object_key(created))
        if role == deletion.ROLE_WORKLOAD_TEMPLATE:
            self._note_forced_mode(cd_obj)
        return created, None

    def _adopt(self, res: Resource, role: str, obj: dict) -> tuple[dict | None, Problem | None]:
        if is_terminating(obj):
            # Someone deleted it while the domain lives: let it go, recreate it afterwards.
            if has_finalizer(obj):
                self._without_finalizer(res, obj)
            kind = _kind(role)
            return None, Problem(
                REASON_TERMINATING.format(kind=kind),
                f"{kind} {object_key(obj)} is being deleted; it is recreated once gone",
                warn=False)
        if not has_finalizer(obj):
            obj = self._with_finalizer(res, obj)
        return obj, None

    def _create_failed(self, cd_obj: dict, res: Resource, role: str, want: dict, uid: str,
                       exc: ApiError) -> tuple[dict | None, Problem | None]:
        kind = _kind(role)
        meta = want["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        if exc.already_exists:
            current = self.raw.get_or_none(res, meta["name"], meta["namespace"])
            if current is None:
                raise exc  # deleted meanwhile: retry
            if owned_by(current, uid):
                self.overlay.record(res.plural, current)
                return self._adopt(res, role, current)
            owner = domain_uid_of(current)
            whose = (f"it belongs to ComputeDomain {owner}" if owner
                     else f"it has no {constants.LABEL_COMPUTE_DOMAIN} label")
            fix = ("delete or rename that object, or recreate this ComputeDomain with another "
                   "spec.channel.resourceClaimTemplate.name" if role == deletion.ROLE_WORKLOAD_TEMPLATE
                   else "delete that object")
            return None, Problem(
                REASON_CONFLICT.format(kind=kind),
                f"{kind} {where} already exists and {whose}; it was left untouched. To fix: "
                f"{fix}.")
        if exc.invalid or exc.forbidden or exc.status in (400, 404):
            return None, Problem(
                REASON_CREATE_FAILED.format(kind=kind),
                f"creating {kind} {where} failed: {exc.message or exc}")
        raise exc

    def _note_forced_mode(self, cd_obj: dict) -> None:
        mode = ((cd_obj.get("spec") or {}).get("channel") or {}).get("allocationMode") or ""
        if allocation_mode_forced(mode, self.settings.host_managed):
            self.recorder.warning(
                cd_obj, EVENT_ALLOCATION_MODE_FORCED,
                "allocationMode All is not available with host-managed IMEX: the workload "
                "ResourceClaimTemplate hands out channel 0 only (allocationMode Single)")

    def _nodes(self, cd_obj: dict, uid: str) -> list[dict]:
        pods = self.pods(uid)
        cliques: list[dict] = []
        if self.settings.cliques_enabled:
            hosts = {pod_node_name(p) for p in pods} - {""}
            ready = {pod_node_name(p) for p in pods if pod_ready(p)} - {""}
            for clique in self.cliques(uid):
                kept = corrected_clique(clique, hosts, ready, self.settings.max_nodes_per_imex_domain)
                if kept is not None:
                    clique = self._correct(clique, kept)
                cliques.append(clique)
        current = ((cd_obj.get("status") or {}).get("nodes")) or []
        return aggregate_nodes(current, cliques, pods, self.settings.cliques_enabled)

    def _correct(self, clique: dict, kept: list[dict]) -> dict:
        body = copy.deepcopy(clique)
        if kept:
            body["daemons"] = kept
        else:
            body.pop("daemons", None)
        before = {d.get("nodeName"): d.get("status") for d in clique.get("daemons") or []}
        after = {d.get("nodeName"): d.get("status") for d in kept}
        gone = sorted(map(str, before.keys() - after.keys()))
        demoted = sorted(str(n) for n, st in after.items() if st != before.get(n))
        old_index = {d.get("nodeName"): d.get("index") for d in clique.get("daemons") or []}
        indexed = sorted(f"{d.get('nodeName')}={d.get('index')}" for d in kept
                         if d.get("index") != old_index.get(d.get("nodeName")))
        if indexed:
            log.info("clique %s: assigning indices %s", object_key(clique), ", ".join(indexed))
        if gone:
            log.info("clique %s: removing entries of nodes without a daemon pod: %s",
                     object_key(clique), ", ".join(gone))
        if demoted:
            log.warning("clique %s: daemon pods not Ready on nodes %s (killed or failing); their "
                        "entries are NotReady until the daemons report Ready again",
                        object_key(clique), ", ".join(demoted))
        return self._update(CLIQUES, body)

    def _write_status(self, obj: dict, cd: ComputeDomain, nodes: list[dict],
                      problem: Problem | None) -> None:
        current = obj.get("status") or {}
        want = desired_status(
            current, cd.num_nodes, nodes, cd.channel_template_name, self.settings.host_managed,
            problem, generation_of(obj), self.clock(),
            forced_single=allocation_mode_forced(cd.allocation_mode,
                                                 self.settings.host_managed))
        want = without_fields(want, self._pruned_status)
        if not status_differs(current, want):
            return
        body = copy.deepcopy(obj)
        body["status"] = want
        stored = self._record("update_status", CDS.plural, self.raw.update_status(CDS, body))
        dropped = pruned_fields(want, stored.get("status") or {}) - self._pruned_status
        if dropped:
            self._pruned_status |= dropped
            log.warning("the installed ComputeDomain CRD drops status fields %s (an older CRD, e.g. the "
                        "upstream driver's, is installed; Helm does not upgrade CRDs): they are no longer "
                        "written; apply cdriver's CRDs with `cdriver crds apply -f helm/cdriver/crds/`",
                        ", ".join(sorted(dropped)))
        previous = next((c.get("reason") for c in current.get("conditions") or []
                         if c.get("type") == CONDITION_READY), None)
        if problem is not None and problem.warn and previous != problem.reason:
            self.recorder.warning(obj, problem.reason, problem.message)
        # the conditions are gone from `want` once the installed CRD is seen to prune them
        reason = next((c.get("reason") for c in want.get("conditions") or []), None)
        log.info("%s: status %s (%s)", object_key(obj), want["status"],
                 reason or (problem.reason if problem else "no conditions kept by the installed CRD"))

    # --- deletion -----------------------------------------------------------------------
    def _state(self, uid: str) -> tuple[list[deletion.Generated], dict[tuple[str, str], dict]]:
        generated, objects = [], {}
        for role in (deletion.ROLE_WORKLOAD_TEMPLATE, deletion.ROLE_DAEMON_TEMPLATE, deletion.ROLE_DAEMON_SET):
            for obj in self.generated(role, uid):
                g = deletion.generated_from(obj, role)
                generated.append(g)
                objects[(role, object_key(obj))] = obj
        return generated, objects

    def finalize(self, cd_obj: dict) -> None:
        """Tear a deleted domain down, step by step, then release its finalizer; while pods
        still use its channels, keep its daemons and say so on the domain and the pods."""
        if constants.FINALIZER not in finalizers_of(cd_obj):
            return
        uid = cd_obj["metadata"]["uid"]
        labelled = self.labelled_nodes(uid)
        # A channel is handed out only on a node labelled for the domain: without one, no pod
        # holds a working channel and nothing waits.
        in_use = self._workloads_in_use(cd_obj) if labelled else []
        generated, objects = self._state(uid)
        plan = deletion.plan_deletion(generated, labelled, domain_exists=True, in_use=in_use)
        self._execute(plan, uid, objects, cd_obj)
        if in_use:
            self._announce_kept(cd_obj, in_use)
            raise RequeueAfter(self.timing.workload_retry_seconds,
                               f"{object_key(cd_obj)}: deletion waits for " + "; ".join(plan.waiting_for))
        if plan.releases_domain:
            self._delete_cliques(uid)
            self._deletion_announced.pop(uid, None)
            log.info("%s: cleaned up, finalizer released", object_key(cd_obj))
            return
        raise RequeueAfter(self.timing.wait_retry_seconds,
                           f"{object_key(cd_obj)}: waiting for " + "; ".join(plan.waiting_for))

    def _workloads_in_use(self, cd_obj: dict) -> list[deletion.WorkloadUse]:
        """The domain's workload claims that pods hold (driver-managed mode: in host-managed
        mode the host's IMEX service outlives the domain, nothing waits)."""
        if self.settings.host_managed:
            return []
        namespace = meta_of(cd_obj).get("namespace")
        claims = self._list_or_none(CLAIMS, namespace, cd_obj, "deleting without waiting for workload pods; "
                                    "grant the controller get/list on resourceclaims (the chart does)")
        if claims is None:
            return []
        reserved = deletion.workloads_in_use(claims, uid_of(cd_obj))
        if not reserved:
            return []
        # tell pods that hold a channel from pods that never got one (unknown: every reserved pod counts)
        pods = self._list_or_none(PODS, namespace, cd_obj, "the deletion waits for every pod its claims are "
                                  "reserved for; grant the controller list on pods (the chart does)")
        return deletion.workloads_in_use(claims, uid_of(cd_obj), None if pods is None else {uid_of(p): p for p in pods})

    def _list_or_none(self, res: Resource, namespace: str | None, cd_obj: dict, consequence: str) -> list[dict] | None:
        """The namespace's objects of `res`; None (with a warning saying `consequence`) where
        the controller may not list them."""
        try:
            return self.raw.list(res, namespace=namespace)["items"]
        except ApiError as exc:
            if not exc.forbidden:
                raise
            log.warning("%s: cannot list %s (%s): %s", object_key(cd_obj), res.plural, exc, consequence)
            return None

    def _announce_kept(self, cd_obj: dict, in_use: list[deletion.WorkloadUse]) -> None:
        """Status and Events (once per pod) of a deletion that waits for workloads."""
        key, uid = object_key(cd_obj), uid_of(cd_obj)
        pods = "; ".join(u.describe() for u in in_use)
        message = (f"ComputeDomain {key} is being deleted while pods still use its IMEX channels: {pods}. "
                   "Its IMEX daemons stay, and the deletion completes, once those pods end; delete them to "
                   "finish it now")
        try:
            cd = parse_domain(cd_obj)
        except ValidationError:
            cd = None
        if cd is not None:
            self._write_status(cd_obj, cd, self._nodes(cd_obj, uid),
                               Problem(REASON_DELETION_WAITS, message, warn=False))
        announced = self._deletion_announced.setdefault(uid, set())
        if not announced:
            self.recorder.warning(cd_obj, REASON_DELETION_WAITS, message)
        for use in in_use:
            for name, pod_uid in use.pods:
                if (name, pod_uid) in announced:
                    continue
                announced.add((name, pod_uid))
                pod_ref = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": use.namespace, "uid": pod_uid}}
                self.recorder.warning(pod_ref, REASON_DELETION_WAITS, (
                    f"ComputeDomain {key}, whose IMEX channel this pod uses (claim {use.claim}), is being "
                    "deleted: it stays until this pod and the other pods using it end; no new pod can join it"))

    def _execute(self, plan: deletion.DeletionPlan, uid: str, objects: dict[tuple[str, str], dict],
                 cd_obj: dict | None) -> None:
        for step in plan.steps:
            target = step.target
            if step.action is deletion.Action.DELETE and target is not None:
                self._delete(target, objects)
            elif step.action is deletion.Action.UNLABEL_NODE:
                self._unlabel(step.node, uid)
            elif step.action is deletion.Action.REMOVE_FINALIZER and target is not None:
                res = DAEMON_SETS if target.role == deletion.ROLE_DAEMON_SET else TEMPLATES
                self._without_finalizer(
                    res, objects[(target.role, f"{target.namespace}/{target.name}")])
            elif step.action is deletion.Action.RELEASE_DOMAIN and cd_obj is not None:
                self._without_finalizer(CDS, cd_obj)

    def _delete(self, target: deletion.Generated, objects: dict) -> None:
        res = DAEMON_SETS if target.role == deletion.ROLE_DAEMON_SET else TEMPLATES
        key = f"{target.namespace}/{target.name}"
        try:
            result = self.raw.delete(res, target.name, target.namespace)
        except ApiError as exc:
            if not exc.not_found:
                raise
            self.overlay.record_gone(res.plural, key, objects.get((target.role, key)))
            return
        self._record_result("delete", res, result, key)
        log.info("deleted %s", target.describe())

    def _delete_cliques(self, uid: str) -> None:
        """Delete the domain's clique objects once its daemons are gone.

        Their owner references (the daemon pods) would let the garbage collector remove them
        too, but only after it has discovered the CRD, which can take tens of seconds; the
        domain is not fully gone until they are.
        """
        for clique in self.cliques(uid):
            meta = meta_of(clique)
            try:
                result = self.raw.delete(CLIQUES, meta["name"], meta.get("namespace"))
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("deleting %s: %s", object_key(clique), exc)
                continue
            self._record_result("delete", CLIQUES, result, object_key(clique))
            log.info("deleted ComputeDomainClique %s", object_key(clique))

    def _unlabel(self, node: str, uid: str) -> None:
        path = "/metadata/labels/" + constants.LABEL_COMPUTE_DOMAIN.replace("~", "~0").replace("/", "~1")
        patch = [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}]
        try:
            result = self.raw.patch(NODES, node, patch, patch_type="json")
        except ApiError as exc:
            if exc.not_found or exc.invalid:  # node gone, or label already changed/removed
                return
            raise
        self._record("patch", NODES.plural, result)
        self.metrics.node_labels_removed.inc()
        log.info("removed label %s=%s from node %s", constants.LABEL_COMPUTE_DOMAIN, uid, node)

    # --- orphans ------------------------------------------------------------------------
    def labelled_objects(self) -> list[dict]:
        out = list(self.caches.templates.objects())
        for informer in (self.caches.daemon_sets, self.caches.nodes):
            if informer is not None:
                out.extend(informer.objects())
        return out

    def sweep(self) -> bool:
        """Clean up after domains that no longer exist; True when nothing is left waiting."""
        candidates = orphan_domains(self.known_uids(), self.labelled_objects())
        if not candidates:
            return True
        live = {meta_of(o).get("uid") for o in self.raw.list(CDS)["items"]}
        done = True
        for uid in sorted(candidates - live):
            generated, objects = self._state(uid)
            nodes = [name_of(o)
                     for o in objects_of(uid, self.caches.nodes.objects())] \
                if self.caches.nodes is not None else []
            plan = deletion.plan_deletion(generated, nodes, domain_exists=False)
            try:
                self._execute(plan, uid, objects, None)
            except ApiError as exc:
                log.warning("cleanup of domain %s failed: %s", uid, exc)
                done = False
                continue
            if plan.steps:
                log.info("cleaned up after deleted domain %s (%d steps)", uid, len(plan.steps))
            done = done and plan.finished
        return done
