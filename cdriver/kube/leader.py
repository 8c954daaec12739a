"""Leader election on a coordination.k8s.io/v1 Lease.

A candidate takes the Lease when it is free (no holder) or expired: its record has not
changed for ``leaseDurationSeconds`` as measured on this process's own monotonic clock
(other machines' clocks are never trusted). The leader renews every ``retry_seconds`` and
steps down if it could not renew for ``renew_seconds``. `stop()` releases the Lease by
clearing the holder, so a successor takes over at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

log = logging.getLogger(__name__)

LEASES = RESOURCES["leases"]


def micro_time(now: dt.datetime | None = None) -> str:
    """A metav1.MicroTime string."""
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaign for Lease ``namespace/name`` as ``identity``."""

    def __init__(
        self, raw: RawClient, namespace: str, name: str, identity: str,
        lease_seconds: int = 15, renew_seconds: float = 10, retry_seconds: float = 2,
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        if not renew_seconds < lease_seconds:
            raise ValueError("renew_seconds must be shorter than lease_seconds")
        self.raw = raw
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = int(lease_seconds)
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observed_key: tuple | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._on_started: Callable[[], None] | None = None
        self._on_stopped: Callable[[], None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        return self._leader.wait(timeout)

    # -- lifecycle -------------------------------------------------------------------
    def run(
        self, on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> threading.Thread:
        """Start campaigning in a background thread and return it.

        ``on_started_leading`` runs in its own thread each time leadership is gained;
        ``on_stopped_leading`` runs in the election thread when it is lost or released.
        """
        if self._thread is not None:
            raise RuntimeError("LeaderElector.run() called twice")
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._thread = threading.Thread(
            target=self._loop, name=f"leader-{self.name}", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop campaigning; release the Lease if held."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- election --------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                held = self.try_acquire_or_renew()
                now = time.monotonic()
                if held:
                    self._last_renew = now
                    if not self._leader.is_set():
                        log.info("lease %s/%s: %s became leader", self.namespace, self.name,
                                 self.identity)
                        self._leader.set()
                        if self._on_started is not None:
                            threading.Thread(target=self._safe, args=(self._on_started,),
                                             name=f"leader-{self.name}-started",
                                             daemon=True).start()
                elif self._leader.is_set() and now - self._last_renew >= self.renew_seconds:
                    log.warning("lease %s/%s: %s could not renew, stepping down",
                                self.namespace, self.name, self.identity)
                    self._lose()
                self._stop.wait(self.retry_seconds)
        finally:
            if self._leader.is_set():
                self.release()
                self._lose()

    def _lose(self) -> None:
        self._leader.clear()
        if self._on_stopped is not None:
            self._safe(self._on_stopped)

    @staticmethod
    def _safe(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("leader election callback failed")

    def _spec(self, lease: dict | None, transitions: int, acquire: bool) -> dict:
        now = micro_time()
        spec = dict((lease or {}).get("spec") or {})
        spec.update({
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": now,
            "leaseTransitions": transitions,
        })
        if acquire or not spec.get("acquireTime"):
            spec["acquireTime"] = now
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One election round; True if this candidate holds the Lease afterwards."""
        try:
            lease = self.raw.get_or_none(LEASES, self.name, self.namespace)
            if lease is None:
                self.raw.create(LEASES, {
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, 0, True),
                }, self.namespace)
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            key = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            now = time.monotonic()
            if key != self._observed_key:
                self._observed_key = key
                self._observed_at = now
            transitions = int(spec.get("leaseTransitions") or 0)
            if holder == self.identity:
                lease["spec"] = self._spec(lease, transitions, False)
            else:
                duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
                if holder and now - self._observed_at < duration:
                    return False
                lease["spec"] = self._spec(lease, transitions + 1, True)
            self.raw.update(LEASES, lease, self.namespace)
            return True
        except ApiError as exc:
            if exc.conflict or exc.already_exists:
                log.debug("lease %s/%s: lost a race: %s", self.namespace, self.name, exc)
            else:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def release(self) -> bool:
        """Clear the holder if it is this candidate; True on success."""
        try:
            lease = self.raw.get(LEASES, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            spec = dict(spec)
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = micro_time()
            lease["spec"] = spec
            self.raw.update(LEASES, lease, self.namespace)
            log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
            return True
        except ApiError as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
