"""The packaging tests (the packaged executable and images): every test collected under this folder
is of kind `e2e`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kinds import mark_kind

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test under this folder is e2e: it builds and runs the packaged product."""
    mark_kind(item, HERE, pytest.mark.e2e)

