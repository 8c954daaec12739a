"""The checkpoint store the tests of this package write to."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.checkpoint import CheckpointStore
from tests.unit.checkpoint.records import BOOT


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "plugin" / "checkpoint.json", boot_id=BOOT, lock_timeout=1)
