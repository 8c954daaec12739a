"""This node's ResourceSlice: one pool named after the node, kept published.

`plan_sync` is the pure decision (what to create, update and delete given the slices that
exist); `SlicePublisher` applies it whenever the watched slices change, so a slice deleted by
kubelet (it wipes a node's slices when it starts) is re-created at once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cdriver.api.constants import DEVICE_TYPE_CHANNEL, DRIVER_NAME
from cdriver.kube.errors import ApiError
from cdriver.kube.informer import Informer
from cdriver.kube.objects import meta_of, name_of, owner_references_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.devices import DeviceRef, slice_device

log = logging.getLogger(__name__)

SLICES = RESOURCES["resourceslices"]


def slice_field_selector(node_name: str, driver: str = DRIVER_NAME) -> str:
    return f"spec.driver={driver},spec.nodeName={node_name}"


def slice_name_prefix(node_name: str, driver: str = DRIVER_NAME) -> str:
    return f"00000-{driver}-{node_name}-"[:200]


def owner_reference(node_name: str, node_uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}


@dataclass(frozen=True)
class Sharing:
    """Whether this node's channel is published for several claims (of one ComputeDomain), the
    domain that holds the node now ("" when none), and whether its claims wait for binding
    conditions."""

    shared: bool = False
    domain: str = ""
    binding: bool = False


NOT_SHARED = Sharing()


def desired_spec(node_name: str, devices: list[DeviceRef], generation: int, driver: str = DRIVER_NAME,
                 taints: dict[str, list[dict]] | None = None, sharing: Sharing = NOT_SHARED) -> dict:
    """The slice's spec; `taints` by device name."""
    return {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
        "devices": [slice_device(d, (taints or {}).get(d.name), sharing.shared, sharing.domain, sharing.binding)
                    for d in sorted(devices, key=lambda d: d.name)],
    }


def _canon(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def _canon_devices(devices: list[dict]) -> str:
    """Devices for comparison: a taint's timeAdded is the API server's to fill in."""
    return _canon([{**d, **({"taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
                            if d.get("taints") else {})}
                   for d in devices])


def slice_matches(obj: dict, node_name: str, node_uid: str, devices: list[DeviceRef],
                  taints: dict[str, list[dict]] | None = None, sharing: Sharing = NOT_SHARED) -> bool:
    """Does an existing slice publish exactly what we want (any generation)?"""
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    owners = owner_references_of(obj)
    want = desired_spec(node_name, devices, 0, taints=taints, sharing=sharing)
    return (
        pool.get("name") == node_name
        and pool.get("resourceSliceCount") == 1
        and _canon_devices(spec.get("devices") or []) == _canon_devices(want["devices"])
        and any(o.get("kind") == "Node" and o.get("uid") == node_uid for o in owners)
    )


@dataclass
class SyncPlan:
    """What to do to reach exactly one correct slice."""

    create: dict | None = None
    update: dict | None = None
    delete: list[dict] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        return self.create is None and self.update is None and not self.delete


def plan_sync(
    existing: list[dict], node_name: str, node_uid: str, devices: list[DeviceRef], driver: str = DRIVER_NAME,
    taints: dict[str, list[dict]] | None = None, sharing: Sharing = NOT_SHARED,
) -> SyncPlan:
    """Keep one matching slice (oldest name first), else rewrite one or create one; drop the rest."""
    ours = sorted(
        (
            s
            for s in existing
            if (s.get("spec") or {}).get("driver") == driver and (s.get("spec") or {}).get("nodeName") == node_name
        ),
        key=lambda s: (
            meta_of(s).get("creationTimestamp") or "",
            name_of(s),
        ),
    )
    generation = 1 + max(
        [int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0) for s in ours], default=0
    )
    plan = SyncPlan()
    keep = next((s for s in ours if slice_matches(s, node_name, node_uid, devices, taints, sharing)), None)
    if keep is None and ours:
        keep = ours[0]
        updated = json.loads(json.dumps(keep))
        updated["spec"] = desired_spec(node_name, devices, generation, driver, taints, sharing)
        updated.setdefault("metadata", {})["ownerReferences"] = [owner_reference(node_name, node_uid)]
        plan.update = updated
    elif keep is None:
        plan.create = {
            "apiVersion": f"{SLICES.group}/{SLICES.version}",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": slice_name_prefix(node_name, driver),
                "ownerReferences": [owner_reference(node_name, node_uid)],
            },
            "spec": desired_spec(node_name, devices, generation, driver, taints, sharing),
        }
    plan.delete = [s for s in ours if s is not keep]
    return plan


