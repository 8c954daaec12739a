"""Waiting in tests: poll a condition until it holds, fail naming what was awaited.

The argument order is the one of `cdriver.sim.world.scenario.wait_for` (what, probe, timeout,
interval); this one fails the test instead of raising, and takes a callable `what` too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(what: str | Callable[[], str], fn: Callable[[], T | None], timeout: float = 20.0,
             interval: float = 0.05) -> T:
    """Poll `fn` until it returns a truthy value and return it; at the deadline fail naming
    `what` (text, or a callable rendering it then, e.g. with a log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {text}")
        time.sleep(interval)
