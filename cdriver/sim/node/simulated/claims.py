"""A pod's ResourceClaims on a simulated node: which claims, which drivers, the pod's state
file, and unpreparing a pod's claims through the node's claim record."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.atomic import atomic_write
from cdriver.dra.client import DRAError
from cdriver.dra.node_service import ClaimRef
from cdriver.sim.node.simulated.call_log import UNREGISTERED, call_outcome, log_call
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
class PodState:
    """What survives an agent restart."""

    namespace: str = ""
    name: str = ""
    start_time: str = ""
    restarts: dict[str, int] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # containers that ran at least once
    pod_ip: str = ""

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"namespace": self.namespace, "name": self.name, "startTime": self.start_time,
                                       "restarts": self.restarts, "started": sorted(self.started),
                                       "podIP": self.pod_ip}, indent=1))

    @classmethod
    def load(cls, path: Path) -> PodState:
        try:
            d = json.loads(path.read_text())
            return cls(d.get("namespace", ""), d.get("name", ""), d.get("startTime", ""),
                       {k: int(v) for k, v in (d.get("restarts") or {}).items()},
                       {str(n) for n in d.get("started") or []}, str(d.get("podIP") or ""))
        except (OSError, ValueError, KeyError, TypeError):
            return cls()


def unprepare_pod_claims(rt: NodeRuntime, pod_uid: str) -> list[str]:
    """Release the pod's claims; NodeUnprepareResources for those it was the last user of.
    Returns errors ([] = all done; a retry repeats only what is left)."""
    errors: list[str] = []
    by_driver: dict[str, list[ClaimRef]] = {}
    last = rt.claims.release(pod_uid)
    for info in last:
        for driver in info.drivers:
            by_driver.setdefault(driver, []).append(info.ref)
    failed: set[str] = set()
    for driver, refs in sorted(by_driver.items()):
        client = rt.plugins.client(driver)
        uids = [r.uid for r in refs]
        if client is None:
            log_call(rt.log, "NodeUnprepareResources", driver, None, uids, UNREGISTERED)
            errors.append(f"DRA driver {driver} is not registered on node {rt.node_name}")
            failed.update(r.uid for r in refs)
            continue
        try:
            result = client.unprepare(refs, timeout=rt.options.prepare_timeout)
        except DRAError as exc:
            log_call(rt.log, "NodeUnprepareResources", driver, client.plugin.endpoint, uids, call_outcome(exc))
            errors.append(str(exc))
            failed.update(r.uid for r in refs)
            continue
        for ref in refs:
            if err := result.get(ref.uid):
                errors.append(f"NodeUnprepareResources failed for ResourceClaim {ref.name}: {err}")
                failed.add(ref.uid)
        log_call(rt.log, "NodeUnprepareResources", driver, client.plugin.endpoint, uids,
                 "error" if failed & set(uids) else "ok")
    rt.claims.forget([info.ref for info in last if info.ref.uid not in failed])
    return errors
