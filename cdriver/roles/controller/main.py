"""Wiring of the controller: informers, work queue, periodic cleanup, leader election."""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer, uid_index
from cdriver.kube.leader import LeaderElector
from cdriver.kube.objects import object_key
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import Resource
from cdriver.kube.workqueue import RequeueAfter, WorkQueue
from cdriver.roles.controller import reconciler
from cdriver.roles.controller.cleanup import stale_labelled_nodes
from cdriver.roles.controller.desired import domain_uid_of
from cdriver.roles.controller.metrics import CacheViews, ControllerMetrics
from cdriver.roles.controller.overlay import Overlay
from cdriver.roles.controller.settings import DEFAULT_LEASE_NAME, ControllerSettings
from cdriver.roles.controller.status import entries_by_status
from cdriver.roles.controller.trim import TrimmingClient, without_managed_fields

CONTROLLER_COMPONENT = "cdriver-controller"

log = logging.getLogger(__name__)

#: Work-queue key of the orphan sweep (domain keys always contain a "/").
SWEEP_KEY = "!sweep"


@dataclass
class ControllerConfig:
    """Everything the control loops need besides the API client."""

    settings: ControllerSettings = field(default_factory=ControllerSettings)
    workers: int = 4
    resync_seconds: float = 600.0
    #: Full orphan sweep period (also run at start and after deletions).
    cleanup_interval_seconds: float = 600.0
    #: Delay that coalesces sweep requests from watch events.
    sweep_delay_seconds: float = 1.0
    timing: reconciler.Timing = field(default_factory=reconciler.Timing)
    sync_timeout_seconds: float = 120.0


