"""A real node's cgroups on this cgroup-v1 machine: one tree per node in every hierarchy.

kubelet puts pods below the node's cgroup (its cgroupRoot); containerd, its shims and kubelet
run in `<node>/system`. Stopping the node kills every process in the tree and removes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """Mounted cgroup hierarchies that take processes (v1 controllers, name=systemd, unified)."""
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()
                  and (p / "cgroup.procs").exists())


def create(path: str) -> None:
    """mkdir `path` (absolute cgroup path) in every hierarchy; cpuset children inherit cpus/mems."""
    for h in hierarchies():
        current = h
        for part in Path(path).relative_to("/").parts:
            parent, current = current, current / part
            if not current.exists():
                current.mkdir()
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if (parent / knob).exists() and not (current / knob).read_text().strip():
                        (current / knob).write_text((parent / knob).read_text())


def join_script(path: str) -> str:
    """/bin/sh lines that move the shell into `path` in every hierarchy (then it execs the daemon)."""
    return "".join(f"echo $$ > {h / path.lstrip('/') / 'cgroup.procs'}; " for h in hierarchies())


def _tree(h: Path, path: str) -> list[Path]:
    top = h / path.lstrip("/")
    if not top.is_dir():
        return []
    dirs = [Path(d) for d, _, _ in os.walk(top)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)  # deepest first


def pids(path: str) -> set[int]:
    found: set[int] = set()
    for h in hierarchies():
        for d in _tree(h, path):
            with contextlib.suppress(OSError):
                found.update(int(x) for x in (d / "cgroup.procs").read_text().split())
    return found


def kill_all(path: str, timeout: float = 10.0) -> set[int]:
    """SIGKILL every process in the node's tree until it is empty; returns what was left after `timeout`."""
    deadline = time.monotonic() + timeout
    while (left := pids(path)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return pids(path)


def remove(path: str) -> list[str]:
    """rmdir the tree in every hierarchy (deepest first); returns the directories that stayed."""
    stuck = []
    for h in hierarchies():
        for d in _tree(h, path):
            try:
                d.rmdir()
            except OSError as e:
                stuck.append(f"{d}: {e.strerror}")
    return stuck
