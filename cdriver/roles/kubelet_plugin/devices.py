"""The devices this node offers: IMEX channels and the IMEX daemon slot, by name.

All channels are known locally, but only ``channel-0`` (and ``daemon-0`` in driver-managed
mode) is published: a ComputeDomain hands out channel 0 and injects more channels itself when
its allocation mode is ``All``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.nvml.discover import IMEX_CHANNEL_COUNT

#: Number of IMEX channels a node has (fixed by the NVIDIA driver).
CHANNEL_COUNT = IMEX_CHANNEL_COUNT
DAEMON_COUNT = 1

_NAME_RE = re.compile(r"^(channel|daemon)-(0|[1-9][0-9]{0,4})$")


@dataclass(frozen=True)
class DeviceRef:
    """A device of this driver: its type (``channel``/``daemon``) and numeric id."""

    type: str
    id: int

    @property
    def name(self) -> str:
        return f"{self.type}-{self.id}"


def parse_device(name: str) -> DeviceRef | None:
    """The device called ``name`` if this node has it, else None."""
    match = _NAME_RE.match(name or "")
    if not match:
        return None
    ref = DeviceRef(match.group(1), int(match.group(2)))
    limit = CHANNEL_COUNT if ref.type == constants.DEVICE_TYPE_CHANNEL else DAEMON_COUNT
    return ref if ref.id < limit else None


def published_devices(host_managed: bool) -> list[DeviceRef]:
    """Devices listed in this node's ResourceSlice, sorted by name."""
    devices = [DeviceRef(constants.DEVICE_TYPE_CHANNEL, 0)]
    if not host_managed:
        devices.append(DeviceRef(constants.DEVICE_TYPE_DAEMON, 0))
    return sorted(devices, key=lambda d: d.name)


#: Condition types of a channel published with binding conditions: the scheduler binds the pod
#: once `Ready` is True in the claim's status.devices, and places it again if `BindingFailed` is.
BINDING_CONDITIONS = ("Ready",)
BINDING_FAILURE_CONDITIONS = ("BindingFailed",)


def slice_device(ref: DeviceRef, taints: list[dict] | None = None, shared: bool = False, domain: str = "",
                 binding: bool = False) -> dict:
    """resource.k8s.io/v1 ResourceSlice device entry with the ``type`` and ``id`` attributes (and
    its `taints`, when it has any). A `shared` channel may be allocated to several claims
    (``allowMultipleAllocations``) and names the `domain` holding the node, if any; with
    `binding`, a channel's claims wait in scheduling until this node can serve them."""
    out: dict = {"name": ref.name, "attributes": {"type": {"string": ref.type}, "id": {"int": ref.id}}}
    if shared and ref.type == constants.DEVICE_TYPE_CHANNEL:
        out["allowMultipleAllocations"] = True
        if domain:
            out["attributes"][constants.ATTRIBUTE_COMPUTE_DOMAIN] = {"string": domain}
    if binding and ref.type == constants.DEVICE_TYPE_CHANNEL:
        out["bindsToNode"] = True
        out["bindingConditions"] = list(BINDING_CONDITIONS)
        out["bindingFailureConditions"] = list(BINDING_FAILURE_CONDITIONS)
    if taints:
        out["taints"] = [dict(t) for t in taints]
    return out
