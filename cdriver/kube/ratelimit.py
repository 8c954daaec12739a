"""Client-side rate limit of API requests: a token bucket with client-go's semantics.

A bucket holds up to ``burst`` tokens and gains ``qps`` tokens a second; every request takes
one. A request that finds the bucket empty reserves the next token and waits for it (it never
fails for want of one), so waiters are served in turn, ``1/qps`` seconds apart. The settings
read as client-go reads ``rest.Config.QPS``/``Burst`` (`limiter_for`): a qps of 0 means
client-go's default (5, burst 10), a negative qps no limit at all.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from cdriver.errors import CdriverError

#: client-go's ``rest.DefaultQPS`` and ``rest.DefaultBurst``: what a qps or burst of 0 means.
CLIENT_GO_DEFAULT_QPS = 5.0
CLIENT_GO_DEFAULT_BURST = 10
#: A wait longer than this is logged (client-go logs "Waited for ... due to client-side
#: throttling" past one second).
LONG_WAIT_SECONDS = 1.0

#: Flag and environment names every role shares (upstream's ``pkg/flags/kubeclient.go``).
QPS_FLAG, BURST_FLAG = "--kube-api-qps", "--kube-api-burst"
ENV_QPS, ENV_BURST = "KUBE_API_QPS", "KUBE_API_BURST"


class RateLimitSettingError(CdriverError):
    """``--kube-api-qps``/``--kube-api-burst`` cannot describe a limit; the message has the fix."""


class TokenBucket:
    """``burst`` tokens at most, refilled at ``qps`` a second; safe to share between threads.

    ``clock`` (monotonic seconds) and ``sleep`` are injectable for tests.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not (qps > 0 and math.isfinite(qps)):
            raise ValueError(f"qps {qps!r} must be a positive finite number")
        if burst < 1:
            raise ValueError(f"burst {burst!r} must be at least 1")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)  # starts full, as client-go's does
        self._last = clock()

    def reserve(self) -> float:
        """Take the next token; return the seconds until it is due (0: available now)."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._last = max(self._last, now)
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps) - 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self) -> float:
        """Block until a token is due; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay

    def describe(self) -> str:
        return f"{QPS_FLAG} {self.qps:g}, {BURST_FLAG} {self.burst}"


def limiter_for(qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> TokenBucket | None:
    """The limit ``--kube-api-qps``/``--kube-api-burst`` ask for; None means unlimited.

    As client-go builds it from ``rest.Config``: qps < 0 turns the limit off (burst is then
    unused); qps 0 is client-go's default 5 and burst 0 its default 10. As upstream's
    clientset does, a positive qps with a burst below 1 is refused.
    """
    if math.isnan(qps):
        raise RateLimitSettingError(f"{QPS_FLAG} nan is not a number; give requests per second "
                                    "(a negative value turns the limit off)")
    if qps < 0:
        return None
    if math.isinf(qps):
        raise RateLimitSettingError(f"{QPS_FLAG} {qps} is not a finite rate; give requests per "
                                    "second (a negative value turns the limit off)")
    if burst < 0 or (burst == 0 and qps > 0):
        raise RateLimitSettingError(
            f"{BURST_FLAG} {burst} must be at least 1 when {QPS_FLAG} is {qps:g}: it is how many "
            "requests may go at once before the rate applies (a negative "
            f"{QPS_FLAG} turns the limit off)")
    return TokenBucket(qps or CLIENT_GO_DEFAULT_QPS, burst or CLIENT_GO_DEFAULT_BURST,
                       clock=clock, sleep=sleep)
