"""Start one container process in its own mount (and UTS) namespace, then exec its command.

Run as ``python -m cdriver.sim.node.simulated.launcher SPEC_JSON STATUS_FD`` (or ``cdriver sim node
launch`` in a packaged build) by the node agent. Steps:

1. new mount + UTS namespaces; ``/`` made recursively private; hostname set;
2. a fresh tmpfs for ``/dev`` with the basic nodes (null, zero, full, random, urandom, tty),
   ``pts`` (the machine's), ``ptmx``, ``shm``, the ``fd``/``stdin``/``stdout``/``stderr``
   links and the container's devices (created with mknod from the CDI spec's type,
   major/minor, mode and owner, as CDI runtimes do), built in a staging directory and moved
   onto ``/dev``;
3. bind mounts (volumes, ``/etc/hosts``, CDI mounts), parents first, recursive unless a CDI
   mount says ``bind``; then remounted with ``ro``/``nosuid``/``nodev``/``noexec`` and given
   the propagation its options name. A target that does not exist is created as an empty directory or
   file on the machine: the container shares the machine's filesystem, so mount points
   such as ``/driver-root`` or ``/var/run/secrets/kubernetes.io/serviceaccount`` appear
   there as empty directories (their content stays private to the container);
4. ``chdir`` and ``execvpe`` with the container's environment.

If anything fails before exec, the reason is written to STATUS_FD and the launcher exits
127; a successful exec closes STATUS_FD without writing, so the agent knows which happened.
Only the standard library is used, to start fast.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import stat
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20
PR_SET_PDEATHSIG = 1
EXIT_LAUNCH_FAILED = 127

#: (name, major, minor) of the basic device nodes every container gets.
BASIC_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                 ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))

_libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(Exception):
    """A step before exec failed."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise LaunchError(f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None),
           f"mount {source or fstype} on {target}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _ensure_target(target: str, source_is_dir: bool) -> None:
    """Create a missing mount point (directory, or empty file for a non-directory source)."""
    if os.path.lexists(target):
        return
    if source_is_dir:
        os.makedirs(target, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    os.close(fd)


#: remount flags and propagation types of mount options
REMOUNT_OPTION_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
PROPAGATION_FLAGS = {"private": MS_PRIVATE, "shared": MS_SHARED, "slave": MS_SLAVE}


def bind(source: str, target: str, read_only: bool = False, recursive: bool = True,
         options: list[str] | None = None) -> None:
    """Bind `source` at `target`, then apply read-only, nosuid/nodev/noexec and propagation."""
    try:
        st = os.stat(source)
    except OSError as exc:
        raise LaunchError(f"bind mount source {source}: {exc.strerror}") from None
    _ensure_target(target, stat.S_ISDIR(st.st_mode))
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    flags = MS_RDONLY if read_only else 0
    for option in options or []:
        flags |= REMOUNT_OPTION_FLAGS.get(option, 0)
    if flags:
        mount(None, target, None, MS_BIND | MS_REMOUNT | flags)
    for option in options or []:
        kind = PROPAGATION_FLAGS.get(option.removeprefix("r"))
        if kind is not None:
            mount(None, target, None, kind | (MS_REC if option.startswith("r") else 0))


def _device(staging: str, dev: dict[str, Any]) -> None:
    """Create one device node below the staging /dev from its type, major/minor, mode and owner."""
    rel = os.path.normpath(dev["path"]).lstrip("/")
    if not rel.startswith("dev/"):
        raise LaunchError(f"device {dev['path']}: device nodes must be below /dev")
    target = os.path.join(staging, rel[len("dev/"):])
    os.makedirs(os.path.dirname(target), exist_ok=True)
    kind = {"b": stat.S_IFBLK, "p": stat.S_IFIFO}.get(dev.get("type") or "c", stat.S_IFCHR)
    mode = int(dev.get("mode", 0o666)) & 0o7777
    if os.path.lexists(target):
        os.unlink(target)
    os.mknod(target, mode | kind, os.makedev(int(dev["major"]), int(dev["minor"])))
    os.chown(target, int(dev.get("uid") or 0), int(dev.get("gid") or 0))
    os.chmod(target, mode)


def build_dev(staging: str, devices: list[dict[str, Any]], extra_dev_dir: str | None) -> None:
    """Populate a tmpfs at `staging` as the container's /dev and move it onto /dev."""
    os.makedirs(staging, exist_ok=True)
    mount("tmpfs", staging, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name, major, minor in BASIC_DEVICES:
        path = os.path.join(staging, name)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(path, 0o666)
    for name in ("pts", "shm"):
        os.mkdir(os.path.join(staging, name), 0o755)
    if os.path.isdir("/dev/pts"):
        mount("/dev/pts", os.path.join(staging, "pts"), None, MS_BIND | MS_REC)
    mount("shm", os.path.join(staging, "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k")
    for name, link in DEV_LINKS:
        os.symlink(link, os.path.join(staging, name))
    if extra_dev_dir and os.path.isdir(extra_dev_dir):
        for entry in sorted(os.listdir(extra_dev_dir)):
            source, target = os.path.join(extra_dev_dir, entry), os.path.join(staging, entry)
            if os.path.lexists(target):
                continue
            bind(source, target)
    for dev in devices:
        _device(staging, dev)
    mount(staging, "/dev", None, MS_MOVE)


def setup(spec: dict[str, Any]) -> None:
    """Every step before exec (in this process)."""
    if spec.get("parentPid"):
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != int(spec["parentPid"]):
            raise LaunchError("the node agent exited while the container was starting")
    unshare(CLONE_NEWNS | CLONE_NEWUTS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if spec.get("hostname"):
        socket.sethostname(spec["hostname"])
    build_dev(spec["devStaging"], spec.get("devices") or [], spec.get("extraDevDir"))
    mounts = sorted(spec.get("mounts") or [], key=lambda m: m["target"].rstrip("/").count("/"))
    for m in mounts:
        bind(m["source"], m["target"], bool(m.get("readOnly")), bool(m.get("recursive", True)), m.get("options"))
    os.chdir(spec.get("workingDir") or "/")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: launcher SPEC_JSON STATUS_FD", file=sys.stderr)
        return 2
    status_fd = int(args[1])
    try:
        os.set_inheritable(status_fd, False)
        with open(args[0]) as f:
            spec = json.load(f)
        setup(spec)
        command = spec["argv"]
        env = spec["env"]
    except (LaunchError, OSError, ValueError, KeyError) as exc:
        return _fail(status_fd, f"container setup failed: {exc}")
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        return _fail(status_fd, f"exec {command[0]!r}: {exc.strerror} (PATH={env.get('PATH', '')})")


def _fail(status_fd: int, message: str) -> int:
    try:
        os.write(status_fd, message.encode(errors="replace"))
    except OSError:
        pass
    print(message, file=sys.stderr)
    return EXIT_LAUNCH_FAILED


if __name__ == "__main__":
    sys.exit(main())
