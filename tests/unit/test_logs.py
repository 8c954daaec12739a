"""Role logging: verbosity 4 shows the driver's debug lines, not a library's chatter."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from cdriver.checkpoint import CheckpointStore
from cdriver.logs import setup_logging


@pytest.fixture
def debug_output() -> Iterator[io.StringIO]:
    """Role logging at verbosity 4, written to a buffer."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    setup_logging("text", verbosity=4)
    out = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    yield out
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_checkpoint_lock_cycles_log_no_filelock_debug_lines_at_verbosity_4(debug_output, tmp_path) -> None:
    store = CheckpointStore(tmp_path / "checkpoint.json", boot_id="b")
    for _ in range(3):
        with store.locked():
            pass
    logging.getLogger("cdriver.roles.kubelet_plugin").debug("driver detail")
    text = debug_output.getvalue()
    assert "driver detail" in text
    assert "filelock" not in text
    assert "pu.lock" not in text
