"""The client-side rate limit: a token bucket with client-go's settings, and RawClient's use
of it (every request takes a token, a watch one when it opens, none per event)."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator

import pytest

from cdriver.kube import ratelimit
from cdriver.kube.ratelimit import RateLimitSettingError, TokenBucket, limiter_for
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES


class FakeClock:
    """Monotonic time that moves only when told to, or when a waiter sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def bucket(qps: float, burst: int, clock: FakeClock) -> TokenBucket:
    return TokenBucket(qps, burst, clock=clock, sleep=clock.sleep)


def test_the_burst_passes_at_once_then_requests_are_spaced_by_one_over_qps() -> None:
    clock = FakeClock()
    limiter = bucket(10, 3, clock)
    assert [limiter.reserve() for _ in range(3)] == [0, 0, 0]
    # The bucket is empty: each further request reserves the next token in turn.
    assert [limiter.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])


def test_wait_sleeps_until_the_token_is_due_and_returns_the_wait() -> None:
    clock = FakeClock()
    limiter = bucket(5, 1, clock)
    assert limiter.wait() == 0 and clock.slept == []
    assert limiter.wait() == pytest.approx(0.2)
    assert limiter.wait() == pytest.approx(0.2)
    assert clock.slept == pytest.approx([0.2, 0.2])


def test_tokens_refill_at_qps_up_to_the_burst_only() -> None:
    clock = FakeClock()
    limiter = bucket(2, 4, clock)
    for _ in range(4):
        limiter.reserve()
    clock.now += 1.0  # two tokens back
    assert [limiter.reserve() for _ in range(3)] == pytest.approx([0, 0, 0.5])
    clock.now += 3600  # an idle hour refills the burst, never more
    assert [limiter.reserve() for _ in range(5)] == pytest.approx([0, 0, 0, 0, 0.5])


def test_a_clock_that_steps_back_grants_nothing() -> None:
    clock = FakeClock()
    limiter = bucket(1, 1, clock)
    limiter.reserve()
    clock.now -= 50
    assert limiter.reserve() == pytest.approx(1.0)


def test_concurrent_callers_each_get_their_own_slot() -> None:
    clock = FakeClock()
    limiter = TokenBucket(100, 10, clock=clock, sleep=lambda _s: None)
    delays: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(50):
            delay = limiter.reserve()
            with lock:
                delays.append(delay)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 400 tokens, the clock stopped: 10 from the burst, then one slot every 10 ms, none shared.
    assert sorted(delays) == pytest.approx([0.0] * 10 + [i / 100 for i in range(1, 391)])


@pytest.mark.parametrize(("qps", "burst", "expected"), [
    (50, 100, (50, 100)),
    (0.5, 1, (0.5, 1)),
    (0, 0, (ratelimit.CLIENT_GO_DEFAULT_QPS, ratelimit.CLIENT_GO_DEFAULT_BURST)),
    (0, 3, (ratelimit.CLIENT_GO_DEFAULT_QPS, 3)),
])
def test_settings_read_as_client_go_reads_qps_and_burst(qps: float, burst: int,
                                                        expected: tuple[float, int]) -> None:
    limiter = limiter_for(qps, burst)
    assert limiter is not None and (limiter.qps, limiter.burst) == expected


@pytest.mark.parametrize("burst", [0, 10, -1])
def test_a_negative_qps_turns_the_limit_off(burst: int) -> None:
    assert limiter_for(-1, burst) is None


@pytest.mark.parametrize(("qps", "burst", "message"), [
    (5, 0, "--kube-api-burst 0 must be at least 1 when --kube-api-qps is 5"),
    (5, -2, "--kube-api-burst -2 must be at least 1"),
    (0, -1, "--kube-api-burst -1 must be at least 1"),
    (math.inf, 10, "--kube-api-qps inf is not a finite rate"),
    (math.nan, 10, "--kube-api-qps nan is not a number"),
])
def test_impossible_settings_are_refused_naming_the_flag(qps: float, burst: int, message: str) -> None:
    with pytest.raises(RateLimitSettingError, match="^" + message.replace("(", r"\(")) as exc:
        limiter_for(qps, burst)
    assert "negative --kube-api-qps" in str(exc.value) or "negative value" in str(exc.value)


# -- RawClient -----------------------------------------------------------------------------

class FakeResponse:
    def __init__(self, data: bytes = b"{}", chunks: list[bytes] | None = None) -> None:
        self.status, self.reason, self.data = 200, "OK", data
        self.chunks = chunks or []

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        pass


class FakePool:
    def __init__(self, watch_events: int = 0) -> None:
        self.watch_events = watch_events
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str, url: str, **_kw: object) -> FakeResponse:
        self.sent.append((method, url))
        if "watch=true" in url:
            lines = [json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}}).encode() + b"\n"
                     for i in range(self.watch_events)]
            return FakeResponse(chunks=lines)
        return FakeResponse(b'{"kind": "PodList", "items": [], "metadata": {}}')


class FakeConnection:
    host = "https://api.test"

    def __init__(self, pool: FakePool) -> None:
        self.pool = pool

    def headers(self) -> dict[str, str]:
        return {}


def client(qps: float, burst: int, clock: FakeClock, watch_events: int = 0) -> tuple[RawClient, FakePool]:
    limiter = bucket(qps, burst, clock)
    pool = FakePool(watch_events)
    return RawClient(FakeConnection(pool), rate_limiter=limiter), pool


def test_every_request_of_the_raw_client_waits_for_its_token() -> None:
    clock = FakeClock()
    raw, pool = client(2, 2, clock)
    for _ in range(4):
        raw.list(RESOURCES["pods"], "default")
    assert len(pool.sent) == 4
    assert clock.slept == pytest.approx([0.5, 0.5])


def test_a_watch_takes_one_token_when_it_opens_and_none_per_event() -> None:
    clock = FakeClock()
    raw, pool = client(1, 1, clock, watch_events=50)
    with raw.watch(RESOURCES["pods"], "default") as stream:
        events = list(stream)
    assert len(events) == 50 and len(pool.sent) == 1 and clock.slept == []
    raw.get(RESOURCES["pods"], "p0", "default")  # the next request waits for the next token
    assert clock.slept == pytest.approx([1.0])


def test_without_a_limiter_nothing_waits() -> None:
    pool = FakePool()
    raw = RawClient(FakeConnection(pool))
    for _ in range(20):
        raw.list(RESOURCES["pods"], "default")
    assert raw.rate_limiter is None and len(pool.sent) == 20


def test_a_wait_over_a_second_is_logged_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    raw, _pool = client(0.5, 1, clock)
    with caplog.at_level(logging.DEBUG, logger="cdriver.kube.raw"):
        raw.list(RESOURCES["pods"], "default")
        raw.list(RESOURCES["pods"], "default")
    [record] = [r for r in caplog.records if "client-side throttling" in r.getMessage()]
    assert record.levelno == logging.DEBUG
    assert "waited 2.0s" in record.getMessage() and "GET /api/v1/namespaces/default/pods" in record.getMessage()
    assert "--kube-api-qps 0.5, --kube-api-burst 1" in record.getMessage()
