"""NodeUnprepareResources for one claim: undo what Prepare did, then forget the claim.

An unknown UID is a no-op, and so is a claim already aborted. For a channel claim in
driver-managed mode the node label is removed only while holding the checkpoint lock and
only if no other claim of the same ComputeDomain remains (a concurrent Prepare records itself first, so it is seen). The
checkpoint entry goes last, so a plugin killed half-way finishes the job on the retry. A claim
whose Prepare had not finished is kept as PrepareAborted (as upstream's plugin does) so that a
late Prepare retry sees it was unprepared; the sweeper forgets it after a while.
"""

from __future__ import annotations

import logging
import time

from cdriver.cdi.writer import claim_spec_name, remove_spec
from cdriver.checkpoint import ClaimState
from cdriver.dra.node_service import ClaimRef
from cdriver.errors import CdriverError
from cdriver.roles.kubelet_plugin.claims import KIND_CHANNEL
from cdriver.roles.kubelet_plugin.errors import KIND_UNKNOWN, ClaimSeen, as_claim_error
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)


class Unpreparer:
    """Unprepares claims on this node (thread-safe)."""

    def __init__(self, state: PluginState) -> None:
        self.state = state
        self.labeler = state.labeler

    def unprepare(self, ref: ClaimRef) -> bool:
        """Undo ``ref``; False if it was unknown (nothing to do). Raises a retryable ClaimError."""
        return self.unprepare_kind(ref) is not None

    def unprepare_kind(self, ref: ClaimRef) -> str | None:
        """Undo ``ref``; the kind of the claim undone ("" for a claim without devices), None if
        it was unknown (nothing to do). Raises a retryable ClaimError whose ``claim_kind`` says
        the kind once the claim's record was read."""
        self.state.metrics.waiting.resolved(ref.uid)  # kubelet (or the sweeper) gave it up: no more waiting
        seen = ClaimSeen()
        try:
            return self._unprepare(ref, seen)
        except CdriverError as exc:
            raise as_claim_error(ref, exc, seen) from None

    def _unprepare(self, ref: ClaimRef, seen: ClaimSeen) -> str | None:
        store = self.state.store
        if ref.uid not in store.read().claims:
            log.debug("unprepare %s: not prepared here, nothing to do", ref)
            return None
        with store.locked() as cp:
            rec = cp.claims.get(ref.uid)
            if rec is None or rec.state == ClaimState.PREPARE_ABORTED:
                return None
            seen.kind = rec.kind or KIND_UNKNOWN
            remove_spec(self.state.config.cdi_root, claim_spec_name(ref.uid))
            if rec.kind == KIND_CHANNEL and rec.domain_id and not self.state.config.host_managed:
                others = [
                    u
                    for u, r in cp.claims.items()
                    if u != ref.uid and r.domain_id == rec.domain_id and r.kind == KIND_CHANNEL
                ]
                if not others:
                    self.labeler.remove_domain(rec.domain_id)
                else:
                    log.info(
                        "unprepare %s: keeping node label, claims %s still use ComputeDomain %s",
                        ref,
                        ", ".join(others),
                        rec.domain_id,
                    )
            if rec.state == ClaimState.PREPARE_STARTED:
                rec.state, rec.devices, rec.cdi_ids = ClaimState.PREPARE_ABORTED, [], []
                rec.updated = time.time()
            else:
                del cp.claims[ref.uid]
            self.state.refresh_prepared_gauge(cp.claims)
        log.info("unprepared claim %s (%s, ComputeDomain %s)", ref, rec.kind or "no devices", rec.domain_id)
        if rec.domain_id and self.state.domains.lookup(rec.domain_id) == (True, None):
            self.state.wake_sweeper()  # its domain is gone: clean up what it left now
        return rec.kind
