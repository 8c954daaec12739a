"""Pid files of the background processes `cdriver sim ... up` starts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

#: Environment variable naming the directory a background process of a local cluster belongs
#: to, so that a later start of that cluster finds what a dead run left (`processes_below`).
OWNER_ENV = "CDRIVER_SIM_OWNER"


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in `pid_file`, or None if there is none."""
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def process_alive(pid: int | None) -> bool:
    """True while a process with this pid exists."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process(pid: int, timeout: float, poll: float = 0.2) -> bool:
    """SIGTERM `pid` and wait until it has exited; False if it still runs after `timeout` s."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True
