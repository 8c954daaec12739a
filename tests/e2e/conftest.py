"""End-to-end tests: every test collected under this folder carries the `e2e` marker. Each test
module starts its own world (`tests.support.world.start_world`) in a module-scoped fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kinds import mark_kind

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test under this folder is e2e."""
    mark_kind(item, HERE, pytest.mark.e2e)


@pytest.fixture
def e2e_namespace(request: pytest.FixtureRequest) -> str:
    """A namespace name unique to the test (created by the scenario helpers)."""
    name = request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")
    return ("e2e-" + "".join(ch for ch in name if ch.isalnum() or ch == "-"))[:60].rstrip("-")
