"""Sweeps: claims stuck in PrepareStarted whose ResourceClaim is gone, PrepareAborted entries
past their time to live, and per-domain directories of ComputeDomains that no longer exist.

A sweep runs at start, every cleanup interval, and at once when a ComputeDomain is deleted or
a claim of a deleted domain is unprepared. While records or directories of deleted domains
remain, it comes back every few seconds (not only at the next interval), so a domain deleted
while its daemons and workloads start leaves nothing behind for long."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdriver.checkpoint import ClaimState
from cdriver.dra.node_service import ClaimRef
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import meta_of
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.claims import KIND_CHANNEL
from cdriver.roles.kubelet_plugin.errors import ClaimError
from cdriver.roles.kubelet_plugin.periodic import Periodic
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

CLAIMS = RESOURCES["resourceclaims"]
#: How long a PrepareAborted entry is kept: twice kubelet's 45 s call timeout, so every
#: Prepare retry of the aborted claim that was already under way has ended.
ABORTED_ENTRY_TTL = 90.0
#: Pause between sweeps while something of a deleted ComputeDomain is left on the node.
FOLLOW_UP_SECONDS = 5.0


@dataclass
class SweepReport:
    """What one sweep removed."""

    claims: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    domain_dirs: list[str] = field(default_factory=list)
    orphan_specs: list[str] = field(default_factory=list)
    #: Something of a deleted domain is still here: sweep again soon.
    follow_up: bool = False


def stale_domain_dirs(dir_names: list[str], known_domains: set[str], used_domains: set[str]) -> list[str]:
    """Per-domain directories whose ComputeDomain is gone and that no claim here still uses."""
    return sorted(n for n in dir_names if n not in known_domains and n not in used_domains)


def domains_in_use(claims: dict) -> set[str]:
    """Domains of the claims that still hold something (an aborted claim holds nothing)."""
    return {rec.domain_id for rec in claims.values() if rec.state != ClaimState.PREPARE_ABORTED}


def leftovers_of_deleted_domains(claims: dict, dir_names: list[str], known_domains: set[str]) -> bool:
    """True while a not completely prepared claim or a directory of a deleted domain remains:
    the sweep that removes them must come back soon."""
    if any(n not in known_domains for n in dir_names):
        return True
    return any(rec.state != ClaimState.PREPARE_COMPLETED and rec.domain_id not in known_domains
               for rec in claims.values())


def expired_aborted(claims: dict, now: float, ttl: float, known_domains: set[str] | None = None) -> list[str]:
    """UIDs of PrepareAborted records older than ``ttl`` seconds, or of a domain that no longer
    exists (a late Prepare retry of such a claim fails anyway), sorted."""
    return sorted(uid for uid, rec in claims.items()
                  if rec.state == ClaimState.PREPARE_ABORTED
                  and (now - rec.updated >= ttl or (known_domains is not None and rec.domain_id not in known_domains)))


class Sweeper:
    """Runs `sweep` at start and every ``interval`` seconds in a thread."""

    def __init__(self, state: PluginState, unprepare: Callable[[ClaimRef], bool], interval: float) -> None:
        self.state = state
        self.unprepare = unprepare
        self.interval = interval
        self._periodic = Periodic("cleanup sweep", self._run, interval, at_start=True)
        self.start, self.stop, self.wake = self._periodic.start, self._periodic.stop, self._periodic.wake

    def _run(self) -> float:
        """One sweep; the delay until the next one."""
        report = self.sweep()
        return min(self.interval, FOLLOW_UP_SECONDS) if report.follow_up else self.interval

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
        claims = self.state.store.read().claims
        known = self.state.domains.existing(rec.domain_id for rec in claims.values()
                                            if rec.state == ClaimState.PREPARE_ABORTED)
        if not expired_aborted(claims, now, ABORTED_ENTRY_TTL, known):
            return
        with self.state.store.locked() as cp:
            for uid in expired_aborted(cp.claims, now, ABORTED_ENTRY_TTL, known):
                del cp.claims[uid]
                report.expired.append(uid)
        if report.expired:
            log.info("cleanup: forgot PrepareAborted claims %s", ", ".join(report.expired))

    def _sweep_domain_dirs(self, report: SweepReport) -> None:
        domains = self.state.config.domains_dir
        try:
            names = [p.name for p in domains.iterdir() if p.is_dir() and not p.is_symlink()]
        except FileNotFoundError:
            names = []
        claims = self.state.store.read().claims
        watches = self.state.domains
        for rec in claims.values():
            if rec.kind == KIND_CHANNEL:
                watches.hint(rec.domain_id, rec.namespace)
        found = watches.existing([*names, *(rec.domain_id for rec in claims.values())])
        if found is None:  # the API did not answer: nothing is taken as deleted
            return
        known = found
        watches.retain(domains_in_use(claims))
        for name in stale_domain_dirs(names, known, domains_in_use(claims)):
            try:
                shutil.rmtree(domains / name)
                report.domain_dirs.append(name)
            except OSError as exc:
                log.warning("cleanup: cannot remove %s: %s", domains / name, exc)
        left = [n for n in names if n not in report.domain_dirs]
        report.follow_up = leftovers_of_deleted_domains(claims, left, known)
