"""What a ResourceClaim asks of this plugin: decoded, validated, as plain data.

Pure functions only. `plan_claim` turns an allocated ResourceClaim (the API dict) into a
`ClaimPlan`, rejecting bad input with an error that names the claim, the field and the fix.
`check_devices_free` decides whether the checkpoint lets this claim take its devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.api.constants import (
    DEVICE_TYPE_CHANNEL,
    DEVICE_TYPE_DAEMON,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
    KIND_DAEMON_CONFIG,
)
from cdriver.api.types import ChannelConfig, DaemonConfig, UnknownFieldError, ValidationError, decode_opaque_config
from cdriver.kube.objects import meta_of, name_of, namespace_of, owner_references_of, uid_of
from cdriver.roles.kubelet_plugin.devices import DeviceRef, parse_device
from cdriver.roles.kubelet_plugin.errors import (
    REASON_CHANNEL_IN_USE,
    REASON_DOMAIN_DELETING,
    REASON_DOMAIN_NOT_FOUND,
    REASON_INVALID_CONFIG,
    REASON_OTHER,
    REASON_WRONG_NAMESPACE,
    ClaimError,
    permanent,
    retryable,
    strict_decoding,
)

SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"
KIND_CHANNEL = DEVICE_TYPE_CHANNEL
KIND_DAEMON = DEVICE_TYPE_DAEMON


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of this driver in a claim."""

    request: str
    pool: str
    device: str
    ref: DeviceRef
    admin_access: bool = False
    #: the allocation's share of a device allocated more than once (``shareID``), else ""
    share_id: str = ""


@dataclass(frozen=True)
class ClaimPlan:
    """A claim this plugin must prepare: one kind (channel or daemon) for one ComputeDomain."""

    uid: str
    namespace: str
    name: str
    kind: str
    domain_id: str
    devices: tuple[AllocatedDevice, ...] = field(default_factory=tuple)
    all_channels: bool = False

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


@dataclass(frozen=True)
class HeldDevice:
    """A device that a prepared claim holds, as recorded in the checkpoint."""

    claim_uid: str
    device: str
    type: str
    id: int
    admin_access: bool = False
    #: the ComputeDomain of the claim holding it ("" when the checkpoint does not say)
    domain_id: str = ""


def claim_label(claim: dict) -> str:
    meta = meta_of(claim)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}:{meta.get('uid', '')}"


def _top_request(request: str) -> str:
    return request.split("/", 1)[0]


