"""The ComputeDomains this node's claims refer to, each watched on its own.

A plugin needs a domain only while a claim of it is prepared, waiting or being cleaned up here:
one node of a 1,000-domain cluster holds one or two. Watching every domain of the cluster would
send each plugin every domain's status writes (the fan-out `docs/scale.md` measures), so each
domain is watched alone, from the first time it is asked for:

- by the label the controller puts on every domain it reconciles
  (``resource.nvidia.com/computeDomainUID=<uid>``): one server-filtered list and watch;
- else, for a domain no cdriver controller labelled yet (created a moment ago, or under
  upstream's controller during a switch), by name in the claim's namespace, found by one list of
  that namespace's domains.

A domain found nowhere is remembered as absent for a few seconds, then asked for again.
Watches of domains nothing asked for recently and no claim here holds are stopped (`retain`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAINS
from cdriver.kube.errors import ApiError
from cdriver.kube.informer import Handler, Informer, ListWatchClient
from cdriver.kube.objects import meta_of, uid_of

log = logging.getLogger(__name__)

#: How long a first list of a new watch may take before the lookup counts as failed.
SYNC_TIMEOUT_S = 10.0
#: How long a domain found nowhere is taken as absent before it is looked for again.
ABSENT_RECHECK_S = 2.0
#: How long a watch lives after its domain was last asked for, when no claim here holds it.
RETAIN_S = 300.0


def uid_selector(uid: str) -> str:
    """The label selector of one domain's watch."""
    return f"{constants.LABEL_DOMAIN_UID}={uid}"


def find_in_namespace(items: Iterable[dict], uid: str) -> dict | None:
    """The domain with `uid` among a namespace's listed domains."""
    return next((cd for cd in items if uid_of(cd) == uid), None)


@dataclass
class _Watch:
    informer: Informer
    used: float = field(default_factory=time.monotonic)

    def current(self, uid: str) -> dict | None:
        return next((cd for cd in self.informer.objects() if uid_of(cd) == uid), None)


class DomainWatches:
    """Per-domain watches of ComputeDomains, started on demand; thread-safe."""

    def __init__(self, raw: ListWatchClient, make_informer: Callable[..., Informer] = Informer,
                 sync_timeout: float = SYNC_TIMEOUT_S) -> None:
        self.raw = raw
        self.make_informer = make_informer
        self.sync_timeout = sync_timeout
        self._lock = threading.Lock()
        self._resolving: dict[str, threading.Lock] = {}
        self._watches: dict[str, _Watch] = {}
        self._absent: dict[str, float] = {}
        self._namespaces: dict[str, str] = {}
        self._handlers: list[tuple[Handler | None, Handler | None, Handler | None]] = []
        self._stopped = False

    # -- reads -----------------------------------------------------------------------
    def hint(self, uid: str, namespace: str) -> None:
        """Remember where a domain's claims live (where an unlabelled domain is looked for)."""
        if uid and namespace:
            with self._lock:
                self._namespaces.setdefault(uid, namespace)

    def get(self, uid: str) -> dict | None:
        """The domain with `uid` as its watch has it, starting the watch on first use; None when
        it does not exist (or could not be looked up: the next call tries again)."""
        return self.lookup(uid)[1]

    def lookup(self, uid: str) -> tuple[bool, dict | None]:
        """(known, domain): known is False when the API could not answer."""
        if not uid:
            return True, None
        with self._lock:
            watch = self._watches.get(uid)
            if watch is not None:
                watch.used = time.monotonic()
                return True, watch.current(uid)
            absent_at = self._absent.get(uid)
            if absent_at is not None and time.monotonic() - absent_at < ABSENT_RECHECK_S:
                return True, None
            gate = self._resolving.setdefault(uid, threading.Lock())
        with gate:  # one lookup per domain at a time; the others wait for its watch
            with self._lock:
                watch = self._watches.get(uid)
            if watch is not None:
                return True, watch.current(uid)
            return self._resolve(uid)

    def existing(self, uids: Iterable[str]) -> set[str] | None:
        """Which of `uids` exist; None if any could not be looked up."""
        out = set()
        for uid in set(uids):
            known, cd = self.lookup(uid)
            if not known:
                return None
            if cd is not None:
                out.add(uid)
        return out

    # -- handlers and lifecycle ------------------------------------------------------
    def add_handler(self, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> None:
        """Handlers for every watch, those running and those started later."""
        with self._lock:
            self._handlers.append((on_add, on_update, on_delete))
            watches = list(self._watches.values())
        for watch in watches:
            watch.informer.add_handler(on_add=on_add, on_update=on_update, on_delete=on_delete)

    def watched(self) -> list[str]:
        with self._lock:
            return sorted(self._watches)

    def retain(self, held: Iterable[str], now: float | None = None) -> list[str]:
        """Stop the watches of domains no claim here holds (`held`) and nothing asked for in
        RETAIN_S; the stopped domains' UIDs."""
        keep, now = set(held), time.monotonic() if now is None else now
        with self._lock:
            stale = [uid for uid, w in self._watches.items() if uid not in keep and now - w.used >= RETAIN_S]
            stopped = [self._watches.pop(uid) for uid in stale]
            for uid in stale:
                self._namespaces.pop(uid, None)
        for watch in stopped:
            watch.informer.stop()
        if stale:
            log.debug("stopped the watches of ComputeDomains %s (no claim here holds them)", ", ".join(stale))
        return stale

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            watches = list(self._watches.values())
            self._watches.clear()
        for watch in watches:
            watch.informer.stop()

    # -- lookups ---------------------------------------------------------------------
    def _start(self, **selectors: str) -> Informer | None:
        informer = self.make_informer(self.raw, COMPUTE_DOMAINS, **selectors)
        informer.start()
        if informer.wait_synced(self.sync_timeout):
            return informer
        informer.stop()
        return None

    def _resolve(self, uid: str) -> tuple[bool, dict | None]:
        informer = self._start(label_selector=uid_selector(uid))
        if informer is None:
            log.warning("could not list ComputeDomain %s within %.0fs; looking again at its next use",
                        uid, self.sync_timeout)
            return False, None
        if not any(uid_of(cd) == uid for cd in informer.objects()):
            informer.stop()
            informer = None
            with self._lock:
                namespace = self._namespaces.get(uid, "")
            if namespace:
                try:
                    listed = self.raw.list(COMPUTE_DOMAINS, namespace)
                except ApiError as exc:
                    log.warning("could not list the ComputeDomains of namespace %s: %s", namespace, exc)
                    return False, None
                cd = find_in_namespace(listed.get("items") or [], uid)
                if cd is not None:
                    name = str(meta_of(cd).get("name", ""))
                    log.info("ComputeDomain %s/%s (%s) has no %s label yet (no cdriver controller reconciled "
                             "it): watching it by name", namespace, name, uid, constants.LABEL_DOMAIN_UID)
                    informer = self._start(namespace=namespace, field_selector=f"metadata.name={name}")
                    if informer is None:
                        return False, None
        if informer is None:
            with self._lock:
                self._absent[uid] = time.monotonic()
            return True, None
        with self._lock:
            if self._stopped:
                informer.stop()
                return True, None
            self._absent.pop(uid, None)
            watch = self._watches[uid] = _Watch(informer)
            handlers = list(self._handlers)
        for on_add, on_update, on_delete in handlers:
            informer.add_handler(on_add=on_add, on_update=on_update, on_delete=on_delete)
        return True, watch.current(uid)
