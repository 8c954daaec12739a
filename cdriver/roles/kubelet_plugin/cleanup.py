"""Periodic sweeps: claims stuck in PrepareStarted whose ResourceClaim is gone, PrepareAborted
entries past their time to live, and per-domain directories of ComputeDomains that no longer
exist."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdriver.checkpoint import ClaimState
from cdriver.dra.node_service import ClaimRef
from cdriver.kube.objects import meta_of, uid_of
from cdriver.kube.raw import RESOURCES, ApiError
from cdriver.roles.kubelet_plugin.errors import ClaimError
from cdriver.roles.kubelet_plugin.periodic import Periodic
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

CLAIMS = RESOURCES["resourceclaims"]
#: How long a PrepareAborted entry is kept: twice kubelet's 45 s call timeout, so every
#: Prepare retry of the aborted claim that was already under way has ended.
ABORTED_ENTRY_TTL = 90.0


@dataclass
class SweepReport:
    """What one sweep removed."""

    claims: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    domain_dirs: list[str] = field(default_factory=list)
    orphan_specs: list[str] = field(default_factory=list)


def stale_domain_dirs(dir_names: list[str], known_domains: set[str], used_domains: set[str]) -> list[str]:
    """Per-domain directories whose ComputeDomain is gone and that no claim here still uses."""
    return sorted(n for n in dir_names if n not in known_domains and n not in used_domains)


def expired_aborted(claims: dict, now: float, ttl: float) -> list[str]:
    """UIDs of PrepareAborted records older than ``ttl`` seconds, sorted."""
    return sorted(uid for uid, rec in claims.items()
                  if rec.state == ClaimState.PREPARE_ABORTED and now - rec.updated >= ttl)


class Sweeper:
    """Runs `sweep` at start and every ``interval`` seconds in a thread."""

    def __init__(self, state: PluginState, unprepare: Callable[[ClaimRef], bool], interval: float) -> None:
        self.state = state
        self.unprepare = unprepare
        self._periodic = Periodic("cleanup sweep", self.sweep, interval, at_start=True)
        self.start, self.stop = self._periodic.start, self._periodic.stop

    def sweep(self) -> SweepReport:
        report = SweepReport()
        self._sweep_claims(report)
        self._expire_aborted(report)
        self._sweep_domain_dirs(report)
        if report.claims or report.domain_dirs:
            log.info(
                "cleanup: unprepared stale claims %s; removed domain dirs %s",
                report.claims or "none",
                report.domain_dirs or "none",
            )
        return report

    def _sweep_claims(self, report: SweepReport) -> None:
        for uid, rec in self.state.store.read().claims.items():
            if rec.state != ClaimState.PREPARE_STARTED or not rec.name:
                continue
            try:
                claim = self.state.raw.get(CLAIMS, rec.name, rec.namespace)
                if meta_of(claim).get("uid") == uid:
                    continue  # still wanted: kubelet will retry Prepare
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("cleanup: cannot check claim %s/%s: %s", rec.namespace, rec.name, exc)
                    continue
            ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=uid)
            log.info("cleanup: partially prepared claim %s is stale (its ResourceClaim is gone or "
                     "was recreated); unpreparing it", ref)
            try:
                if self.unprepare(ref):
                    report.claims.append(str(ref))
                    self._forget_aborted(uid)  # the claim is gone: no Prepare retry can come
            except ClaimError as exc:
                log.warning("cleanup: cannot unprepare stale claim %s: %s", ref, exc)

    def _forget_aborted(self, uid: str) -> None:
        with self.state.store.locked() as cp:
            rec = cp.claims.get(uid)
            if rec is not None and rec.state == ClaimState.PREPARE_ABORTED:
                del cp.claims[uid]

    def _expire_aborted(self, report: SweepReport, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if not expired_aborted(self.state.store.read().claims, now, ABORTED_ENTRY_TTL):
            return
        with self.state.store.locked() as cp:
            for uid in expired_aborted(cp.claims, now, ABORTED_ENTRY_TTL):
                del cp.claims[uid]
                report.expired.append(uid)
        if report.expired:
            log.info("cleanup: forgot PrepareAborted claims %s", ", ".join(report.expired))

    def _sweep_domain_dirs(self, report: SweepReport) -> None:
        domains = self.state.config.domains_dir
        if not self.state.cds.synced:
            return
        try:
            names = [p.name for p in domains.iterdir() if p.is_dir() and not p.is_symlink()]
        except FileNotFoundError:
            return
        known = {uid_of(cd) for cd in self.state.cds.objects()}
        used = {rec.domain_id for rec in self.state.store.read().claims.values()}
        for name in stale_domain_dirs(names, known, used):
            try:
                shutil.rmtree(domains / name)
                report.domain_dirs.append(name)
            except OSError as exc:
                log.warning("cleanup: cannot remove %s: %s", domains / name, exc)