def our_results(claim: dict, driver: str = DRIVER_NAME) -> list[dict]:
    """Allocation results of this driver (status.allocation.devices.results[])."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict) and r.get("driver") == driver]


def decode_configs(claim: dict, driver: str = DRIVER_NAME) -> list[tuple[list[str], ChannelConfig | DaemonConfig]]:
    """This driver's opaque configs in precedence order (class configs, then claim configs).

    Later entries win. Raises a permanent ClaimError for an unknown source, a non-opaque
    entry, or parameters that do not decode strictly.
    """
    label = claim_label(claim)
    allocation = (claim.get("status") or {}).get("allocation") or {}
    entries = (allocation.get("devices") or {}).get("config") or []
    by_source: dict[str, list[tuple[list[str], ChannelConfig | DaemonConfig]]] = {
        SOURCE_CLASS: [],
        SOURCE_CLAIM: [],
    }
    for i, entry in enumerate(entries):
        where = f"claim {label}: status.allocation.devices.config[{i}]"
        source = entry.get("source") if isinstance(entry, dict) else None
        if source not in by_source:
            raise permanent(f"{where}: invalid config source {source!r}; expected {SOURCE_CLASS} or {SOURCE_CLAIM}",
                            reason=REASON_INVALID_CONFIG)
        opaque = entry.get("opaque")
        if not isinstance(opaque, dict):
            raise permanent(f"{where}: only opaque parameters are supported by {driver}", reason=REASON_INVALID_CONFIG)
        if opaque.get("driver") != driver:
            continue
        try:
            config = decode_opaque_config(opaque.get("parameters"))
        except UnknownFieldError as exc:
            raise permanent(
                f"{where}: error decoding config parameters: {strict_decoding(exc.paths)}; {exc}",
                reason=REASON_INVALID_CONFIG,
            ) from None
        except ValidationError as exc:
            raise permanent(f"{where}: error decoding config parameters: {exc}", reason=REASON_INVALID_CONFIG) from None
        requests = [str(r) for r in entry.get("requests") or []]
        by_source[source].append((requests, config))
    return by_source[SOURCE_CLASS] + by_source[SOURCE_CLAIM]


def _config_kind(config: ChannelConfig | DaemonConfig) -> str:
    return KIND_CHANNEL if isinstance(config, ChannelConfig) else KIND_DAEMON


def _config_name(config: ChannelConfig | DaemonConfig) -> str:
    return KIND_CHANNEL_CONFIG if isinstance(config, ChannelConfig) else KIND_DAEMON_CONFIG


def config_for(
    request: str, ref: DeviceRef, configs: list[tuple[list[str], ChannelConfig | DaemonConfig]], label: str
) -> ChannelConfig | DaemonConfig | None:
    """The config that applies to one allocation result (highest precedence wins)."""
    for requests, config in reversed(configs):
        if requests:
            if request in requests or _top_request(request) in requests:
                if _config_kind(config) != ref.type:
                    raise permanent(
                        f"claim {label}: cannot apply {_config_name(config)} to request {request!r}, which "
                        f"was allocated {ref.type} device {ref.name}; use the config kind that matches "
                        "the device class",
                        reason=REASON_INVALID_CONFIG,
                    )
                return config
        elif _config_kind(config) == ref.type:
            return config
    return None


def plan_claim(claim: dict, node_name: str, driver: str = DRIVER_NAME) -> ClaimPlan:
    """Decode and validate an allocated claim into a ClaimPlan (raises ClaimError)."""
    meta = meta_of(claim)
    label = claim_label(claim)
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise permanent(
            f"claim {label} has no allocation (status.allocation is empty); "
            "kubelet should only prepare allocated claims",
            reason=REASON_INVALID_CONFIG,
        )
    configs = decode_configs(claim, driver)
    devices: list[AllocatedDevice] = []
    chosen: list[ChannelConfig | DaemonConfig] = []
    for result in our_results(claim, driver):
        request, device, pool = (
            str(result.get("request", "")),
            str(result.get("device", "")),
            str(result.get("pool", "")),
        )
        ref = parse_device(device)
        if ref is None:
            raise permanent(
                f"claim {label}: requested device {device!r} is not allocatable: this driver "
                "offers channel-<0..2047> and daemon-0",
                reason=REASON_INVALID_CONFIG,
            )
        if pool and pool != node_name:
            raise permanent(
                f"claim {label}: device {device} was allocated from pool {pool!r}, but this "
                f"plugin serves node {node_name!r}",
                reason=REASON_INVALID_CONFIG,
            )
        config = config_for(request, ref, configs, label)
        if config is None:
            want = KIND_CHANNEL_CONFIG if ref.type == KIND_CHANNEL else KIND_DAEMON_CONFIG
            raise permanent(
                f"claim {label}: no {want} (with domainID) applies to request {request!r}; create the claim "
                "from the ResourceClaimTemplate that the ComputeDomain controller generates",
                reason=REASON_INVALID_CONFIG,
            )
        devices.append(AllocatedDevice(request, pool, device, ref, bool(result.get("adminAccess")),
                                       str(result.get("shareID") or "")))
        chosen.append(config)
    if not devices:
        return ClaimPlan(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            kind="",
            domain_id="",
        )
    kinds = {d.ref.type for d in devices}
    if len(kinds) > 1:
        raise permanent(f"claim {label} mixes channel and daemon devices; use one claim per kind",
                        reason=REASON_INVALID_CONFIG)
    domains = sorted({c.domain_id for c in chosen})
    if len(domains) > 1:
        raise permanent(
            f"claim {label} refers to several ComputeDomains ({', '.join(domains)}); "
            "a claim belongs to exactly one ComputeDomain",
            reason=REASON_INVALID_CONFIG,
        )
    kind = kinds.pop()
    if kind == KIND_CHANNEL and len(devices) != 1:
        raise permanent(
            f"claim {label} was allocated {len(devices)} channel devices; a ComputeDomain "
            "channel claim takes exactly one (set allocationMode: All to get every channel)",
            reason=REASON_INVALID_CONFIG,
        )
    all_channels = any(isinstance(c, ChannelConfig) and c.all_channels for c in chosen)
    return ClaimPlan(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        kind=kind,
        domain_id=domains[0],
        devices=tuple(devices),
        all_channels=all_channels,
    )


def check_devices_free(plan: ClaimPlan, held: Iterable[HeldDevice], host_managed: bool) -> None:
    """Raise a retryable ClaimError if a prepared claim of another ComputeDomain holds what this
    claim needs.

    ``held`` lists the devices of *completed* claims. In driver-managed mode every channel
    claim uses channel 0 (an ``All`` claim uses every channel); in host-managed mode the
    allocated channel id counts. Channel claims of one ComputeDomain share the node's channel
    (the scheduler allocates it to each of them where channels are published as shareable);
    two claims of different domains never hold it at once, since a node belongs to one IMEX
    domain. Other devices (the daemon slot) are held by one claim. Devices shared through admin
    access never conflict.
    """
    others = [h for h in held if h.claim_uid != plan.uid]
    if plan.kind == KIND_CHANNEL:
        wanted = plan.devices[0].ref.id if host_managed else 0
        for h in others:
            if h.type != KIND_CHANNEL or (h.domain_id and h.domain_id == plan.domain_id):
                continue
            used = h.id if host_managed else 0
            if used == wanted:
                raise retryable(
                    f"claim {plan.label}: channel {wanted} already allocated by claim {h.claim_uid} "
                    f"of another ComputeDomain ({h.domain_id or 'unknown'}, according to the checkpoint); "
                    "a node serves one ComputeDomain at a time: it is freed when that claim's pod is gone",
                    reason=REASON_CHANNEL_IN_USE,
                )
    for dev in plan.devices:
        if dev.admin_access:
            continue
        for h in others:
            if h.admin_access or h.device != dev.device:
                continue
            if dev.ref.type == KIND_CHANNEL and h.domain_id and h.domain_id == plan.domain_id:
                continue  # the domain's claims share its channel
            raise retryable(
                f"claim {plan.label}: device {dev.device} is already allocated to "
                f"claim {h.claim_uid} (according to the checkpoint); it is freed when "
                "that claim's pod is gone",
                reason=REASON_CHANNEL_IN_USE,
            )


def check_domain_namespace(plan: ClaimPlan, cd: Mapping | None) -> None:
    """A channel claim must live in its ComputeDomain's namespace (permanent error otherwise)."""
    if cd is None:
        raise permanent(
            f"claim {plan.label}: ComputeDomain with UID {plan.domain_id} not found; it was "
            "deleted, or the claim was not created from its ResourceClaimTemplate",
            reason=REASON_DOMAIN_NOT_FOUND,
        )
    cd_ns = namespace_of(cd)
    cd_name = name_of(cd)
    if cd_ns != plan.namespace:
        raise permanent(
            f"claim {plan.label}: the ResourceClaim's namespace {plan.namespace!r} is different than the "
            f"ComputeDomain's namespace {cd_ns!r} (ComputeDomain {cd_ns}/{cd_name}, UID {plan.domain_id}); "
            "create the workload in the ComputeDomain's namespace",
            reason=REASON_WRONG_NAMESPACE,
        )