class Controller:
    """The ComputeDomain controller: start() returns once caches are synced and work runs."""

    def __init__(self, raw: RawClient, config: ControllerConfig,
                 metrics: ControllerMetrics | None = None,
                 recorder: EventRecorder | None = None) -> None:
        self.raw = raw
        self.config = config
        self.settings = config.settings
        self.metrics = metrics or ControllerMetrics()
        self.recorder = recorder or EventRecorder(raw, CONTROLLER_COMPONENT)
        self.overlay = Overlay()
        self.caches = self._informers()
        self.reconciler = reconciler.Reconciler(raw, self.caches, self.settings, self.recorder,
                                                self.metrics, self.overlay, config.timing)
        self.queue = WorkQueue(self._handle, workers=config.workers, name="controller")
        self.metrics.bind(CacheViews(domain_counts=self.domain_counts, domains=self.caches.domains.objects,
                                     daemon_counts=self.daemon_counts, stale_node_labels=self.stale_node_labels),
                          lambda: len(self.queue))
        self._sweep_lock = threading.Lock()
        self._sweep_pending = False
        self._stop = threading.Event()
        self._started = threading.Event()
        self._periodic: threading.Thread | None = None

    # --- construction -------------------------------------------------------------------
    def _informer(self, res: Resource, namespace: str | None = None, selector: str | None = None) -> Informer:
        client = TrimmingClient(self.raw, reconciler.TRIMS.get(res.plural, without_managed_fields))
        return Informer(client, res, namespace=namespace, label_selector=selector,
                        resync_seconds=self.config.resync_seconds)

    def _informers(self) -> reconciler.Caches:
        ns = self.settings.namespace
        label = constants.LABEL_COMPUTE_DOMAIN
        domains = self._informer(reconciler.CDS)
        domains.add_index(reconciler.INDEX_UID, uid_index)
        templates = self._informer(reconciler.TEMPLATES, selector=label)
        templates.add_index(reconciler.INDEX_DOMAIN_TARGET, reconciler.domain_target_index)
        caches = reconciler.Caches(domains=domains, templates=templates)
        if not self.settings.host_managed:
            caches.daemon_sets = self._informer(reconciler.DAEMON_SETS, ns, label)
            caches.pods = self._informer(reconciler.PODS, ns, label)
            caches.nodes = self._informer(reconciler.NODES, selector=label)
            if self.settings.cliques_enabled:
                caches.cliques = self._informer(reconciler.CLIQUES, ns)
            for informer in (caches.daemon_sets, caches.pods, caches.nodes, caches.cliques):
                if informer is not None:
                    informer.add_index(reconciler.INDEX_DOMAIN, reconciler.domain_index)
        domains.add_handler(on_add=self._domain_changed,
                            on_update=lambda old, new: self._domain_changed(new),
                            on_delete=self._domain_deleted)
        for informer in caches.all()[1:]:
            plural = informer.res.plural
            informer.add_handler(
                on_add=lambda obj, p=plural: self._object_changed(p, obj),
                on_update=lambda old, new, p=plural: self._object_changed(p, new),
                on_delete=lambda obj, p=plural: self._object_deleted(p, obj))
        return caches

    # --- event handlers -------------------------------------------------------------------
    def _domain_changed(self, obj: dict) -> None:
        self.overlay.observe(reconciler.CDS.plural, obj)
        self.queue.add(object_key(obj))

    def _domain_deleted(self, obj: dict) -> None:
        self.overlay.observe_deleted(reconciler.CDS.plural, obj)
        self.request_sweep()

    def _object_changed(self, plural: str, obj: dict) -> None:
        self.overlay.observe(plural, obj)
        self._enqueue_owner(obj)

    def _object_deleted(self, plural: str, obj: dict) -> None:
        self.overlay.observe_deleted(plural, obj)
        self._enqueue_owner(obj)

    def _enqueue_owner(self, obj: dict) -> None:
        uid = domain_uid_of(obj) or next(iter(reconciler.domain_index(obj)), "")
        if not uid:
            return
        keys = self.reconciler.domain_keys(uid)
        for key in keys:
            self.queue.add(key)
        if not keys:
            self.request_sweep()

    # --- work ---------------------------------------------------------------------------
    def _handle(self, key: str) -> None:
        if key == SWEEP_KEY:
            with self._sweep_lock:
                self._sweep_pending = False
            if not self.reconciler.sweep():
                self.request_sweep(self.config.timing.wait_retry_seconds)
            return
        with self.metrics.reconcile_seconds.time():
            try:
                self.reconciler.reconcile(key)
            except Exception as exc:
                result = "requeue" if isinstance(exc, RequeueAfter) else "error"
                self.metrics.reconciles.labels(result).inc()
                raise
        self.metrics.reconciles.labels("success").inc()

    def request_sweep(self, delay: float | None = None) -> None:
        """Run an orphan sweep soon (requests coalesce)."""
        with self._sweep_lock:
            if self._sweep_pending:
                return
            self._sweep_pending = True
        self.queue.add_after(SWEEP_KEY, self.config.sweep_delay_seconds
                             if delay is None else delay)

    def _run_periodic(self) -> None:
        while not self._stop.wait(self.config.cleanup_interval_seconds):
            self.request_sweep(0)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Start informers, wait for their caches, then start the workers and the sweeper."""
        for informer in self.caches.all():
            informer.start()
        for informer in self.caches.all():
            if not informer.wait_synced(self.config.sync_timeout_seconds):
                raise TimeoutError(f"cache of {informer.res.plural} did not sync within "
                                   f"{self.config.sync_timeout_seconds:.0f}s; check API "
                                   "server access and RBAC (list/watch)")
        self.queue.start()
        self.request_sweep(0)
        self._periodic = threading.Thread(target=self._run_periodic, name="cleanup",
                                          daemon=True)
        self._periodic.start()
        self._started.set()
        log.info("controller started (namespace %s, mode %s, %d domains cached)",
                 self.settings.namespace,
                 IMEX_MODE_HOST_MANAGED if self.settings.host_managed
                 else IMEX_MODE_DRIVER_MANAGED, len(self.caches.domains.objects()))

    def stop(self) -> None:
        self._stop.set()
        self.queue.stop()
        for informer in self.caches.all():
            informer.stop()
        self._started.clear()
        log.info("controller stopped")

    @property
    def running(self) -> bool:
        return self._started.is_set()

    def domain_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for obj in self.caches.domains.objects():
            status = (obj.get("status") or {}).get("status") or ""
            counts[status] = counts.get(status, 0) + 1
        return counts

    def daemon_counts(self) -> dict[str, int]:
        """Daemon entries by status: of every clique, or (cliques off) of the domains' status.nodes."""
        if self.settings.host_managed:
            return entries_by_status([])
        if self.caches.cliques is not None:
            return entries_by_status(e for clique in self.caches.cliques.objects() for e in clique.get("daemons") or [])
        return entries_by_status(n for cd in self.caches.domains.objects()
                                 for n in (cd.get("status") or {}).get("nodes") or [])

    def stale_node_labels(self) -> int:
        """Nodes labelled for a domain that is gone, or deleted and otherwise cleaned up."""
        if self.caches.nodes is None:  # host-managed: no node carries the label
            return 0
        generated = list(self.caches.templates.objects())
        if self.caches.daemon_sets is not None:
            generated.extend(self.caches.daemon_sets.objects())
        return len(stale_labelled_nodes(self.caches.nodes.objects(), self.caches.domains.objects(), generated))


