"""The packaging tests (the packaged executable and images): every test collected under this folder
is of kind `e2e`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.image_platforms import image_platforms
from tests.support.kinds import mark_kind

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test under this folder is e2e: it builds and runs the packaged product."""
    mark_kind(item, HERE, pytest.mark.e2e)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `multiplatform` need an image of another platform than this machine's: they
    are deselected (and the summary counts them) unless `CDRIVER_IMAGE_PLATFORMS` names one."""
    if len(image_platforms()) > 1:
        return
    keep = [i for i in items if i.get_closest_marker("multiplatform") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
