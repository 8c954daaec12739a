"""Tests of the upstream side (its driver, its checkpoint reader) need upstream's source
tarball, an input this repository cannot carry. Without it they skip, saying why, unless
CDRIVER_REQUIRE_UPSTREAM=1 (CI sets it): then a missing tarball fails the test."""

from __future__ import annotations

import os

import pytest

REQUIRE_VARIABLE = "CDRIVER_REQUIRE_UPSTREAM"


def upstream_required() -> bool:
    return os.environ.get(REQUIRE_VARIABLE, "") == "1"


def skip_without_upstream(reason: str) -> None:
    """Skip (or, where the upstream side is required, fail) a test whose upstream input is missing."""
    if upstream_required():
        pytest.fail(f"{reason} ({REQUIRE_VARIABLE}=1: the upstream side must run here)", pytrace=False)
    pytest.skip(reason)