def domain_deleting(cd: Mapping | None) -> bool:
    """Whether the ComputeDomain carries a deletion timestamp (its deletion has begun)."""
    return cd is not None and bool((cd.get("metadata") or {}).get("deletionTimestamp"))


def domain_deleting_error(plan: ClaimPlan, cd: Mapping | None) -> ClaimError:
    """The retryable refusal of a channel claim whose ComputeDomain is being deleted (or gone)."""
    return retryable(
        f"claim {plan.label}: ComputeDomain {plan.namespace}/{name_of(cd) if cd else '?'} (UID {plan.domain_id}) "
        "is being deleted; delete the pods that use its channel claim",
        reason=REASON_DOMAIN_DELETING,
    )


def daemon_pods_reserving(claim: dict) -> list[tuple[str, str]]:
    """(name, uid) of every consumer in the claim's status.reservedFor (pods are the only
    consumers a daemon claim may have; other kinds come back with an empty uid and fail)."""
    out = []
    for consumer in (claim.get("status") or {}).get("reservedFor") or []:
        if not isinstance(consumer, dict):
            continue
        is_pod = consumer.get("resource") == "pods" and not consumer.get("apiGroup")
        out.append((str(consumer.get("name", "")), str(consumer.get("uid", "")) if is_pod else ""))
    return out


