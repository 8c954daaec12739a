"""The node log's DRA call lines, written and read back."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from cdriver.sim.node.simulated.call_log import UNREGISTERED, DraCall, log_call, read_calls


def test_calls_are_read_back_as_logged() -> None:
    stream = io.StringIO()
    log = logging.getLogger("test-call-log")
    log.propagate = False
    handler = logging.StreamHandler(stream)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log_call(log, "NodePrepareResources", "d.example.com", Path("/x/dra-1.sock"), ["u1", "u2"], "ok")
        log_call(log, "NodeUnprepareResources", "d.example.com", None, ["u3"], UNREGISTERED)
    finally:
        log.removeHandler(handler)
    assert read_calls("noise\n" + stream.getvalue()) == [
        DraCall("NodePrepareResources", "d.example.com", "dra-1.sock", ("u1", "u2"), "ok"),
        DraCall("NodeUnprepareResources", "d.example.com", "-", ("u3",), UNREGISTERED)]
    assert [c.ok for c in read_calls(stream.getvalue())] == [True, False]
