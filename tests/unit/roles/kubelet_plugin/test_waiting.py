"""Claims that wait: counted by kind and reason, aged from their first failed Prepare."""

from __future__ import annotations

from cdriver.roles.kubelet_plugin.waiting import WaitingClaims


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_claim_waits_from_its_first_failure_until_resolved() -> None:
    clock = Clock()
    waiting = WaitingClaims(clock)
    waiting.failed("a", "channel", "waiting_for_daemon")
    clock.now += 30
    waiting.failed("a", "channel", "channel_in_use")  # a new reason keeps the first time
    waiting.failed("b", "channel", "waiting_for_daemon")
    assert waiting.counts() == {("channel", "waiting_for_daemon"): 1, ("channel", "channel_in_use"): 1}
    assert waiting.oldest(("channel", "daemon")) == {"channel": 30.0, "daemon": 0.0}
    waiting.resolved("a")
    waiting.resolved("unknown-uid")
    assert waiting.oldest(("channel",)) == {"channel": 0.0}
    waiting.resolved("b")
    # pairs that waited before stay, at 0, so their series go back to 0 instead of vanishing
    assert waiting.counts() == {("channel", "waiting_for_daemon"): 0, ("channel", "channel_in_use"): 0}


def test_a_claim_that_waits_again_is_aged_from_its_new_failure() -> None:
    clock = Clock()
    waiting = WaitingClaims(clock)
    waiting.failed("a", "daemon", "domain_not_found")
    waiting.resolved("a")
    clock.now += 50
    waiting.failed("a", "daemon", "domain_not_found")
    clock.now += 5
    assert waiting.oldest(("daemon",)) == {"daemon": 5.0}
