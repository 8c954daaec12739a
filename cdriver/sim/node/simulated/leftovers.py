"""Processes a dead run of a node or cluster left behind, found and ended when it starts again.

A container dies with its node agent's process (parent-death signal on the launcher, and its
own PID namespace ends everything the container started), so this is the second line: a
process in another mount namespace with a mount taken from the node's pods directory (every
container has the pod's ``/etc/hosts`` bound from there; matched by filesystem and path within
it, also after the node's directory was removed) is a container's, and a process marked with
`OWNER_ENV` below a cluster's directory is a host service that cluster's run started.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from cdriver.sim.controlplane.pidfile import OWNER_ENV
from cdriver.sim.node.simulated.launcher import unescape_mount_path as _unescape


def mountinfo(pid: int | str) -> list[tuple[str, str, str]]:
    """(device major:minor, root within the filesystem, mount point) of a process's mounts."""
    try:
        text = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            out.append((fields[2], _unescape(fields[3]), _unescape(fields[4])))
    return out


def fs_location(path: Path) -> tuple[str, str] | None:
    """(device major:minor, path within its filesystem) of `path`, from this process's mount
    table; a path that no longer exists is placed below its nearest existing ancestor."""
    real = os.path.realpath(path)
    existing, rest = real, ""
    while not os.path.exists(existing):
        existing, name = os.path.split(existing)
        rest = f"/{name}{rest}"
    try:
        st = os.stat(existing)
    except OSError:
        return None
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    best: tuple[str, str] | None = None
    for dev, root, point in mountinfo("self"):
        if dev != device or not (existing == point or existing.startswith(point.rstrip("/") + "/")):
            continue
        if best is None or len(point) > len(best[1]):
            best = (root, point)
    if best is None:
        return None
    root, point = best
    inside = existing[len(point.rstrip("/")):] + rest
    return device, (root.rstrip("/") + inside) or "/"


def leftover_pids(pods_dir: Path, keep: set[str] | frozenset[str] = frozenset()) -> list[int]:
    """Processes (other than this one) with a mount taken from below `pods_dir`, except those
    in the mount namespaces `keep` (as /proc/<pid>/ns/mnt names them)."""
    where = fs_location(pods_dir)
    if where is None:
        return []
    device, inside = where
    prefix = inside.rstrip("/") + "/"
    own_ns = _mount_ns("self")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        ns = _mount_ns(entry)
        if ns is None or ns == own_ns or ns in keep:
            continue
        if any(dev == device and root.startswith(prefix) for dev, root, _ in mountinfo(entry)):
            found.append(int(entry))
    return sorted(found)


def _mount_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def kill_leftovers(pods_dir: Path, keep: set[str] | frozenset[str] = frozenset()) -> list[int]:
    """SIGKILL what `leftover_pids` finds; returns their pids."""
    return _kill(leftover_pids(pods_dir, keep))


def _kill(pids: list[int]) -> list[int]:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def _ancestors() -> set[int]:
    """This process and its ancestors."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return out


def processes_below(base: Path) -> list[int]:
    """Processes (not this one or its ancestors) marked (OWNER_ENV in their environment) as
    belonging to a directory below `base`: what a dead run of a cluster kept there left
    running outside its containers (a host IMEX service, say)."""
    marker = str(Path(os.path.abspath(base))).rstrip("/") + "/"
    key = f"{OWNER_ENV}=".encode()
    skip = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        owners = [item[len(key):].decode(errors="replace") + "/" for item in environ if item.startswith(key)]
        if any(owner.startswith(marker) for owner in owners):
            found.append(int(entry))
    return sorted(found)


def kill_processes_below(base: Path) -> list[int]:
    """SIGKILL what `processes_below` finds; returns their pids."""
    return _kill(processes_below(base))
