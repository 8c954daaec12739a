"""The integration tests: every test collected under this folder carries the `integration` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kinds import mark_kind

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test under this folder is integration."""
    mark_kind(item, HERE, pytest.mark.integration)

