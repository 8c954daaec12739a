"""A test's kind comes from its folder: each kind's `conftest.py` marks the tests collected under it.

The root `tests/conftest.py` fails collection for a test that ends up with no kind marker (one
outside every kind's folder), so `make unit`, `make integration` and `make e2e` cover all tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TEST_KINDS = ("unit", "integration", "e2e")


def mark_kind(item: pytest.Item, folder: Path, *marks: pytest.MarkDecorator) -> None:
    """Give `item` the `marks` if it was collected under `folder` (a kind's folder)."""
    if item.path.is_relative_to(folder):
        for mark in marks:
            item.add_marker(mark)


def unmarked(items: list[pytest.Item]) -> list[str]:
    """The node ids of the items that carry none of the kind markers."""
    return [item.nodeid for item in items if not any(item.get_closest_marker(k) for k in TEST_KINDS)]
