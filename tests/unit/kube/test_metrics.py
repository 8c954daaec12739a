"""Requests of a RawClient counted by verb and answer, and its waits in the rate limiter."""

from __future__ import annotations

import pytest
import urllib3

from cdriver.kube.metrics import ApiClientMetrics, request_verb
from cdriver.kube.ratelimit import TokenBucket
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

PODS = RESOURCES["pods"]


@pytest.mark.parametrize(("method", "query", "content_type", "collection", "verb"), [
    ("GET", None, None, False, "get"),
    ("GET", None, None, True, "list"),
    ("GET", {"watch": "true"}, None, True, "watch"),
    ("POST", None, None, False, "create"),
    ("PUT", None, None, False, "update"),
    ("PATCH", None, "application/merge-patch+json", False, "patch"),
    ("PATCH", None, "application/apply-patch+yaml", False, "apply"),
    ("DELETE", None, None, False, "delete"),
])
def test_request_verbs(method, query, content_type, collection, verb) -> None:
    assert request_verb(method, query, content_type, collection) == verb


class Reply:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.reason, self.data = status, "", data

    def release_conn(self) -> None:
        pass


class Pool:
    """Answers 200, then what `replies` says; None: no answer (connection refused)."""

    def __init__(self, replies: list[int | None]) -> None:
        self.replies = replies

    def request(self, method: str, url: str, **_kw: object) -> Reply:
        status = self.replies.pop(0) if self.replies else 200
        if status is None:
            raise urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
        body = b'{"kind":"Status","code":409,"reason":"Conflict"}' if status >= 300 else b'{"items":[]}'
        return Reply(status, body)


class Connection:
    host = "https://api.test"

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def headers(self) -> dict[str, str]:
        return {}


def test_requests_are_counted_by_verb_and_code_and_no_answer_as_error() -> None:
    metrics = ApiClientMetrics()
    raw = RawClient(Connection(Pool([200, 409, None])), metrics=metrics)
    raw.list(PODS, "ns")
    with pytest.raises(Exception, match="409|Conflict"):
        raw.update(PODS, {"metadata": {"name": "p", "namespace": "ns"}})
    with pytest.raises(Exception, match="refused"):
        raw.get(PODS, "p", "ns")
    assert metrics.requests() == {("list", "200"): 1, ("update", "409"): 1, ("get", "error"): 1}
    assert metrics.by_verb() == {"list": 1, "update": 1, "get": 1}


def test_waits_in_the_rate_limiter_are_counted_with_their_seconds() -> None:
    now, slept = [0.0], []
    bucket = TokenBucket(2, 1, clock=lambda: now[0], sleep=slept.append)
    metrics = ApiClientMetrics()
    raw = RawClient(Connection(Pool([])), rate_limiter=bucket, metrics=metrics)
    for _ in range(3):
        raw.get(PODS, "p", "ns")
    samples = {s.name: s.value for family in metrics.collect() for s in family.samples}
    assert samples["cdriver_api_client_rate_limited_requests_total"] == 2
    assert samples["cdriver_api_client_rate_limiter_wait_seconds_total"] == pytest.approx(sum(slept)) == 1.5
    assert samples["cdriver_api_client_requests_total"] == 3
