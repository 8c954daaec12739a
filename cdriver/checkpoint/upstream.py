"""The upstream NVIDIA ComputeDomain plugin's checkpoint layouts, read and written.

Both drivers keep ``<plugin dir>/checkpoint.json``. The upstream layouts are:

* current: ``{"checksum": N, "v1": {...}, "v2": {"checksum": N, "preparedClaims": {...},
  "nodeBootID": "..."}}``; ``v1`` holds only the completely prepared claims, and each of
  the top-level and ``v2`` checksums covers its own part;
* older: ``{"checksum": N, "v1": {"preparedClaims": {"<uid>": [<device group>, ...]}}}``,
  where a device group's devices carry gRPC-style ``request_names``/``cdi_device_ids``.

A checksum is the kubelet checkpoint checksum: FNV-1a (32 bit) over the text
``([]uint8)[b0 b1 ...]`` (the decimal bytes of the part's compact JSON with checksum 0),
stored as an unsigned integer. The JSON must be byte-for-byte what Go's ``encoding/json``
produces for the part, so every object here is built in Go's field order.

`to_upstream` renders a cdriver `Checkpoint` in the current layout; `from_upstream` turns
either layout into a cdriver `Checkpoint` after verifying its checksums.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from cdriver.api.constants import DEVICE_TYPE_CHANNEL, DEVICE_TYPE_DAEMON, DRIVER_NAME
from cdriver.checkpoint.model import Checkpoint, ClaimRecord, ClaimState, RecordedDevice, check_string, recorded_device
from cdriver.decoding import type_name

#: Keys that mark a document as one of the upstream layouts.
UPSTREAM_KEYS = ("checksum", "v1", "v2")

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


class UpstreamLayoutError(ValueError):
    """The document is not a readable upstream checkpoint; the message says why."""


# --- Go-compatible JSON and the kubelet checksum ---------------------------------------------


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's ``json.Marshal`` writes it (keys in the given order, HTML-safe)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text.encode()


def kubelet_checksum(data: bytes) -> int:
    """The kubelet checkpoint checksum of ``data`` (the marshalled JSON of one part)."""
    text = "([]uint8)[" + " ".join(str(b) for b in data) + "]"
    digest = _FNV_OFFSET
    for byte in text.encode():
        digest = ((digest ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return digest


def _top_checksum(v1: dict | None) -> int:
    part: dict[str, Any] = {"checksum": 0}
    if v1 is not None:
        part["v1"] = v1
    return kubelet_checksum(go_json(part))


def _v2_checksum(v2: dict) -> int:
    return kubelet_checksum(go_json({**v2, "checksum": 0}))


# --- cdriver -> upstream -----------------------------------------------------------------------


def _go_time(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _upstream_device(device: RecordedDevice) -> dict[str, Any]:
    kind = DEVICE_TYPE_DAEMON if device.get("type") == DEVICE_TYPE_DAEMON else DEVICE_TYPE_CHANNEL
    entry = {
        "info": {"id": int(device.get("id", 0))},
        "device": {
            "Requests": list(device.get("request_names", [])),
            "PoolName": str(device.get("pool_name", "")),
            "DeviceName": str(device.get("device_name", "")),
            "CDIDeviceIDs": list(device.get("cdi_device_ids", [])),
        },
    }
    return {"channel": entry if kind == DEVICE_TYPE_CHANNEL else None,
            "daemon": entry if kind == DEVICE_TYPE_DAEMON else None}


def _upstream_claim(record: ClaimRecord) -> dict[str, Any]:
    state = str(record.state)
    claim: dict[str, Any] = {"checkpointState": state, "status": record.status or {}}
    if devices := record.completed_devices():
        claim["preparedDevices"] = [{
            "devices": [_upstream_device(d) for d in devices],
            "configState": {"Type": record.kind or DEVICE_TYPE_CHANNEL, "ComputeDomain": record.domain_id},
        }]
    if record.name:
        claim["name"] = record.name
    if record.namespace:
        claim["namespace"] = record.namespace
    if state == ClaimState.PREPARE_ABORTED:
        claim["abortedAt"] = _go_time(record.updated)
    return claim


def to_upstream(checkpoint: Checkpoint) -> dict[str, Any]:
    """``checkpoint`` in upstream's current layout, both checksums set."""
    claims = {uid: _upstream_claim(checkpoint.claims[uid]) for uid in sorted(checkpoint.claims)}
    v2: dict[str, Any] = {"checksum": 0}
    if claims:
        v2["preparedClaims"] = claims
    if checkpoint.boot_id:
        v2["nodeBootID"] = checkpoint.boot_id
    completed = {
        uid: {"status": claim["status"], **({"preparedDevices": claim["preparedDevices"]}
                                            if "preparedDevices" in claim else {})}
        for uid, claim in claims.items() if claim["checkpointState"] == ClaimState.PREPARE_COMPLETED
    }
    v1: dict[str, Any] = {"preparedClaims": completed} if completed else {}
    v2["checksum"] = _v2_checksum(v2)
    return {"checksum": _top_checksum(v1), "v1": v1, "v2": v2}


