"""The node's record of ResourceClaims in use, as kubelet's DRA manager keeps it.

One entry per claim (namespace/name) with the pods that reference it and whether it is
prepared. A pod is recorded with a claim *before* NodePrepareResources is called, so a pod
whose prepare failed or timed out is still unprepared later; a claim shared by several pods
is prepared once and unprepared only when its last pod goes. The record is checkpointed to a
file so a restarted node agent continues where it stopped.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.atomic import atomic_write
from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.errors import CdriverError


class ClaimCacheError(CdriverError):
    """A pod cannot use a claim right now (another claim of that name is in use, or it is
    being unprepared)."""

    event_reason = "FailedPrepareDynamicResources"


@dataclass
class ClaimInfo:
    """One claim on the node: its drivers, the pods using it and what the drivers prepared."""

    ref: ClaimRef
    drivers: list[str]
    pod_uids: set[str] = field(default_factory=set)
    prepared: bool = False
    unpreparing: bool = False
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)  # driver -> devices

    def all_devices(self) -> list[PreparedDevice]:
        return [d for driver in sorted(self.devices) for d in self.devices[driver]]

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.ref.namespace, "name": self.ref.name, "uid": self.ref.uid,
                "drivers": list(self.drivers), "podUIDs": sorted(self.pod_uids), "prepared": self.prepared,
                "devices": {d: [x.to_dict() for x in devs] for d, devs in self.devices.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClaimInfo:
        return cls(ClaimRef(d["namespace"], d["name"], d["uid"]), [str(x) for x in d.get("drivers") or []],
                   {str(u) for u in d.get("podUIDs") or []}, bool(d.get("prepared")), False,
                   {str(k): [PreparedDevice.from_dict(x) for x in v]
                    for k, v in (d.get("devices") or {}).items()})


class ClaimCache:
    """Thread-safe claim record of one node, saved to `path` after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], ClaimInfo] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            entries = [ClaimInfo.from_dict(d) for d in data.get("claims") or []]
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CdriverError(f"claim checkpoint {self.path} cannot be read: {exc}; "
                               "remove it only if no claim is prepared on this node") from exc
        self._claims = {(c.ref.namespace, c.ref.name): c for c in entries}

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"claims": [c.to_dict() for c in self._claims.values()]}, indent=1))

    def reference(self, pod_uid: str, ref: ClaimRef, drivers: list[str]) -> bool:
        """Record that `pod_uid` uses the claim; True if the claim still needs NodePrepareResources."""
        with self._lock:
            key = (ref.namespace, ref.name)
            info = self._claims.get(key)
            if info is None:
                info = self._claims[key] = ClaimInfo(ref, list(drivers))
            elif info.ref.uid != ref.uid:
                raise ClaimCacheError(
                    f"an older ResourceClaim {ref.namespace}/{ref.name} (UID {info.ref.uid}) is still in use "
                    f"on this node; the new one (UID {ref.uid}) waits until its pods are gone")
            elif info.unpreparing:
                raise ClaimCacheError(f"ResourceClaim {ref.namespace}/{ref.name} is being unprepared")
            info.pod_uids.add(pod_uid)
            self._save()
            return not info.prepared

    def set_devices(self, ref: ClaimRef, driver: str, devices: list[PreparedDevice]) -> None:
        """What `driver` prepared for the claim (replaces an earlier answer)."""
        with self._lock:
            info = self._claims.get((ref.namespace, ref.name))
            if info is not None:
                info.devices[driver] = list(devices)

    def set_prepared(self, refs: list[ClaimRef]) -> None:
        with self._lock:
            for ref in refs:
                info = self._claims.get((ref.namespace, ref.name))
                if info is not None:
                    info.prepared = True
            self._save()

    def get(self, namespace: str, name: str) -> ClaimInfo | None:
        with self._lock:
            return self._claims.get((namespace, name))

    def pod_uids(self) -> set[str]:
        """Every pod that references a claim."""
        with self._lock:
            return {u for c in self._claims.values() for u in c.pod_uids}

    def release(self, pod_uid: str) -> list[ClaimInfo]:
        """Drop `pod_uid` from claims other pods still use; return the claims it was the last
        user of, marked as being unprepared (call `forget` once NodeUnprepareResources succeeded)."""
        with self._lock:
            last: list[ClaimInfo] = []
            for info in self._claims.values():
                if pod_uid not in info.pod_uids:
                    continue
                if len(info.pod_uids) > 1:
                    info.pod_uids.discard(pod_uid)
                else:
                    info.unpreparing = True
                    last.append(info)
            self._save()
            return last

    def forget(self, refs: list[ClaimRef]) -> None:
        """Remove unprepared claims."""
        with self._lock:
            for ref in refs:
                info = self._claims.get((ref.namespace, ref.name))
                if info is not None and info.ref.uid == ref.uid:
                    del self._claims[(ref.namespace, ref.name)]
            self._save()
