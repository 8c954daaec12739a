"""Claims that wait: their latest Prepare failed retryably and nothing prepared or unprepared
them since. Tracked per claim UID inside the plugin; only counts and ages leave it (metrics)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class _Waiting:
    kind: str
    reason: str
    since: float  # when its first Prepare of this run of failures failed (clock seconds)


class WaitingClaims:
    """Which claims wait, why, and since when (thread-safe). ``clock``: monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._claims: dict[str, _Waiting] = {}
        #: every (kind, reason) that ever waited: their counts go back to 0, not away
        self._seen: set[tuple[str, str]] = set()

    def failed(self, uid: str, kind: str, reason: str) -> None:
        """A Prepare of ``uid`` failed retryably; a claim already waiting keeps its first time."""
        with self._lock:
            before = self._claims.get(uid)
            since = before.since if before is not None else self._clock()
            self._claims[uid] = _Waiting(kind, reason, since)
            self._seen.add((kind, reason))

    def resolved(self, uid: str) -> None:
        """``uid`` was prepared, failed for good, or unprepared: it waits no more."""
        with self._lock:
            self._claims.pop(uid, None)

    def counts(self) -> dict[tuple[str, str], int]:
        """Waiting claims by (kind, reason), with 0 for pairs that waited before."""
        with self._lock:
            out = dict.fromkeys(self._seen, 0)
            for claim in self._claims.values():
                out[(claim.kind, claim.reason)] += 1
        return out

    def oldest(self, kinds: tuple[str, ...]) -> dict[str, float]:
        """Seconds the oldest waiting claim of each kind has waited (0: none waits)."""
        now = self._clock()
        out = dict.fromkeys(kinds, 0.0)
        with self._lock:
            for claim in self._claims.values():
                out[claim.kind] = max(out.get(claim.kind, 0.0), now - claim.since)
        return out