def _dropped(sent: dict, got: dict, key: str) -> bool:
    """Did the server drop `key` from every device that we sent it on?"""
    wanted = any(d.get(key) for d in (sent.get("spec") or {}).get("devices") or [])
    kept = any(d.get(key) for d in (got.get("spec") or {}).get("devices") or [])
    return wanted and not kept


class SlicePublisher:
    """Publishes the slice and re-publishes it whenever the watched slices change."""

    def __init__(
        self,
        raw: RawClient,
        informer: Informer,
        node_name: str,
        node_uid: Callable[[], str],
        devices: list[DeviceRef],
        retry_seconds: float = 5.0,
        on_error: Callable[[], None] = lambda: None,
        share_channels: bool = False,
        binding_conditions: bool = False,
    ) -> None:
        """``on_error``: called after each failed attempt to publish the slice. ``share_channels``:
        publish the channel for several claims of one domain (where the server keeps it)."""
        self.raw = raw
        self.informer = informer
        self.node_name = node_name
        self.node_uid = node_uid
        self.devices = devices
        self.retry_seconds = retry_seconds
        self.on_error = on_error
        self._trigger = threading.Event()
        self._cache_changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.syncs = 0
        self.published = threading.Event()
        #: taints by device name (the channel devices' while they are unusable on this node)
        self.taints: dict[str, list[dict]] = {}
        #: False once the API server dropped the taints we wrote (device taints off, before 1.36)
        self.taints_served = True
        self.share_channels = share_channels
        #: False once the API server dropped allowMultipleAllocations (DRAConsumableCapacity off)
        self.sharing_served = True
        self.binding_conditions = binding_conditions
        #: False once the API server dropped bindingConditions (DRADeviceBindingConditions off)
        self.binding_served = True
        #: the ComputeDomain holding this node (its label), named on the shared channel
        self.domain = ""
        informer.add_handler(on_add=self._poke, on_update=self._poke_update, on_delete=self._poke)

    def _poke(self, *_: object) -> None:
        self._trigger.set()
        with self._cache_changed:
            self._cache_changed.notify_all()

    def _poke_update(self, old: dict, new: dict) -> None:
        if old is not new:
            self._poke()

    def start(self) -> None:
        self._trigger.set()
        self._thread = threading.Thread(target=self._run, name="resourceslice", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke()
        if self._thread is not None:
            self._thread.join(5)

    def set_channel_taints(self, taints: list[dict]) -> None:
        """Taint this node's channel devices with `taints` (none: untaint) and publish."""
        self.taints = {d.name: list(taints) for d in self.devices if d.type == DEVICE_TYPE_CHANNEL and taints}
        self._poke()

    def set_domain(self, domain: str) -> None:
        """The ComputeDomain (UID) now holding this node ("" when none); published while shared."""
        if domain != self.domain:
            self.domain = domain
            if self.share_channels and self.sharing_served:
                self._poke()

    def _wanted_taints(self) -> dict[str, list[dict]]:
        return self.taints if self.taints_served else {}

    @property
    def binding(self) -> bool:
        """Whether the published channel carries binding conditions (asked for and served)."""
        return self.binding_conditions and self.binding_served

    def _wanted_sharing(self) -> Sharing:
        shared = self.share_channels and self.sharing_served
        return Sharing(shared, self.domain if shared else "", self.binding)

    def current(self) -> bool:
        """Whether the slices seen now publish exactly this node's devices (nothing to do)."""
        uid = self.node_uid()
        return bool(uid) and plan_sync(self.informer.objects(), self.node_name, uid, self.devices,
                                       taints=self._wanted_taints(), sharing=self._wanted_sharing()).noop

    def sync_once(self) -> SyncPlan:
        """Apply one plan from the cached slices; raises ApiError on API failures."""
        uid = self.node_uid()
        if not uid:
            raise ApiError(0, "NodeUnknown", f"node {self.node_name} not found; cannot own the ResourceSlice")
        plan = plan_sync(self.informer.objects(), self.node_name, uid, self.devices, taints=self._wanted_taints(),
                         sharing=self._wanted_sharing())
        for obj in plan.delete:
            meta = meta_of(obj)
            try:
                self.raw.delete(
                    SLICES,
                    meta.get("name", ""),
                    precondition_uid=meta.get("uid"),
                    precondition_resource_version=meta.get("resourceVersion"),
                )
                log.info("deleted stale ResourceSlice %s", meta.get("name"))
            except ApiError as exc:
                if not (exc.not_found or exc.conflict):
                    raise
        if plan.update is not None:
            got = self.raw.update(SLICES, plan.update)
            self._check_fields_kept(plan.update, got)
            self._await_cache(got)
            log.info(
                "updated ResourceSlice %s (generation %s)",
                name_of(got),
                plan.update["spec"]["pool"]["generation"],
            )
        if plan.create is not None:
            got = self.raw.create(SLICES, plan.create)
            self._check_fields_kept(plan.create, got)
            self._await_cache(got)
            log.info(
                "published ResourceSlice %s with %s",
                name_of(got),
                ", ".join(d.name for d in self.devices),
            )
        self.syncs += 1
        return plan

    def _check_fields_kept(self, sent: dict, got: dict) -> None:
        """A server without device taints or shared devices drops those fields: stop asking for
        them (no endless rewrites)."""
        if _dropped(sent, got, "taints"):
            self.taints_served = False
            log.warning("the API server does not keep device taints (DRADeviceTaints is off before Kubernetes "
                        "1.36): this node's channel devices stay untainted while they are unusable")
        if _dropped(sent, got, "allowMultipleAllocations"):
            self.sharing_served = False
            log.warning("the API server does not keep allowMultipleAllocations (DRAConsumableCapacity is off "
                        "before Kubernetes 1.36): this node's channel goes to one claim at a time, so one "
                        "workload pod of a ComputeDomain per node")
        if _dropped(sent, got, "bindingConditions"):
            self.binding_served = False
            log.warning("the API server does not keep bindingConditions (DRADeviceBindingConditions is off before "
                        "Kubernetes 1.36): gate ComputeDomainBindingConditions has no effect here; pods wait for "
                        "their node's IMEX daemon in ContainerCreating, as without the gate")

    def _await_cache(self, obj: dict, timeout: float = 5.0) -> None:
        """Wait until the informer has seen our write, so the next sync does not repeat it."""
        meta = meta_of(obj)
        name, rv = meta.get("name", ""), int(meta.get("resourceVersion") or 0)

        def seen() -> bool:
            cached = self.informer.get(name)
            return cached is not None and int(meta_of(cached).get("resourceVersion") or 0) >= rv

        with self._cache_changed:
            self._cache_changed.wait_for(lambda: self._stop.is_set() or seen(), timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._trigger.wait()
            if self._stop.is_set():
                return
            self._trigger.clear()
            try:
                plan = self.sync_once()
                if plan.noop:
                    self.published.set()
            except ApiError as exc:
                self.on_error()
                log.warning(
                    "ResourceSlice sync for node %s failed (retrying in %.0fs): %s",
                    self.node_name,
                    self.retry_seconds,
                    exc,
                )
                if self._stop.wait(self.retry_seconds):
                    return
                self._trigger.set()