@dataclass
class LeaderConfig:
    """Lease-based leader election settings (upstream flag names and defaults)."""

    namespace: str
    name: str = DEFAULT_LEASE_NAME
    lease_seconds: float = 15.0
    renew_seconds: float = 10.0
    retry_seconds: float = 2.0


class Runner:
    """Runs a `Controller`, optionally only while leading; `wait()` returns the exit code."""

    def __init__(self, raw: RawClient, config: ControllerConfig, identity: str,
                 leader: LeaderConfig | None = None,
                 metrics: ControllerMetrics | None = None) -> None:
        self.raw = raw
        self.config = config
        self.metrics = metrics or ControllerMetrics()
        self.leader_config = leader
        self.identity = f"{identity}-{uuid.uuid4()}" if leader else identity
        self.controller: Controller | None = None
        self.elector: LeaderElector | None = None
        self._done = threading.Event()
        self._exit_code = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.leader_config is None:
            self.metrics.leader.set(1)
            self._lead()
            return
        lc = self.leader_config
        self.metrics.leader.set(0)
        self.elector = LeaderElector(
            self.raw, lc.namespace, lc.name, self.identity, lease_seconds=int(lc.lease_seconds),
            renew_seconds=lc.renew_seconds, retry_seconds=lc.retry_seconds)
        log.info("campaigning for lease %s/%s as %s", lc.namespace, lc.name, self.identity)
        self.elector.run(self._on_started_leading, self._on_stopped_leading)

    def _lead(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self.controller = Controller(self.raw, self.config, self.metrics)
        try:
            self.controller.start()
        except Exception as exc:
            log.error("controller failed to start: %s", exc)
            self.finish(1)

    def _on_started_leading(self) -> None:
        self.metrics.leader.set(1)
        self._lead()

    def _on_stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        if not self._done.is_set():
            log.warning("lost leadership; exiting so a fresh process can campaign again")
            self.finish(0)

    def healthy(self) -> tuple[bool, str]:
        if self.leader_config is not None and (self.elector is None or
                                               not self.elector.is_leader):
            return True, "ok (standby)"
        controller = self.controller
        if controller is None or not controller.running:
            return False, "starting"
        return True, "ok"

    def finish(self, code: int = 0) -> None:
        """Stop everything (releasing the Lease) and let `wait` return ``code``."""
        with self._lock:
            if self._done.is_set():
                return
            self._exit_code = code
            self._done.set()
        if self.controller is not None:
            self.controller.stop()
        if self.elector is not None:
            self.elector.stop()

    def wait(self, timeout: float | None = None) -> int | None:
        if not self._done.wait(timeout):
            return None
        return self._exit_code
