"""NodePrepareResources for one claim: decide (pure, in `claims`), then effects in order.

Order, each step idempotent so a killed plugin converges on the retried call:
1. read the claim; a completely prepared claim returns its recorded devices;
2. plan: decode the opaque config strictly and check the claim against its ComputeDomain;
3. if the claim needs effects outside this node's files (the node label) or a wait: under the
   checkpoint lock check channel ownership and record PrepareStarted (intent first), then
   label the node and wait for local readiness without the lock (so other claims progress);
4. under the lock: check ownership, write the claim CDI spec, record PrepareCompleted.

A claim that needs neither (ready node already labelled for its domain, host-managed mode,
daemon claims) goes straight to step 4: the CDI spec and the record are written together
under the lock, and a spec left by a crash between the two has no record and is removed
before the plugin serves again (`remove_orphan_specs`), so nothing leaks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_HOST_MANAGED
from cdriver.atomic import atomic_write
from cdriver.cdi.model import ContainerEdits
from cdriver.cdi.writer import claim_spec_name, list_specs, remove_spec, write_spec
from cdriver.checkpoint import ClaimDevice, ClaimRecord, ClaimState, intended_device, recorded_device
from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.errors import CdriverError
from cdriver.imex.config import IMEXD_TEMPLATE_NAME, domain_template, load_template
from cdriver.imex.names import dns_name
from cdriver.kube.errors import ApiError
from cdriver.kube.events import NORMAL, WARNING
from cdriver.kube.objects import meta_of, name_of
from cdriver.kube.resources import RESOURCES
from cdriver.nvml.discover import IMEX_CHANNEL_COUNT
from cdriver.roles.kubelet_plugin import cdi_edits, claims, device_status
from cdriver.roles.kubelet_plugin.binding import BindingHooks
from cdriver.roles.kubelet_plugin.claims import KIND_DAEMON, ClaimPlan
from cdriver.roles.kubelet_plugin.discovery import DiscoveryError, fabric_mgmt_device
from cdriver.roles.kubelet_plugin.errors import (
    KIND_UNKNOWN,
    REASON_API_ERROR,
    REASON_CANCELLED,
    REASON_DOMAIN_NOT_FOUND,
    REASON_HOST_IMEX_NOT_READY,
    REASON_INTERNAL,
    REASON_INVALID_CONFIG,
    REASON_OTHER,
    REASON_WAITING_FOR_DAEMON,
    ClaimError,
    ClaimSeen,
    as_claim_error,
    permanent,
    retryable,
)
from cdriver.roles.kubelet_plugin.host_imex import check_host_imex
from cdriver.roles.kubelet_plugin.readiness import node_readiness
from cdriver.roles.kubelet_plugin.state import PluginState, held_devices

EVENT_REASON_CHANNEL_NOT_INJECTED = "IMEXChannelNotInjected"  # non-fabric node
EVENT_REASON_WAITING_FOR_DAEMON = "WaitingForIMEXDaemon"
EVENT_REASON_HOST_IMEX_NOT_READY = "HostIMEXDaemonNotReady"

log = logging.getLogger(__name__)

CLAIMS = RESOURCES["resourceclaims"]
PODS = RESOURCES["pods"]
#: outcomes of waiting for the node to be ready in a domain
READY = "ready"
DOMAIN_DELETED = "domain deleted"
#: How long a channel claim waits for its ComputeDomain to show up in the cache.
CD_APPEAR_TIMEOUT = 2.0
EVENT_NOT_FABRIC = EVENT_REASON_CHANNEL_NOT_INJECTED
EVENT_WAITING = EVENT_REASON_WAITING_FOR_DAEMON
EVENT_HOST_NOT_READY = EVENT_REASON_HOST_IMEX_NOT_READY


class _LabelGone(Exception):
    """The fast path lost its precondition (node label) before it could complete."""


@dataclass
class _Learned:
    """What one Prepare learned about its claim (for the claim's status.devices)."""

    claim: dict | None = None
    plan: ClaimPlan | None = None
    cd: dict | None = None
    channels: list[int] | None = None


@dataclass
class Prepared:
    """Result of preparing one claim."""

    devices: list[PreparedDevice]
    cached: bool = False  # answered from the checkpoint (already prepared)
    kind: str = KIND_UNKNOWN  # channel or daemon (unknown: a claim without devices of this driver)


def record_devices(records: list[PreparedDevice], plan: ClaimPlan) -> list[ClaimDevice]:
    """Checkpoint form of the devices: what kubelet gets back plus type/id for ownership checks."""
    return [
        recorded_device(request_names=pd.request_names, pool_name=pd.pool_name, device_name=pd.device_name,
                        cdi_device_ids=pd.cdi_device_ids, share_id=pd.share_id, type=dev.ref.type, id=dev.ref.id,
                        admin_access=dev.admin_access)
        for pd, dev in zip(records, plan.devices, strict=True)
    ]


def recorded_prepared_devices(rec: ClaimRecord) -> list[PreparedDevice]:
    """What kubelet got for a completely prepared claim, from its checkpoint record."""
    return [
        PreparedDevice(
            request_names=list(d.get("request_names", [])),
            pool_name=d.get("pool_name", ""),
            device_name=d.get("device_name", ""),
            cdi_device_ids=list(d.get("cdi_device_ids", [])),
            share_id=d.get("share_id") or None,
        )
        for d in rec.completed_devices()
    ]


def prepared_devices(plan: ClaimPlan, with_spec: bool, node_name: str) -> list[PreparedDevice]:
    """What kubelet gets for a prepared claim: daemon devices also name the node's base spec;
    each device names its entry in the claim's own spec when it has one."""
    devices = []
    for d in plan.devices:
        ids = []
        if d.ref.type == KIND_DAEMON:
            ids.append(cdi_edits.base_device_id())
        if with_spec:
            ids.append(cdi_edits.claim_device_id(plan.uid, d.device))
        devices.append(
            PreparedDevice(
                request_names=[d.request],
                pool_name=d.pool or node_name,
                device_name=d.device,
                cdi_device_ids=ids,
                share_id=d.share_id or None,
            )
        )
    return devices


class Preparer:
    """Prepares claims on this node. Thread-safe: state changes go through the checkpoint lock."""

    def __init__(self, state: PluginState) -> None:
        self.state = state
        self.config = state.config
        self.labeler = state.labeler
        self._template: str | None = None

    # -- entry point ---------------------------------------------------------------------
    def prepare(self, ref: ClaimRef, deadline: float | None = None) -> Prepared:
        """Prepare ``ref``; raises ClaimError (permanent or retryable) with a user-facing message."""
        if deadline is None:
            deadline = time.monotonic() + self.config.prepare_timeout
        seen = ClaimSeen()
        learned = _Learned()
        try:
            prepared = self._prepare(ref, deadline, seen, learned)
        except CdriverError as exc:
            error = as_claim_error(ref, exc, seen)
            self._report_status(learned, None, error)
            raise error from None
        if not prepared.cached:
            self._report_status(learned, prepared, None)
        return prepared

    def _prepare(self, ref: ClaimRef, deadline: float, seen: ClaimSeen, learned: _Learned) -> Prepared:
        store = self.state.store
        done = self._completed(store.read().claims.get(ref.uid))
        if done is not None:
            return done
        claim = self._fetch_claim(ref)
        learned.claim = claim
        plan = claims.plan_claim(claim, self.config.node_name)
        if not plan.devices:
            return Prepared(devices=[])
        seen.kind = plan.kind
        learned.plan = plan
        cd = self._check_domain(plan)
        learned.cd = cd
        if plan.kind == KIND_DAEMON:
            self._check_daemon_owner(plan, claim)
            return self._complete(plan, self._daemon_effects(plan, cd))
        if claims.domain_deleting(cd):
            # Only claims completed before the deletion began keep their channel (answered
            # from the checkpoint above); no new pod joins a domain being deleted.
            done = self._record_refused(plan)
            if done is not None:
                return done
            raise claims.domain_deleting_error(plan, cd)
        if self.config.host_managed:
            if self.state.discovery.clique_id:
                with self.state.metrics.readiness_wait(plan.kind):
                    self._wait_host_ready(plan, claim, deadline)
            return self._complete(plan, self._channel_edits(plan, claim))
        if self.labeler.current() == plan.domain_id and self._node_ready(plan)[0]:
            try:
                return self._complete(plan, self._channel_edits(plan, claim), label_required=True)
            except _LabelGone:
                log.info("claim %s: node label changed while preparing; taking the waiting path", plan.label)
        with store.locked() as cp:
            done = self._completed(cp.claims.get(ref.uid))
            if done is not None:
                return done
            claims.check_devices_free(plan, held_devices(cp.claims), self.config.host_managed)
            cp.claims[ref.uid] = self._record(plan, ClaimState.PREPARE_STARTED)
        self.labeler.ensure_domain(plan.domain_id, self._label_is_stale)
        with self.state.metrics.readiness_wait(plan.kind):
            self._wait_ready(plan, claim, cd, deadline)
        return self._complete(plan, self._channel_edits(plan, claim), started=True)

    # -- steps ---------------------------------------------------------------------------
    @staticmethod
    def _completed(rec: ClaimRecord | None) -> Prepared | None:
        if rec is None or rec.state != ClaimState.PREPARE_COMPLETED:
            return None
        return Prepared(devices=recorded_prepared_devices(rec), cached=True, kind=rec.kind or KIND_UNKNOWN)

    def _record_refused(self, plan: ClaimPlan) -> Prepared | None:
        """Record a refused channel claim as PrepareStarted (as any failed Prepare, so its
        Unprepare finds it); a claim that completed meanwhile is answered as prepared."""
        with self.state.store.locked() as cp:
            done = self._completed(cp.claims.get(plan.uid))
            if done is not None:
                return done
            if plan.uid not in cp.claims:
                cp.claims[plan.uid] = self._record(plan, ClaimState.PREPARE_STARTED)
        return None

    def _fetch_claim(self, ref: ClaimRef) -> dict:
        try:
            claim = self.state.raw.get(CLAIMS, ref.name, ref.namespace)
        except ApiError as exc:
            if exc.not_found:
                raise permanent(
                    f"claim {ref}: ResourceClaim {ref.namespace}/{ref.name} does not exist "
                    "(deleted before it was prepared)",
                    reason=REASON_OTHER,
                ) from None
            raise retryable(f"claim {ref}: cannot read ResourceClaim: {exc}", reason=REASON_API_ERROR) from None
        claims.check_claim_identity(claim, ref.uid)
        return claim

    def _check_daemon_owner(self, plan: ClaimPlan, claim: dict) -> None:
        """Refuse a daemon claim that is not its domain's own daemon pod's (see claims)."""
        pods: dict[str, dict | None] = {}
        if plan.namespace == self.config.namespace:
            for name, uid in claims.daemon_pods_reserving(claim):
                if not uid:
                    continue
                try:
                    pods[name] = self.state.raw.get_or_none(PODS, name, plan.namespace)
                except ApiError as exc:
                    raise retryable(f"claim {plan.label}: cannot read pod {plan.namespace}/{name}: {exc}",
                                    reason=REASON_API_ERROR) from None
        claims.check_daemon_claim_owner(plan, self.config.namespace, pods, claim)

    def _check_domain(self, plan: ClaimPlan) -> dict | None:
        """The claim's ComputeDomain from the cache (waiting briefly for a new one)."""
        if plan.kind == KIND_DAEMON:
            if self.config.host_managed:
                raise permanent(
                    f"claim {plan.label}: ComputeDomain daemon claims are not supported with "
                    f"--imex-mode={IMEX_MODE_HOST_MANAGED}: the host runs nvidia-imex itself; delete the "
                    "claim (it can only come from a stale or hand-written object)",
                    reason=REASON_INVALID_CONFIG,
                )
            return self.state.compute_domain(plan.domain_id)
        deadline = time.monotonic() + CD_APPEAR_TIMEOUT
        cd = self.state.notifier.wait_for(lambda: self.state.domain_of_claim(plan.domain_id, plan.namespace),
                                          deadline)
        claims.check_domain_namespace(plan, cd)
        return cd

    def _record(self, plan: ClaimPlan, state: ClaimState) -> ClaimRecord:
        return ClaimRecord(
            uid=plan.uid,
            name=plan.name,
            namespace=plan.namespace,
            state=state,
            domain_id=plan.domain_id,
            kind=plan.kind,
            devices=[
                intended_device(request=d.request, pool=d.pool, device=d.device, type=d.ref.type, id=d.ref.id,
                                admin_access=d.admin_access)
                for d in plan.devices
            ],
        )

    def _channel_edits(self, plan: ClaimPlan, claim: dict) -> ContainerEdits:
        clique_id = self.state.discovery.clique_id
        if not clique_id:
            msg = (
                f"node {self.config.node_name} is not attached to a multi-node NVLink fabric (no clique ID): "
                f"claim {plan.namespace}/{plan.name} prepared without IMEX channel devices; pin workloads to "
                f"fabric nodes with node affinity on {constants.LABEL_NODE_CLIQUE}"
            )
            log.warning("%s", msg)
            self.state.events.emit(claim, WARNING, EVENT_NOT_FABRIC, msg)
            return ContainerEdits()
        return cdi_edits.channel_edits(self._channels(plan), self.state.discovery.channel_major,
                                       self.config.dev_root)

    def _channels(self, plan: ClaimPlan) -> list[int]:
        """The channel IDs a channel claim's containers get on this node."""
        if self.config.host_managed or not plan.all_channels:
            return [plan.devices[0].ref.id if self.config.host_managed else 0]
        # As upstream: every channel the driver supports, whether or not its node exists
        # on the host yet (the runtime creates nodes from type/major/minor).
        return list(range(IMEX_CHANNEL_COUNT))

    # -- status.devices ------------------------------------------------------------------
    def _report_status(self, learned: _Learned, prepared: Prepared | None, error: ClaimError | None) -> None:
        """Queue the claim's status.devices entries (written in the background; never fails a Prepare)."""
        writer = self.state.claim_status
        plan = learned.plan
        if writer is None or plan is None or learned.claim is None:
            return
        try:
            report = self._status_report(learned, plan, prepared, error)
        except Exception:  # noqa: BLE001 - a status report never fails a Prepare
            log.exception("claim %s: building its status.devices report failed", plan.label)
            return
        if report is not None:
            writer.report(report)

    def _status_report(self, learned: _Learned, plan: ClaimPlan, prepared: Prepared | None,
                       error: ClaimError | None) -> device_status.ClaimStatusReport | None:
        clique_id = self.state.discovery.clique_id
        daemon = plan.kind == KIND_DAEMON
        if error is not None:
            reason = device_status.ERROR_REASONS.get(error.reason, device_status.REASON_PREPARE_FAILED)
            if reason is None:
                return None  # cancelled or a transient API error: the next call reports
            ready, message = False, str(error)
        elif daemon:
            ready, reason = True, device_status.REASON_DAEMON_CLAIM_PREPARED
            message = f"daemon claim prepared on node {self.config.node_name}: the IMEX daemon can start"
        elif not clique_id:
            ready, reason = False, device_status.REASON_NOT_FABRIC_ATTACHED
            message = (f"node {self.config.node_name} is not attached to a multi-node NVLink fabric: prepared "
                       "without IMEX channel devices")
        elif self.config.host_managed:
            ready, reason = True, device_status.REASON_HOST_IMEX_READY
            message = f"the host's nvidia-imex on node {self.config.node_name} is READY"
        else:
            ready, reason = True, device_status.REASON_DAEMON_READY
            message = f"this domain's IMEX daemon on node {self.config.node_name} is Ready"
        meta = meta_of(learned.cd) if learned.cd is not None else {}
        index = None if daemon or self.config.host_managed else self._daemon_index(plan.domain_id)
        channels = () if daemon or not clique_id else tuple(self._channels(plan))
        return device_status.ClaimStatusReport(
            namespace=plan.namespace, name=plan.name, uid=plan.uid,
            devices=tuple(device_status.DeviceRef(d.pool, d.device, d.share_id) for d in plan.devices),
            ready=ready, reason=reason, message=message,
            domain_uid=plan.domain_id, domain_name=str(meta.get("name", "")),
            domain_namespace=str(meta.get("namespace", "")), kind=plan.kind, clique_id=clique_id,
            daemon_index=index, daemon_dns_name=dns_name(plan.domain_id, index) if index is not None else "",
            channels=channels if (prepared is not None and ready) else (),
            cdi_device_ids=tuple(i for d in (prepared.devices if prepared else []) for i in d.cdi_device_ids),
        )

    # -- binding conditions ----------------------------------------------------------------
    def binding_hooks(self) -> BindingHooks:
        """This node's view for the binder (`cdriver.roles.kubelet_plugin.binding`)."""
        st = self.state

        def report(r: device_status.ClaimStatusReport) -> None:
            if st.claim_status is not None:
                st.claim_status.report(r)

        return BindingHooks(
            clique_id=lambda: st.discovery.clique_id,
            compute_domain=st.domain_of_claim,
            ensure_label=lambda domain: self.labeler.ensure_domain(domain, self._label_is_stale),
            release_label=self._release_label,
            node_ready=self._node_ready,
            daemon_index=self._daemon_index,
            report=report,
        )

    def _release_label(self, domain_id: str) -> None:
        """Remove the node's label for a domain whose claims here all went away before any was
        prepared (a claim that is being prepared records itself first, so it is seen)."""
        try:
            if any(rec.domain_id == domain_id for rec in self.state.store.read().claims.values()):
                return
            if self.labeler.remove_domain(domain_id):
                log.info("node %s: no claim of ComputeDomain %s is left here; label removed", self.config.node_name,
                         domain_id)
        except (ClaimError, CdriverError) as exc:
            log.warning("node %s: could not release the label of ComputeDomain %s: %s", self.config.node_name,
                        domain_id, exc)

    def _daemon_index(self, domain_id: str) -> int | None:
        """This node's daemon index in the domain's clique (None until the daemon has one)."""
        clique = self.state.clique(domain_id)
        for entry in (clique or {}).get("daemons") or []:
            if entry.get("nodeName") == self.config.node_name and isinstance(entry.get("index"), int):
                return int(entry["index"])
        return None

    def _label_is_stale(self, other_domain: str) -> bool:
        if self.state.compute_domain(other_domain) is not None:
            return False
        return not any(rec.domain_id == other_domain for rec in self.state.store.read().claims.values())

    def _node_ready(self, plan: ClaimPlan) -> tuple[bool, str]:
        st = self.state
        return node_readiness(
            self.config.node_name,
            plan.domain_id,
            st.discovery.clique_id,
            st.clique(plan.domain_id),
            st.compute_domain(plan.domain_id),
            self.config.use_cliques,
            self.config.namespace,
        )

    def _wait_ready(self, plan: ClaimPlan, claim: dict, cd: dict | None, deadline: float) -> None:
        st = self.state
        why = [""]

        def check() -> str | None:
            current = st.compute_domain(plan.domain_id)
            if cd is not None and (current is None or current["metadata"].get("deletionTimestamp")):
                return DOMAIN_DELETED  # nothing will become ready: answer now, not at the deadline
            ready, why[0] = self._node_ready(plan)
            return READY if ready else None

        started = time.monotonic()
        outcome = st.notifier.wait_for(check, deadline)
        if outcome == DOMAIN_DELETED:
            raise claims.domain_deleting_error(plan, cd)
        if outcome is None:
            cd_name = name_of(cd)
            msg = (
                f"claim {plan.label}: ComputeDomain {plan.namespace}/{cd_name} (UID {plan.domain_id}) is not "
                f"ready on node {self.config.node_name} after {time.monotonic() - started:.1f}s: {why[0]}; "
                "waiting for this domain's IMEX daemon on the node to become Ready (kubelet retries)"
            )
            st.events.emit(claim, NORMAL, EVENT_WAITING, msg)
            raise retryable(msg, reason=REASON_WAITING_FOR_DAEMON)

    def _wait_host_ready(self, plan: ClaimPlan, claim: dict, deadline: float) -> None:
        interval = max(0.05, self.config.host_probe_interval)
        while True:
            remaining = deadline - time.monotonic()
            problem = check_host_imex(
                self.config.read_root, self.config.imex_host_socket_path, timeout=max(0.5, min(5.0, remaining))
            )
            if not problem:
                return
            if time.monotonic() + interval >= deadline:
                msg = f"claim {plan.label}: {problem}"
                self.state.events.emit(claim, WARNING, EVENT_HOST_NOT_READY, msg)
                raise retryable(msg, reason=REASON_HOST_IMEX_NOT_READY)
            time.sleep(interval)

    def _daemon_effects(self, plan: ClaimPlan, cd: dict | None) -> ContainerEdits:
        if cd is None:
            raise retryable(
                f"claim {plan.label}: ComputeDomain with UID {plan.domain_id} not found; the "
                "daemon claim is prepared once it exists",
                reason=REASON_DOMAIN_NOT_FOUND,
            )
        domain_dir = self.config.domain_dir(plan.domain_id)
        self._write_domain_dir(domain_dir)
        fabric = None
        if self.state.discovery.clique_id:
            try:
                fabric = fabric_mgmt_device(self.config.read_root)
            except DiscoveryError as exc:
                raise retryable(f"claim {plan.label}: {exc}", reason=REASON_INTERNAL) from None
        meta = meta_of(cd)
        return cdi_edits.daemon_edits(
            clique_id=self.state.discovery.clique_id,
            cd_uid=str(meta.get("uid", "")),
            cd_name=str(meta.get("name", "")),
            cd_namespace=str(meta.get("namespace", "")),
            domain_dir=domain_dir,
            fabric_mgmt=fabric,
            dev_root=self.config.dev_root,
            imex_binaries=cdi_edits.imex_binary_mounts(self.config.read_root, self.config.driver_root),
        )

    def _write_domain_dir(self, domain_dir: Path) -> None:
        if self._template is None:
            self._template = domain_template(load_template(self.config.imex_config_template),
                                             settings=self.config.imex_settings)
        try:
            domain_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            target = domain_dir / IMEXD_TEMPLATE_NAME
            if not target.exists() or target.read_text() != self._template:
                atomic_write(target, self._template, mode=0o644)
        except OSError as exc:
            raise retryable(f"cannot write the IMEX config template to {domain_dir}: {exc.strerror or exc}",
                            reason=REASON_INTERNAL) from None

    def _complete(
        self, plan: ClaimPlan, edits: ContainerEdits, started: bool = False, label_required: bool = False
    ) -> Prepared:
        """Under the lock: check ownership, write the CDI spec, record PrepareCompleted.

        ``started``: a PrepareStarted record must still be there (else an Unprepare or a sweep
        ran meanwhile). ``label_required``: the node must still carry this domain's label (an
        Unprepare may have just removed it); raises _LabelGone otherwise.
        """
        spec_devices = [(d.device, edits) for d in plan.devices]
        spec = cdi_edits.claim_spec(plan.uid, spec_devices)
        devices = prepared_devices(plan, spec is not None, self.config.node_name)
        with self.state.store.locked() as cp:
            done = self._completed(cp.claims.get(plan.uid))
            if done is not None:
                return done
            current = cp.claims.get(plan.uid)
            if started and (current is None or current.state == ClaimState.PREPARE_ABORTED):
                raise retryable(f"claim {plan.label} was unprepared while it was being prepared; kubelet retries",
                                reason=REASON_CANCELLED)
            if label_required and self.labeler.current() != plan.domain_id:
                raise _LabelGone()
            if plan.kind != KIND_DAEMON:
                cd = self.state.compute_domain(plan.domain_id)
                if claims.domain_deleting(cd):  # the deletion began while this claim was prepared
                    raise claims.domain_deleting_error(plan, cd)
            claims.check_devices_free(plan, held_devices(cp.claims), self.config.host_managed)
            name = claim_spec_name(plan.uid)
            if spec is not None:
                write_spec(self.config.cdi_root, name, spec)
            else:
                remove_spec(self.config.cdi_root, name)
            rec = cp.claims.get(plan.uid) or self._record(plan, ClaimState.PREPARE_COMPLETED)
            cp.claims[plan.uid] = rec
            rec.state = ClaimState.PREPARE_COMPLETED
            rec.devices = record_devices(devices, plan)
            rec.cdi_ids = [i for d in devices for i in d.cdi_device_ids]
            rec.updated = time.time()
            self.state.refresh_prepared_gauge(cp.claims)
        log.info(
            "prepared claim %s (%s, ComputeDomain %s): %s",
            plan.label,
            plan.kind,
            plan.domain_id,
            ", ".join(i for d in devices for i in d.cdi_device_ids) or "no CDI devices",
        )
        return Prepared(devices=devices, kind=plan.kind)


def remove_orphan_specs(state: PluginState) -> list[str]:
    """Remove claim CDI specs that no checkpoint record owns (left by a crash mid-Prepare).

    Runs under the checkpoint lock, which every spec write also holds, so a Prepare in
    progress is never mistaken for an orphan. Returns the removed claim UIDs.
    """
    prefix = claim_spec_name("x")[:-1]
    removed = []
    with state.store.locked() as cp:
        for name in list_specs(state.config.cdi_root):
            if name.startswith(prefix) and name[len(prefix) :] not in cp.claims:
                remove_spec(state.config.cdi_root, name)
                removed.append(name[len(prefix) :])
    if removed:
        log.info("removed CDI specs of claims this node does not hold: %s", ", ".join(removed))
    return removed
