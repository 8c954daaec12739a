"""Writes claims' `status.devices` off the request path (the status subresource).

A Prepare never waits for these writes: reports are queued, the latest per claim wins, and one
thread writes them; only this driver's entries of a claim change (the admission policy holds the
plugin to that). A claim deleted meanwhile is skipped; a refusal (RBAC, admission, validation) is logged
once per reason and never fails a Prepare; a server that does not serve the field (Kubernetes
before 1.33 by default) accepts the write and drops it, so nothing fails there either.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections import OrderedDict

from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.device_status import ClaimStatusReport, merged_devices, status_entries

log = logging.getLogger(__name__)

CLAIMS = RESOURCES["resourceclaims"]
#: retries of a write that failed for a transient reason (network, 5xx, 429, conflict)
RETRIES = 3
RETRY_DELAY_S = 1.0


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClaimStatusWriter:
    """Queues `ClaimStatusReport`s and applies them in the background."""

    def __init__(self, raw: RawClient, node_name: str) -> None:
        self.raw = raw
        self.node_name = node_name
        self._pending: OrderedDict[str, ClaimStatusReport] = OrderedDict()
        self._cond = threading.Condition()
        self._stop = False
        self._refused: set[str] = set()
        self._busy = False
        #: writes applied and given up (for tests and diagnostics)
        self.applied = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="claim-status", daemon=True)
        self._thread.start()

    def report(self, report: ClaimStatusReport) -> None:
        """Queue `report` (replacing one not yet written for the same claim)."""
        if not report.devices:
            return
        with self._cond:
            self._pending.pop(report.uid, None)
            self._pending[report.uid] = report
            self._cond.notify()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued report was written (or given up); False at the timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stop)
                if self._stop:
                    return
                _, report = self._pending.popitem(last=False)
                self._busy = True
            try:
                self._write(report)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, report: ClaimStatusReport) -> None:
        for attempt in range(RETRIES + 1):
            try:
                if self._write_once(report):
                    self.applied += 1
                return
            except ApiError as exc:
                if exc.not_found:
                    return  # the claim is gone: nothing to report on
                if exc.status in (400, 401, 403, 422) or attempt == RETRIES:
                    self._refused_once(report, exc)
                    return
            except Exception as exc:  # noqa: BLE001 - a status write never takes the plugin down
                if attempt == RETRIES:
                    self._refused_once(report, exc)
                    return
            with self._cond:
                if self._cond.wait_for(lambda: self._stop, RETRY_DELAY_S * attempt):
                    return

    def _write_once(self, report: ClaimStatusReport) -> bool:
        """Read the claim, put this driver's entries for `report` in its status; False when there was
        nothing to write (another claim of that name, deallocated, or the entries already say it).

        A read-modify-write of the status subresource (conflicts are retried on a fresh read), not
        server-side apply: the API server refuses an apply to the status of a claim whose allocation
        carries opaque parameters, as every claim of a ComputeDomain's template does ("status.allocation:
        Invalid value: null: field cannot be modified once set", Kubernetes 1.37).
        """
        claim = self.raw.get(CLAIMS, report.name, report.namespace)
        status = claim.get("status") or {}
        if claim["metadata"].get("uid") != report.uid or not status.get("allocation"):
            return False
        current = list(status.get("devices") or [])
        devices = merged_devices(current, status_entries(report, now_rfc3339(), current))
        if devices == current:
            return False
        claim["status"] = {**status, "devices": devices}
        self.raw.update_status(CLAIMS, claim, report.namespace)
        log.debug("claim %s/%s: status.devices %s (%s)", report.namespace, report.name, report.reason,
                  "Ready" if report.ready else "not ready")
        return True

    def _refused_once(self, report: ClaimStatusReport, exc: Exception) -> None:
        self.failed += 1
        key = getattr(exc, "reason", "") or type(exc).__name__
        level = logging.DEBUG if key in self._refused else logging.WARNING
        self._refused.add(key)
        log.log(level, "claim %s/%s: could not write status.devices (%s); the claim's preparation is not "
                "affected: %s", report.namespace, report.name, key, exc)
