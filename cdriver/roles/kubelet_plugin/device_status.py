"""What a claim's `status.devices` says about its ComputeDomain devices on this node (pure).

For every device of a claim the plugin prepares (or is waiting to prepare), one
AllocatedDeviceStatus entry (keyed by driver, pool, device) with a `Ready` condition whose reason
says where the claim stands, and `data` naming the chain an operator correlates: the
ComputeDomain, the clique, this node's daemon index and DNS name, the channels injected and the
CDI device IDs. `kubectl get resourceclaim -o yaml` then answers "why is my pod waiting".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdriver.api import constants
from cdriver.roles.kubelet_plugin import errors

CONDITION_READY = "Ready"
#: True when this node cannot serve a claim waiting in the scheduler's PreBind (binding
#: conditions): the scheduler then frees the allocation and places the pod again
CONDITION_BINDING_FAILED = "BindingFailed"
#: reasons of the Ready condition
REASON_DAEMON_READY = "DaemonReady"
REASON_HOST_IMEX_READY = "HostIMEXReady"
REASON_WAITING_FOR_DAEMON = "WaitingForDaemon"
REASON_HOST_IMEX_NOT_READY = "HostIMEXNotReady"
REASON_DAEMON_CLAIM_PREPARED = "DaemonClaimPrepared"
REASON_NOT_FABRIC_ATTACHED = "NotFabricAttached"
REASON_PREPARE_FAILED = "PrepareFailed"
#: the Ready reason of a failed Prepare, by the plugin's error reason (None: not reported, the
#: claim is being unprepared or the API server could not be reached; the next call reports)
ERROR_REASONS: dict[str, str | None] = {
    errors.REASON_WAITING_FOR_DAEMON: REASON_WAITING_FOR_DAEMON,
    errors.REASON_HOST_IMEX_NOT_READY: REASON_HOST_IMEX_NOT_READY,
    errors.REASON_DOMAIN_DELETING: "DomainDeleting",
    errors.REASON_DOMAIN_NOT_FOUND: "DomainNotFound",
    errors.REASON_INVALID_CONFIG: "InvalidConfig",
    errors.REASON_CHANNEL_IN_USE: "ChannelInUse",
    errors.REASON_WRONG_NAMESPACE: "WrongNamespace",
    errors.REASON_CANCELLED: None,
    errors.REASON_API_ERROR: None,
}
#: the API's limit on a condition's message
MESSAGE_LIMIT = 32768
#: at most this many channel IDs are listed one by one (a claim of all channels holds 2048)
CHANNEL_LIST_LIMIT = 16


@dataclass(frozen=True)
class DeviceRef:
    """One allocated device of the claim (its allocation result's pool, device and, for a device
    allocated more than once, its share)."""

    pool: str
    device: str
    share_id: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.pool, self.device, self.share_id


def _entry_key(entry: dict) -> tuple[str, str, str]:
    """The key that ties a status.devices entry to its allocation result (driver aside)."""
    return str(entry.get("pool") or ""), str(entry.get("device") or ""), str(entry.get("shareID") or "")


@dataclass(frozen=True)
class ClaimStatusReport:
    """Where one claim stands on this node, as the plugin knows it."""

    namespace: str
    name: str
    uid: str
    devices: tuple[DeviceRef, ...]
    ready: bool
    reason: str
    message: str
    #: ComputeDomain UID, name and namespace ("" when not known)
    domain_uid: str = ""
    domain_name: str = ""
    domain_namespace: str = ""
    kind: str = ""
    clique_id: str = ""
    #: this node's daemon in the domain (driver-managed channel claims), when known
    daemon_index: int | None = None
    daemon_dns_name: str = ""
    channels: tuple[int, ...] = ()
    cdi_device_ids: tuple[str, ...] = field(default=())
    #: the node cannot serve the claim waiting in PreBind (a `BindingFailed` condition, True)
    binding_failed: bool = False


def channel_summary(channels: tuple[int, ...]) -> dict[str, Any]:
    """The injected channels: their IDs, or for many a count and range."""
    if len(channels) <= CHANNEL_LIST_LIMIT:
        return {"channels": list(channels)}
    return {"channelCount": len(channels), "channelRange": f"{min(channels)}-{max(channels)}"}


def report_data(report: ClaimStatusReport) -> dict[str, Any]:
    """The entry's `data`: the chain from claim to daemon (fields left out when unknown)."""
    data: dict[str, Any] = {}
    if report.domain_uid:
        domain = {"uid": report.domain_uid, "name": report.domain_name, "namespace": report.domain_namespace}
        data["computeDomain"] = {k: v for k, v in domain.items() if v}
    if report.kind:
        data["kind"] = report.kind
    if report.clique_id:
        data["cliqueID"] = report.clique_id
    if report.daemon_index is not None:
        data["daemon"] = {"index": report.daemon_index, "dnsName": report.daemon_dns_name}
    if report.channels:
        data.update(channel_summary(report.channels))
    if report.cdi_device_ids:
        data["cdiDeviceIDs"] = list(report.cdi_device_ids)
    return data


def ready_condition(report: ClaimStatusReport, transition_time: str) -> dict[str, Any]:
    return {
        "type": CONDITION_READY,
        "status": "True" if report.ready else "False",
        "reason": report.reason,
        "message": report.message[:MESSAGE_LIMIT],
        "lastTransitionTime": transition_time,
    }


def status_entries(report: ClaimStatusReport, transition_time: str,
                   previous: list[dict] | None = None) -> list[dict[str, Any]]:
    """The claim's `status.devices` entries of this driver for `report`.

    `previous` (the claim's current entries): a condition whose status does not change keeps
    its lastTransitionTime, as conditions do.
    """
    kept = {_entry_key(e): e for e in previous or [] if e.get("driver") == constants.DRIVER_NAME}
    data = report_data(report)
    out = []
    for ref in report.devices:
        condition = ready_condition(report, transition_time)
        old = next((c for c in (kept.get(ref.key) or {}).get("conditions") or []
                    if c.get("type") == CONDITION_READY), None)
        if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            condition["lastTransitionTime"] = old["lastTransitionTime"]
        conditions = [condition]
        if report.binding_failed:
            conditions.append({**condition, "type": CONDITION_BINDING_FAILED, "status": "True"})
        entry: dict[str, Any] = {"driver": constants.DRIVER_NAME, "pool": ref.pool, "device": ref.device,
                                 "conditions": conditions}
        if ref.share_id:
            entry["shareID"] = ref.share_id
        if data:
            entry["data"] = data
        out.append(entry)
    return out


def merged_devices(current: list[dict], ours: list[dict[str, Any]]) -> list[dict]:
    """`current` status.devices with this driver's entries replaced by `ours` (other drivers' kept, in order)."""
    mine = {_entry_key(e): e for e in ours}
    out = []
    for e in current:
        key = _entry_key(e)
        out.append(mine.pop(key) if e.get("driver") == constants.DRIVER_NAME and key in mine else e)
    return out + list(mine.values())
