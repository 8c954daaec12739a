"""A running container's processes as the machine sees them.

The node agent waits on the launcher's shim; the shim's child is the container's init (PID 1
of its PID namespace) and the init's first child is the container's command (PID 2 there):
the process a pod's image would run, the one to signal, suspend or measure. Its machine pid is
the child of the init whose innermost namespace pid (``NSpid`` in ``/proc/PID/status``) is 2.
"""

from __future__ import annotations

from pathlib import Path

import psutil

#: the command's pid inside its container (the init is 1 and forks it first)
COMMAND_NS_PID = 2


def innermost_pid(status: str) -> int | None:
    """The pid in the innermost PID namespace, from a ``/proc/PID/status`` text."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            return int(fields[-1]) if fields and fields[-1].isdigit() else None
    return None


def command_pid(init_pid: int) -> int | None:
    """The machine pid of the command of the container whose init is `init_pid`, if it runs."""
    try:
        children = psutil.Process(init_pid).children()
    except psutil.Error:
        return None
    for child in children:
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
        except OSError:
            continue
        if innermost_pid(status) == COMMAND_NS_PID:
            return child.pid
    return None


def tree_pids(pid: int) -> list[int]:
    """`pid` and every process below it (empty once `pid` is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []
