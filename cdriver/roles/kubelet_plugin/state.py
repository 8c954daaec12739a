"""What every Prepare/Unprepare needs: settings, node facts, API access, caches, checkpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.checkpoint import CheckpointError, CheckpointStore, ClaimRecord
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer
from cdriver.kube.raw import RawClient
from cdriver.roles.kubelet_plugin.claims import HeldDevice
from cdriver.roles.kubelet_plugin.config import PluginConfig
from cdriver.roles.kubelet_plugin.discovery import NodeDiscovery
from cdriver.roles.kubelet_plugin.domains import DomainWatches
from cdriver.roles.kubelet_plugin.metrics import PluginMetrics
from cdriver.roles.kubelet_plugin.node_labels import NodeLabeler, domains_missing_label
from cdriver.roles.kubelet_plugin.readiness import ChangeNotifier
from cdriver.roles.kubelet_plugin.status_writer import ClaimStatusWriter

log = logging.getLogger(__name__)

class BackgroundEvents:
    """Records Events off the request path: a Prepare never waits for an Event write."""

    def __init__(self, recorder: EventRecorder | None) -> None:
        self.recorder = recorder
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")

    def emit(self, obj: dict, type_: str, reason: str, message: str) -> None:
        if self.recorder is None or not obj:
            return
        self._pool.submit(self.recorder.event, obj, type_, reason, message)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


@dataclass
class PluginState:
    """Shared, thread-safe dependencies of the request handlers."""

    config: PluginConfig
    discovery: NodeDiscovery
    raw: RawClient
    store: CheckpointStore
    domains: DomainWatches
    cliques: Informer | None
    node: Informer
    metrics: PluginMetrics
    events: BackgroundEvents
    notifier: ChangeNotifier = field(default_factory=ChangeNotifier)
    labeler: NodeLabeler = field(init=False)
    #: Asks for a cleanup sweep now (set once the sweeper runs).
    wake_sweeper: Callable[[], None] = field(default=lambda: None)
    #: Writes claims' status.devices in the background (None: not written)
    claim_status: ClaimStatusWriter | None = None
    #: Called after the checkpoint's claims changed (the device health monitor recomputes)
    claims_changed: Callable[[], None] = field(default=lambda: None)

    def __post_init__(self) -> None:
        self.labeler = NodeLabeler(self.raw, self.config.node_name, self.node_object,
                                   on_change=self.metrics.node_label_changed)

    # -- cache lookups ---------------------------------------------------------------
    def compute_domain(self, uid: str) -> dict | None:
        """The ComputeDomain with `uid` (its own watch's copy; None if it does not exist)."""
        return self.domains.get(uid)

    def domain_of_claim(self, uid: str, namespace: str) -> dict | None:
        """The ComputeDomain a channel claim of `namespace` names (a channel claim lives beside
        its domain: where a domain without cdriver's label is looked for)."""
        self.domains.hint(uid, namespace)
        return self.domains.get(uid)

    def clique(self, domain_id: str) -> dict | None:
        if self.cliques is None or not self.discovery.clique_id:
            return None
        name = constants.clique_object_name(domain_id, self.discovery.clique_id)
        return self.cliques.get_by_name(name, self.config.namespace)

    def node_object(self) -> dict | None:
        return self.node.get_by_name(self.config.node_name)

    def domain_labels_missing(self) -> int:
        """ComputeDomains with a prepared channel claim here whose node label is missing
        (driver-managed mode: in host-managed mode the plugin labels no node)."""
        if self.config.host_managed:
            return 0
        try:
            records = self.store.read().claims.values()
        except CheckpointError as exc:  # Prepare and Unprepare report it; a scrape still answers
            log.debug("domain labels missing: %s", exc)
            return 0
        return len(domains_missing_label(records, self.labeler.current()))

    def refresh_prepared_gauge(self, claims: dict[str, ClaimRecord]) -> None:
        """Follow a change of the checkpoint's claims (prepared-devices gauge, device health)."""
        self.metrics.set_prepared_devices(
            str(d.get("type", "unknown")) for rec in claims.values() for d in rec.completed_devices()
        )
        self.claims_changed()


def held_devices(claims: dict[str, ClaimRecord]) -> list[HeldDevice]:
    """Devices of completely prepared claims, from checkpoint records."""
    out = []
    for uid, rec in claims.items():
        for d in rec.completed_devices():
            out.append(
                HeldDevice(
                    claim_uid=uid,
                    device=str(d.get("device_name", "")),
                    type=str(d.get("type", "")),
                    id=int(d.get("id", 0)),
                    admin_access=bool(d.get("admin_access", False)),
                    domain_id=rec.domain_id,
                )
            )
    return out
