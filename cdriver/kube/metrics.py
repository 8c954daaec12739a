"""What a `cdriver.kube.raw.RawClient` sent and waited for, as Prometheus series every role shares.

A role creates one `ApiClientMetrics`, hands it to its client (``RawClient(..., metrics=m)``)
and registers it in its own registry (``registry.register(m)``): requests by verb and answer
(``cdriver_api_client_requests_total{verb,code}``) and the client-side rate limiter's waits.
The counts live here, not in prometheus_client's global registry, so several clients (tests,
one process per role) never share them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, Metric

REQUESTS = "cdriver_api_client_requests"
RATE_LIMITER_WAIT = "cdriver_api_client_rate_limiter_wait_seconds"
RATE_LIMITED = "cdriver_api_client_rate_limited_requests"

#: The verbs a request is counted under (Kubernetes' request verbs, ``apply`` for server-side apply).
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "apply")
#: The code of a request that got no HTTP answer (connection refused, timeout, ...).
CODE_ERROR = "error"

_METHOD_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


def request_verb(method: str, query: Mapping[str, str] | None = None, content_type: str | None = None,
                 collection: bool = False) -> str:
    """The verb of one request: ``watch`` for a watch, ``list`` for a GET of a collection
    (``collection``), ``apply`` for a server-side apply patch, else the method's verb."""
    method = method.upper()
    if method == "GET":
        if (query or {}).get("watch") == "true":
            return "watch"
        return "list" if collection else "get"
    if method == "PATCH" and content_type == _APPLY_CONTENT_TYPE:
        return "apply"
    return _METHOD_VERBS.get(method, method.lower())


class ApiClientMetrics:
    """Counts of one client's requests; a Prometheus collector (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = {}
        self._waited_seconds = 0.0
        self._limited = 0

    # -- recording (called by RawClient) ---------------------------------------------------
    def request(self, verb: str, code: int | None) -> None:
        """One request sent: ``code`` is the HTTP status, None when no answer came."""
        key = (verb, CODE_ERROR if code is None else str(code))
        with self._lock:
            self._requests[key] = self._requests.get(key, 0) + 1

    def rate_limited(self, waited_seconds: float) -> None:
        """One request waited ``waited_seconds`` in the client-side rate limiter."""
        if waited_seconds <= 0:
            return
        with self._lock:
            self._limited += 1
            self._waited_seconds += waited_seconds

    # -- reading -------------------------------------------------------------------------
    def requests(self) -> dict[tuple[str, str], int]:
        """Requests so far by (verb, code)."""
        with self._lock:
            return dict(self._requests)

    def by_verb(self) -> dict[str, int]:
        """Requests so far by verb, whatever the answer."""
        out: dict[str, int] = {}
        for (verb, _code), count in self.requests().items():
            out[verb] = out.get(verb, 0) + count
        return out

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            requests = dict(self._requests)
            waited, limited = self._waited_seconds, self._limited
        family = CounterMetricFamily(REQUESTS, "Requests sent to the API server by verb and HTTP status "
                                     f"({CODE_ERROR!r}: no answer)", labels=["verb", "code"])
        for (verb, code), count in sorted(requests.items()):
            family.add_metric([verb, code], count)
        yield family
        yield CounterMetricFamily(RATE_LIMITER_WAIT, "Seconds requests waited in the client-side rate limiter",
                                  value=waited)
        yield CounterMetricFamily(RATE_LIMITED, "Requests that had to wait in the client-side rate limiter",
                                  value=limited)
