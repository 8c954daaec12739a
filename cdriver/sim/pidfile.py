"""Pid files of the background processes `cdriver sim ... up` starts."""

from __future__ import annotations

import os
from pathlib import Path


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
