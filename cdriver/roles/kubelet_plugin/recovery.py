"""Rebuild the record of prepared claims when the checkpoint was lost (deleted) or damaged.

Running pods use the claim CDI specs on this node; a restarted container needs its spec again,
so recovery deletes none of them. Each spec is matched with its ResourceClaim from the API
server: a claim allocated on this node by this driver gets its full record back (as Prepare
wrote it, so kubelet's Unprepare later undoes it normally); a spec no such claim explains is
kept too, with a minimal record (so kubelet's Unprepare by UID still removes it), and the
operator is told which ones those are. A damaged file is kept aside, never replaced silently.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdriver.cdi.model import qualified_name
from cdriver.cdi.reader import load_spec_file
from cdriver.cdi.writer import claim_spec_name, existing_spec_path, list_specs
from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.errors import CdriverError
from cdriver.kube.events import WARNING
from cdriver.kube.objects import meta_of
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin import claims as claim_plans
from cdriver.roles.kubelet_plugin.prepare import prepared_devices, record_devices
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

CLAIMS = RESOURCES["resourceclaims"]
EVENT_CHECKPOINT_REBUILT = "CheckpointRebuilt"


@dataclass
class Rebuilt:
    """Records rebuilt from the API and the specs no claim on this node explains."""

    records: dict[str, ClaimRecord] = field(default_factory=dict)
    #: ``namespace/name`` of the claims rebuilt from the API.
    from_api: list[str] = field(default_factory=list)
    #: Claim UIDs of specs kept with a minimal record.
    unexplained: list[str] = field(default_factory=list)


def spec_claim_uids(spec_names: list[str]) -> list[str]:
    """Claim UIDs of the claim specs among CDI spec names."""
    prefix = claim_spec_name("x")[:-1]
    return sorted(n[len(prefix):] for n in spec_names if n.startswith(prefix) and len(n) > len(prefix))


def rebuild(spec_ids: dict[str, list[str]], api_claims: list[dict], node_name: str, now: float) -> Rebuilt:
    """Records for the claims whose specs are on this node (pure).

    ``spec_ids``: claim UID → CDI device IDs its spec defines. A claim allocated here by this
    driver whose config still decodes gets the record Prepare wrote; any other spec a minimal
    PrepareCompleted record that names only its CDI IDs.
    """
    out = Rebuilt()
    by_uid = {str(meta_of(c).get("uid", "")): c for c in api_claims}
    for uid in sorted(spec_ids):
        claim = by_uid.get(uid)
        plan = None
        if claim is not None:
            try:
                plan = claim_plans.plan_claim(claim, node_name)
            except CdriverError as exc:
                log.warning("recovery: claim %s cannot be rebuilt (%s); its spec is kept", uid, exc)
        if plan is not None and plan.devices and all(d.pool in ("", node_name) for d in plan.devices):
            devices = prepared_devices(plan, True, node_name)
            out.records[uid] = ClaimRecord(
                uid=uid, name=plan.name, namespace=plan.namespace, state=ClaimState.PREPARE_COMPLETED,
                devices=record_devices(devices, plan), cdi_ids=[i for d in devices for i in d.cdi_device_ids],
                domain_id=plan.domain_id, kind=plan.kind, updated=now)
            out.from_api.append(f"{plan.namespace}/{plan.name}")
        else:
            out.records[uid] = ClaimRecord(uid=uid, state=ClaimState.PREPARE_COMPLETED,
                                           cdi_ids=list(spec_ids[uid]), updated=now)
            out.unexplained.append(uid)
    return out


def _spec_ids(cdi_root: Path, uid: str) -> list[str]:
    try:
        spec = load_spec_file(existing_spec_path(cdi_root, claim_spec_name(uid)))
    except (CdriverError, OSError, ValueError) as exc:
        log.warning("recovery: cannot read the CDI spec of claim %s (%s); it is kept", uid, exc)
        return []
    return [qualified_name(spec.kind, d.name) for d in spec.devices]


def recover(state: PluginState, what_happened: str) -> Rebuilt | None:
    """Rebuild the checkpoint from the API and the specs on disk; None when there is no claim
    spec to account for (nothing was lost). Raises CdriverError when the API cannot be read
    (the caller fails the start: recovery must not run on a partial view)."""
    cfg = state.config
    uids = spec_claim_uids(list_specs(cfg.cdi_root))
    if not uids:
        log.info("%s; no claim CDI specs on this node, nothing to rebuild", what_happened)
        return None
    api_claims = state.raw.list(CLAIMS)["items"]
    spec_ids = {uid: _spec_ids(cfg.cdi_root, uid) for uid in uids}
    with state.store.locked() as cp:
        known = set(cp.claims)
        rebuilt = rebuild({u: ids for u, ids in spec_ids.items() if u not in known}, api_claims,
                          cfg.node_name, time.time())
        cp.claims.update(rebuilt.records)
        state.refresh_prepared_gauge(cp.claims)
    message = recovery_message(what_happened, rebuilt, cfg.cdi_root)
    log.warning("%s", message)
    node = state.node_object()
    if node is not None:
        state.events.emit({**node, "apiVersion": "v1", "kind": "Node"}, WARNING, EVENT_CHECKPOINT_REBUILT, message)
    return rebuilt


def recovery_message(what_happened: str, rebuilt: Rebuilt, cdi_root: Path) -> str:
    """What the operator reads: what was lost, what was rebuilt, what is left to them."""
    parts = [f"{what_happened}. Rebuilt {len(rebuilt.from_api)} prepared claims from the API server"
             + (f" ({', '.join(rebuilt.from_api)})" if rebuilt.from_api else "")
             + "; every CDI spec of a claim was kept, so running containers can restart."]
    if rebuilt.unexplained:
        files = ", ".join(str(existing_spec_path(cdi_root, claim_spec_name(u))) for u in rebuilt.unexplained)
        parts.append(
            f"{len(rebuilt.unexplained)} claim specs belong to no ResourceClaim allocated on this node: {files}. "
            "They are removed when kubelet unprepares their claims; if no pod on this node uses them, "
            "delete them by hand.")
    else:
        parts.append("Nothing else to do.")
    return " ".join(parts)
