"""What the kubelet plugin records about claims: states, devices, claim records, the checkpoint.

A record's ``devices`` are plain JSON objects in one of two forms, both declared here and
nowhere else: a claim in PrepareStarted holds the devices its allocation names
(`IntendedDevice`, recorded before any side effect); a completely prepared claim holds what
kubelet got back plus the type and id its ownership checks need (`RecordedDevice`).
``ClaimRecord.to_dict``/``from_dict`` are a record's form in cdriver's section of the file
(see `cdriver.checkpoint.native`); decoding is strict and raises `InvalidContent`.
"""

from __future__ import annotations

import copy
import enum
import math
import time
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from cdriver.decoding import type_name
from cdriver.errors import CdriverError

MAX_FIELD_LENGTH = 253  # uid, name, namespace, domainID, kind


class CheckpointError(CdriverError):
    """The checkpoint cannot be read, written or locked; the message says what to do."""


class CorruptCheckpoint(CheckpointError):
    """The file was read but its content is unusable (``reason`` says why)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidContent(Exception):
    """Decoding failure; the store turns it into a `CorruptCheckpoint` that names the file."""


class ClaimState(enum.StrEnum):
    """Where a claim is in Prepare. Intent is recorded (STARTED) before any side effect."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    #: Unprepared while Prepare had not finished; kept a while (``updated`` = when) so a
    #: late Prepare retry of the same claim cannot bring its devices back.
    PREPARE_ABORTED = "PrepareAborted"


class RecordedDevice(TypedDict):
    """A device of a completely prepared claim: what kubelet got back (the DRA ``Device``
    fields), then the device's type (``channel``/``daemon``), id and admin access."""

    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    share_id: NotRequired[str]
    type: str
    id: int
    admin_access: bool


class IntendedDevice(TypedDict):
    """A device a claim in PrepareStarted is to get: its allocation result."""

    request: str
    pool: str
    device: str
    type: str
    id: int
    adminAccess: bool


#: What a record's ``devices`` hold.
ClaimDevice = RecordedDevice | IntendedDevice


def recorded_device(*, request_names: list[str], pool_name: str, device_name: str, cdi_device_ids: list[str],
                    type: str, id: int, admin_access: bool, share_id: str | None = None) -> RecordedDevice:
    """A `RecordedDevice`, its keys in the order they are written."""
    device: dict[str, Any] = {
        "request_names": list(request_names),
        "pool_name": pool_name,
        "device_name": device_name,
        "cdi_device_ids": list(cdi_device_ids),
    }
    if share_id:
        device["share_id"] = share_id
    device.update(type=type, id=id, admin_access=admin_access)
    return cast(RecordedDevice, device)


def intended_device(*, request: str, pool: str, device: str, type: str, id: int,
                    admin_access: bool) -> IntendedDevice:
    """An `IntendedDevice`, its keys in the order they are written."""
    return IntendedDevice(request=request, pool=pool, device=device, type=type, id=id, adminAccess=admin_access)


@dataclass
class ClaimRecord:
    """One claim the plugin has started or finished preparing."""

    uid: str
    name: str = ""
    namespace: str = ""
    state: ClaimState = ClaimState.PREPARE_STARTED
    devices: list[ClaimDevice] = field(default_factory=list)
    cdi_ids: list[str] = field(default_factory=list)
    domain_id: str = ""
    kind: str = ""
    updated: float = field(default_factory=time.time)
    #: The ResourceClaim status the upstream plugin recorded (claims taken over from it), kept
    #: so that a switch back hands it the same entry; empty for claims cdriver prepared.
    status: dict[str, Any] = field(default_factory=dict)

    def completed_devices(self) -> list[RecordedDevice]:
        """The devices a completely prepared claim holds; [] in any other state."""
        if self.state != ClaimState.PREPARE_COMPLETED:
            return []
        return cast(list[RecordedDevice], self.devices)  # completion records RecordedDevices

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "state": str(self.state),
            "devices": copy.deepcopy(self.devices),
            "cdiIDs": list(self.cdi_ids),
            "domainID": self.domain_id,
            "kind": self.kind,
            "updated": self.updated,
            **({"status": copy.deepcopy(self.status)} if self.status else {}),
        }

    @classmethod
    def from_dict(cls, uid: str, obj: object, where: str) -> ClaimRecord:
        check_string(uid, f"{where} key", nonempty=True)
        data = as_object(obj, where)
        fields = ("name", "namespace", "state", "devices", "cdiIDs", "domainID", "kind", "updated")
        check_keys(data, (*fields, "status"), fields, where)
        state = data["state"]
        if state not in tuple(ClaimState):
            raise InvalidContent(f"{where}.state: {state!r} is not one of {', '.join(ClaimState)}")
        devices = data["devices"]
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise InvalidContent(f"{where}.devices: expected a list of objects")
        cdi_ids = data["cdiIDs"]
        if not isinstance(cdi_ids, list):
            raise InvalidContent(f"{where}.cdiIDs: expected a list of strings, got {type_name(cdi_ids)}")
        for i, cdi_id in enumerate(cdi_ids):
            check_string(cdi_id, f"{where}.cdiIDs[{i}]", limit=2 * MAX_FIELD_LENGTH + 1)
        updated = data["updated"]
        if isinstance(updated, bool) or not isinstance(updated, int | float) or not math.isfinite(updated):
            raise InvalidContent(f"{where}.updated: expected a number of seconds, got {type_name(updated)}")
        for key in ("name", "namespace", "domainID", "kind"):
            check_string(data[key], f"{where}.{key}")
        return cls(
            uid=uid,
            name=data["name"],
            namespace=data["namespace"],
            state=ClaimState(state),
            devices=devices,
            cdi_ids=cdi_ids,
            domain_id=data["domainID"],
            kind=data["kind"],
            updated=float(updated),
            status=as_object(data.get("status", {}), f"{where}.status"),
        )


@dataclass
class Checkpoint:
    """Everything the plugin remembers: the boot it belongs to and the claims by UID."""

    boot_id: str = ""
    claims: dict[str, ClaimRecord] = field(default_factory=dict)


# --- strict decoding --------------------------------------------------------------------


def as_object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidContent(f"{where}: expected an object, got {type_name(value)}")
    return value


def check_keys(data: dict, allowed: tuple[str, ...], required: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise InvalidContent(f"{where}: unknown field {str(key)[:60]!r}")
    for key in required:
        if key not in data:
            raise InvalidContent(f"{where}: missing field {key!r}")


def check_string(value: object, where: str, nonempty: bool = False, limit: int = MAX_FIELD_LENGTH) -> None:
    if not isinstance(value, str):
        raise InvalidContent(f"{where}: expected a string, got {type_name(value)}")
    if nonempty and not value:
        raise InvalidContent(f"{where}: must not be empty")
    if len(value) > limit:
        raise InvalidContent(f"{where}: {len(value)} characters, more than the limit of {limit}")
