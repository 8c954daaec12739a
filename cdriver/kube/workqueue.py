"""A keyed work queue: dedup per key, one worker per key at a time, retry with backoff.

A key added while queued is coalesced; a key added while a worker processes it is
processed once more afterwards. A handler exception requeues the key after an
exponential, jittered delay; success forgets the key's failure count.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable

from cdriver.kube.errors import ApiError

log = logging.getLogger(__name__)


class RequeueAfter(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raise from a handler to run the key again after ``seconds`` (not a failure)."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"requeue after {seconds}s")
        self.seconds = seconds


class WorkQueue:
    """Run ``handler(key)`` on ``workers`` threads for every key added."""

    def __init__(
        self, handler: Callable[[str], None], workers: int = 2, base_delay: float = 0.05,
        max_delay: float = 30.0, name: str = "workqueue", jitter: float = 0.2,
    ) -> None:
        self.handler = handler
        self.workers = max(1, workers)
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.name = name
        self.jitter = jitter
        self._cond = threading.Condition()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._delayed: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    # -- producers -------------------------------------------------------------------
    def add(self, key: str) -> None:
        """Queue ``key`` (no-op if already queued; re-run later if being processed)."""
        with self._cond:
            if self._stopping or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify_all()

    def add_after(self, key: str, seconds: float) -> None:
        """Queue ``key`` once ``seconds`` have passed."""
        if seconds <= 0:
            self.add(key)
            return
        with self._cond:
            if self._stopping:
                return
            heapq.heappush(self._delayed, (time.monotonic() + seconds, next(self._seq), key))
            self._cond.notify_all()

    def forget(self, key: str) -> None:
        """Reset the failure count (backoff) of ``key``."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def backoff_for(self, failures: int) -> float:
        """Delay before retry number ``failures`` (1-based), with jitter, capped."""
        delay = min(self.max_delay, self.base_delay * (2 ** max(0, failures - 1)))
        if self.jitter:
            delay *= random.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(self.max_delay, delay)

    # -- state -----------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys waiting to be processed (not counting delayed ones)."""
        with self._cond:
            return len(self._queue)

    def pending(self) -> int:
        """Keys queued, delayed or being processed."""
        with self._cond:
            return len(self._queue) + len(self._delayed) + len(self._processing)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued, delayed or processing; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._delayed or self._processing:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 1.0)
            return True

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"{self.name}-{i}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work; wait up to ``timeout`` for running handlers to finish."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # -- workers ---------------------------------------------------------------------
    def _promote_due(self, now: float) -> None:
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key not in self._dirty:
                self._dirty.add(key)
                if key not in self._processing:
                    self._queue.append(key)

    def _next(self) -> str | None:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                self._promote_due(now)
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                wait = self._delayed[0][0] - now if self._delayed else None
                self._cond.wait(wait)
            return None

    def _done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._stopping:
                self._queue.append(key)
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            try:
                self.handler(key)
            except RequeueAfter as req:
                self._done(key)
                self.add_after(key, req.seconds)
                continue
            except Exception as exc:
                with self._cond:
                    failures = self._failures.get(key, 0) + 1
                    self._failures[key] = failures
                delay = self.backoff_for(failures)
                if isinstance(exc, ApiError) and exc.conflict:
                    # another client wrote the object since it was read: ordinary, and retried
                    log.info("%s: %s changed while it was being written (attempt %d, retry in %.2fs): %s",
                             self.name, key, failures, delay, exc)
                else:
                    log.warning("%s: %s failed (attempt %d, retry in %.2fs): %s",
                                self.name, key, failures, delay, exc,
                                exc_info=log.isEnabledFor(logging.DEBUG))
                self._done(key)
                self.add_after(key, delay)
                continue
            self.forget(key)
            self._done(key)
