"""The count of node-service calls in flight, which a stopping plugin waits for."""

from __future__ import annotations

import threading

from cdriver.dra.node_service import InFlight


def test_wait_idle_returns_when_the_last_call_ends_and_gives_up_at_its_timeout() -> None:
    inflight = InFlight()
    assert inflight.wait_idle(0) and inflight.calls == 0
    entered, release = threading.Event(), threading.Event()

    def call() -> None:
        with inflight.call():
            entered.set()
            release.wait(5)

    t = threading.Thread(target=call)
    t.start()
    entered.wait(5)
    assert inflight.calls == 1
    assert not inflight.wait_idle(0.05)
    threading.Timer(0.05, release.set).start()
    assert inflight.wait_idle(5)
    t.join(5)
    assert inflight.calls == 0


def test_a_call_that_raises_is_no_longer_counted() -> None:
    inflight = InFlight()
    try:
        with inflight.call():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert inflight.calls == 0