def _owning_daemonset(pod: Mapping) -> str:
    for ref in owner_references_of(pod):
        if ref.get("controller") and ref.get("kind") == "DaemonSet" and ref.get("apiVersion") == "apps/v1":
            return str(ref.get("name", ""))
    return ""


def check_daemon_claim_owner(plan: ClaimPlan, driver_namespace: str, pods: Mapping[str, Mapping | None],
                             claim: dict) -> None:
    """A daemon claim is prepared only for its domain's own IMEX daemon pods (permanent error otherwise).

    The claim must live in the driver namespace (no user outside it can create pods there),
    and every pod it is reserved for must be controlled by the domain's daemon DaemonSet
    ``computedomain-daemon-<domain UID>``. ``pods`` maps the reserved pod names to the pods
    read from the API (None: not found).
    """
    fix = (f"daemon claims are created by the ComputeDomain controller for the domain's IMEX daemon "
           f"DaemonSet only; workloads use the domain's channel ResourceClaimTemplate "
           f"(deviceClassName {constants.DEVICE_CLASS_DEFAULT_CHANNEL})")
    if plan.namespace != driver_namespace:
        raise permanent(
            f"claim {plan.label}: a {constants.KIND_DAEMON_CONFIG} claim (ComputeDomain UID {plan.domain_id}) "
            f"is accepted "
            f"only in the driver namespace {driver_namespace!r}, not in {plan.namespace!r}; {fix}",
            reason=REASON_WRONG_NAMESPACE,
        )
    want = constants.daemon_object_name(plan.domain_id)
    consumers = daemon_pods_reserving(claim)
    if not consumers:
        raise retryable(f"claim {plan.label}: the claim is not reserved for any pod yet; kubelet retries",
                        reason=REASON_OTHER)
    for name, uid in consumers:
        pod = pods.get(name) if uid else None
        got_uid = uid_of(pod)
        owner = _owning_daemonset(pod or {})
        if pod is None or got_uid != uid or owner != want:
            what = "is not a pod" if not uid else (
                "does not exist" if pod is None else
                f"has UID {got_uid}, not {uid}" if got_uid != uid else
                f"is controlled by {'DaemonSet ' + owner if owner else 'no DaemonSet'}")
            raise permanent(
                f"claim {plan.label}: reserved for {name!r}, which {what}; a {constants.KIND_DAEMON_CONFIG} claim "
                f"(ComputeDomain UID {plan.domain_id}) is prepared only for pods of DaemonSet "
                f"{driver_namespace}/{want}; {fix}",
                reason=REASON_INVALID_CONFIG,
            )


def check_claim_identity(claim: dict, uid: str) -> None:
    """The claim fetched from the API must be the one kubelet asked for."""
    got = uid_of(claim)
    if got != uid:
        raise permanent(
            f"claim {claim_label(claim)}: kubelet asked for UID {uid}, but the API has UID "
            f"{got}: the claim was deleted and re-created",
            reason=REASON_OTHER,
        )


__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimPlan",
    "HeldDevice",
    "check_claim_identity",
    "check_daemon_claim_owner",
    "check_devices_free",
    "check_domain_namespace",
    "config_for",
    "daemon_pods_reserving",
    "decode_configs",
    "our_results",
    "plan_claim",
]
