"""Leader election pure parts: Lease time format and settings checks."""

from __future__ import annotations

import datetime as dt

import pytest

from cdriver.kube.leader import LeaderElector, micro_time


def test_micro_time_format() -> None:
    stamp = micro_time(dt.datetime(2026, 1, 2, 3, 4, 5, 6789, tzinfo=dt.UTC))
    assert stamp == "2026-01-02T03:04:05.006789Z"


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(None, "ns", "lease", "")
    with pytest.raises(ValueError, match="renew_seconds"):
        LeaderElector(None, "ns", "lease", "me", lease_seconds=5, renew_seconds=5)
