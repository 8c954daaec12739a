"""A pod's ResourceClaims on a simulated node: which claims, which drivers, and what the node
prepared (kept in the pod's state file so claims can be unprepared after an agent restart)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.dra.client import DRAError
from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.sim.node.simulated.runtime import NodeRuntime


def pod_claim_names(pod: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(pod claim name, ResourceClaim name or None while not known yet) for the pod's claims.

    A claim from a template is named in status.resourceClaimStatuses; an entry there without
    a name means no claim is needed."""
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out: list[tuple[str, str | None]] = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = ref.get("name", "")
        if ref.get("resourceClaimName"):
            out.append((name, ref["resourceClaimName"]))
        elif name in statuses:
            claim = statuses[name].get("resourceClaimName")
            if claim:
                out.append((name, claim))
        else:
            out.append((name, None))
    return out


def claim_drivers(claim: dict[str, Any]) -> list[str]:
    """Drivers of the allocated devices of a claim (sorted, unique)."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return sorted({r.get("driver", "") for r in results if r.get("driver")})


def reserved_for(claim: dict[str, Any], pod_uid: str) -> bool:
    return any(r.get("uid") == pod_uid for r in (claim.get("status") or {}).get("reservedFor") or [])


@dataclass
class PreparedClaim:
    driver: str
    pod_claim: str
    ref: ClaimRef
    devices: list[PreparedDevice]

    def to_dict(self) -> dict[str, Any]:
        return {"driver": self.driver, "podClaim": self.pod_claim, "namespace": self.ref.namespace,
                "name": self.ref.name, "uid": self.ref.uid, "devices": [d.to_dict() for d in self.devices]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreparedClaim:
        return cls(d["driver"], d.get("podClaim", ""), ClaimRef(d["namespace"], d["name"], d["uid"]),
                   [PreparedDevice.from_dict(x) for x in d.get("devices") or []])


@dataclass
class PodState:
    """What survives an agent restart."""

    namespace: str = ""
    name: str = ""
    start_time: str = ""
    restarts: dict[str, int] = field(default_factory=dict)
    prepared: list[PreparedClaim] = field(default_factory=list)
    started: set[str] = field(default_factory=set)  # containers that ran at least once

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"namespace": self.namespace, "name": self.name, "startTime": self.start_time,
                                   "restarts": self.restarts, "started": sorted(self.started),
                                   "prepared": [p.to_dict() for p in self.prepared]}, indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> PodState:
        try:
            d = json.loads(path.read_text())
            return cls(d.get("namespace", ""), d.get("name", ""), d.get("startTime", ""),
                       {k: int(v) for k, v in (d.get("restarts") or {}).items()},
                       [PreparedClaim.from_dict(p) for p in d.get("prepared") or []],
                       {str(n) for n in d.get("started") or []})
        except (OSError, ValueError, KeyError, TypeError):
            return cls()


def merge_prepared(existing: list[PreparedClaim], new: list[PreparedClaim]) -> list[PreparedClaim]:
    """`existing` with `new` added (same driver and claim: the new entry wins)."""
    keyed = {(p.driver, p.ref.uid): p for p in existing}
    for p in new:
        keyed[(p.driver, p.ref.uid)] = p
    return list(keyed.values())


def unprepare_claims(rt: NodeRuntime, prepared: list[PreparedClaim]) -> list[str]:
    """NodeUnprepareResources per driver; returns errors ([] = all done)."""
    errors: list[str] = []
    by_driver: dict[str, list[PreparedClaim]] = {}
    for p in prepared:
        by_driver.setdefault(p.driver, []).append(p)
    for driver, claims in sorted(by_driver.items()):
        client = rt.plugins.client(driver)
        if client is None:
            errors.append(f"DRA driver {driver} is not registered on node {rt.node_name}")
            continue
        refs = list({c.ref.uid: c.ref for c in claims}.values())
        try:
            result = client.unprepare(refs, timeout=rt.options.prepare_timeout)
        except DRAError as exc:
            errors.append(str(exc))
            continue
        errors.extend(f"NodeUnprepareResources failed for claim {c.name}: {err}"
                      for c in refs if (err := result.get(c.uid)))
    return errors
