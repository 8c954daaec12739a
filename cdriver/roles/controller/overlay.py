"""Read-your-writes over informer caches.

After a write the API server's answer is remembered until the informer shows the same or a
newer resourceVersion, so a reconcile that runs before the watch event arrives neither
repeats a create nor writes with a stale resourceVersion. Deletions leave a tombstone until
the informer drops the object.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cdriver.api import constants
from cdriver.kube.objects import labels_of, meta_of, object_key

DEFAULT_TTL = 120.0


def _rv(obj: dict | None) -> int:
    try:
        return int(meta_of(obj).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def _uid_label(obj: dict | None) -> str:
    return str(labels_of(obj).get(
        constants.LABEL_COMPUTE_DOMAIN) or "")


@dataclass
class _Entry:
    obj: dict | None  # None: deleted by us
    rv: int
    at: float
    uid: str


class Overlay:
    """Objects this process wrote, per resource plural and ``ns/name`` key."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, _Entry]] = {}

    def _put(self, resource: str, key: str, entry: _Entry) -> None:
        self._entries.setdefault(resource, {})[key] = entry

    def _pop(self, resource: str, key: str) -> None:
        entries = self._entries.get(resource)
        if entries is not None:
            entries.pop(key, None)

    def record(self, resource: str, obj: dict) -> dict:
        """Remember the API server's answer to a write; returns it."""
        with self._lock:
            self._put(resource, object_key(obj),
                      _Entry(obj, _rv(obj), self._clock(), _uid_label(obj)))
        return obj

    def record_gone(self, resource: str, key: str, last: dict | None = None) -> None:
        """Remember that an object is gone (its last known resourceVersion, if any)."""
        with self._lock:
            self._put(resource, key, _Entry(None, _rv(last), self._clock(), _uid_label(last)))

    def resolve(self, resource: str, key: str, cached: dict | None) -> dict | None:
        """The newer of the informer's copy and ours (None: does not exist)."""
        with self._lock:
            entry = self._entries.get(resource, {}).get(key)
            if entry is None:
                return cached
            if self._clock() - entry.at > self._ttl:
                self._pop(resource, key)
                return cached
            if entry.obj is None:  # tombstone
                if cached is None or (entry.rv and _rv(cached) > entry.rv):
                    self._pop(resource, key)
                    return cached
                return None
            if cached is not None and _rv(cached) >= entry.rv:
                self._pop(resource, key)
                return cached
            return entry.obj

    def observe(self, resource: str, obj: dict) -> None:
        """An informer saw ``obj``: forget our copy once the informer has caught up."""
        key = object_key(obj)
        with self._lock:
            entry = self._entries.get(resource, {}).get(key)
            if entry is not None and entry.obj is not None and _rv(obj) >= entry.rv:
                self._pop(resource, key)

    def observe_deleted(self, resource: str, obj: dict) -> None:
        """An informer saw ``obj`` deleted: our copy (or tombstone) is obsolete."""
        with self._lock:
            self._pop(resource, object_key(obj))

    def merge(self, resource: str, cached: list[dict], uid: str | None = None) -> list[dict]:
        """``cached`` objects resolved against ours, plus ours not cached yet that carry the
        domain label ``uid`` (none when ``uid`` is None)."""
        seen = set()
        out = []
        for obj in cached:
            key = object_key(obj)
            seen.add(key)
            resolved = self.resolve(resource, key, obj)
            if resolved is not None:
                out.append(resolved)
        if uid is None:
            return out
        with self._lock:
            pending = [key for key, e in self._entries.get(resource, {}).items()
                       if e.uid == uid and e.obj is not None and key not in seen]
        for key in pending:
            resolved = self.resolve(resource, key, None)
            if resolved is not None:
                out.append(resolved)
        return out

    def __len__(self) -> int:
        with self._lock:
            return sum(len(e) for e in self._entries.values())