# --- upstream -> cdriver -----------------------------------------------------------------------


def _obj(value: object, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UpstreamLayoutError(f"{where}: expected an object, got {type_name(value)}")
    return value


def _list(value: object, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UpstreamLayoutError(f"{where}: expected a list, got {type_name(value)}")
    return value


def _strings(value: object, where: str) -> list[str]:
    items = _list(value, where)
    if not all(isinstance(i, str) for i in items):
        raise UpstreamLayoutError(f"{where}: expected a list of strings")
    return list(items)


def _admin_devices(status: dict) -> set[str]:
    """Names of this driver's devices the claim's allocation gives admin access to."""
    out = set()
    allocation = status.get("allocation")
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    for result in (devices.get("results") if isinstance(devices, dict) else None) or []:
        if (isinstance(result, dict) and result.get("driver") == DRIVER_NAME
                and result.get("adminAccess") is True):
            out.add(str(result.get("device", "")))
    return out


def _device(entry: dict, where: str, keys: tuple[str, str, str, str], admin: set[str]) -> RecordedDevice:
    """One prepared device in cdriver's form; ``keys`` name requests/pool/device/CDI ids."""
    kind = (DEVICE_TYPE_CHANNEL if entry.get("channel") else DEVICE_TYPE_DAEMON if entry.get("daemon")
            else "")
    if not kind:
        raise UpstreamLayoutError(f"{where}: neither a channel nor a daemon")
    part = _obj(entry[kind], f"{where}.{kind}")
    info = _obj(part.get("info"), f"{where}.{kind}.info")
    device = _obj(part.get("device"), f"{where}.{kind}.device")
    ident = info.get("id", 0)
    if isinstance(ident, bool) or not isinstance(ident, int):
        raise UpstreamLayoutError(f"{where}.{kind}.info.id: expected an integer")
    name = device.get(keys[2], "")
    return recorded_device(
        request_names=_strings(device.get(keys[0]), f"{where}.{kind}.device.{keys[0]}"),
        pool_name=str(device.get(keys[1], "")),
        device_name=str(name),
        cdi_device_ids=_strings(device.get(keys[3]), f"{where}.{kind}.device.{keys[3]}"),
        type=kind,
        id=ident,
        admin_access=name in admin,
    )


def _groups(value: object, where: str, keys: tuple[str, str, str, str], admin: set[str]) -> tuple[
        list[RecordedDevice], str, str]:
    """Devices, kind and ComputeDomain UID of a claim's prepared device groups."""
    devices: list[RecordedDevice] = []
    kind = domain = ""
    for i, group in enumerate(_list(value, where)):
        group = _obj(group, f"{where}[{i}]")
        config = _obj(group.get("configState"), f"{where}[{i}].configState")
        domain = domain or str(config.get("ComputeDomain", ""))
        kind = kind or str(config.get("Type", ""))
        for j, entry in enumerate(_list(group.get("devices"), f"{where}[{i}].devices")):
            devices.append(_device(_obj(entry, f"{where}[{i}].devices[{j}]"),
                                   f"{where}[{i}].devices[{j}]", keys, admin))
    if not kind and devices:
        kind = devices[0]["type"]
    return devices, kind, domain


_CURRENT_KEYS = ("Requests", "PoolName", "DeviceName", "CDIDeviceIDs")
_OLDEST_KEYS = ("request_names", "pool_name", "device_name", "cdi_device_ids")


def _parse_time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _verify(stored: object, actual: int, part: str) -> None:
    if stored != actual:
        raise UpstreamLayoutError(
            f"{part} checksum mismatch (stored {str(stored)[:24]}, content hashes to {actual}): "
            "the file was modified or damaged")


def _record(uid: str, state: str, devices: list[RecordedDevice], **fields: Any) -> ClaimRecord:
    check_string(uid, "preparedClaims key", nonempty=True)
    return ClaimRecord(uid=uid, state=ClaimState(state), devices=list(devices),
                       cdi_ids=[i for d in devices for i in d["cdi_device_ids"]], **fields)


def from_upstream(document: dict, now: float | None = None) -> tuple[Checkpoint, str]:
    """The claims of an upstream checkpoint, and its layout name (``v2``, ``v1`` or ``2503rc2``).

    Raises `UpstreamLayoutError` (and `InvalidContent` for an invalid claim UID).
    """
    now = time.time() if now is None else now
    if not isinstance(document.get("checksum", 0), int):
        raise UpstreamLayoutError("checksum: expected an unsigned integer")
    v1 = _obj(document.get("v1"), "v1")
    claims_v1 = _obj(v1.get("preparedClaims"), "v1.preparedClaims")
    if any(isinstance(c, list) for c in claims_v1.values()):
        return _from_oldest(document, claims_v1, now), "2503rc2"
    _verify(document.get("checksum"), _top_checksum(document.get("v1")), "top-level")
    if document.get("v2") is None:
        source = {uid: {"checkpointState": ClaimState.PREPARE_COMPLETED, **_obj(c, f"v1.preparedClaims[{uid!r}]")}
                  for uid, c in claims_v1.items()}
        boot_id, layout = "", "v1"
    else:
        v2 = _obj(document["v2"], "v2")
        _verify(v2.get("checksum"), _v2_checksum(v2), "v2")
        source = _obj(v2.get("preparedClaims"), "v2.preparedClaims")
        boot_id, layout = str(v2.get("nodeBootID", "")), "v2"
    records = {}
    for uid, claim in source.items():
        where = f"preparedClaims[{uid!r}]"
        claim = _obj(claim, where)
        state = claim.get("checkpointState") or ClaimState.PREPARE_COMPLETED
        if state not in tuple(ClaimState):
            raise UpstreamLayoutError(f"{where}.checkpointState: unknown state {str(state)[:40]!r}")
        status = _obj(claim.get("status"), f"{where}.status")
        admin = _admin_devices(status)
        devices, kind, domain = _groups(claim.get("preparedDevices"), f"{where}.preparedDevices",
                                        _CURRENT_KEYS, admin)
        records[uid] = _record(
            uid, state, devices, name=str(claim.get("name", "")), namespace=str(claim.get("namespace", "")),
            domain_id=domain, kind=kind, updated=_parse_time(claim.get("abortedAt")) or now, status=status,
        )
    return Checkpoint(boot_id=boot_id, claims=records), layout


def _from_oldest(document: dict, claims: dict, now: float) -> Checkpoint:
    _verify(document.get("checksum"), kubelet_checksum(go_json({**document, "checksum": 0})),
            "top-level")
    records = {}
    for uid, groups in claims.items():
        devices, kind, domain = _groups(groups, f"v1.preparedClaims[{uid!r}]", _OLDEST_KEYS, set())
        records[uid] = _record(uid, ClaimState.PREPARE_COMPLETED, devices, domain_id=domain, kind=kind, updated=now)
    return Checkpoint(claims=records)
