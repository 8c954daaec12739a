"""Start one container: its own mount, UTS and PID namespaces and its own root, then exec its command.

Run as ``python -m cdriver.sim.node.simulated.launcher SPEC_JSON STATUS_FD`` (or ``cdriver sim node
launch`` in a packaged build) by the node agent. Three processes make a container:

- the *shim* (this process, the pid the agent waits on): dies with the agent (parent-death
  signal), leaves the machine's namespaces (mount, UTS, PID), forks the init, forwards
  signals to it and exits as the container's command did;
- the *init* (PID 1 of the new PID namespace): dies with the shim, builds the root, forks the
  command, forwards signals to it, reaps orphans and exits when the command does; the kernel
  then kills whatever else runs in the namespace, so nothing a container started outlives it;
- the *command* (PID 2), exec'd with the container's environment.

The root, built by the init below the spec's ``staging`` directory (an empty directory of the
node's):

1. a tmpfs holding an overlay of the machine's filesystems (each mount of a disk filesystem or
   tmpfs is a lower layer, its changes land in the tmpfs): the container sees the
   machine's programs, and what it writes (missing mount points included) stays in it;
2. a fresh ``/proc`` of the new PID namespace, ``/sys`` read-only, and a tmpfs ``/dev`` with
   the basic nodes (null, zero, full, random, urandom, tty), ``pts``, ``ptmx``, ``shm``, the
   ``fd``/``std*`` links and the container's devices, created with mknod from the CDI spec's
   type, major/minor, mode and owner, as CDI runtimes do;
3. ``pivot_root`` into it, then the bind mounts (volumes, ``/etc/hosts``, CDI mounts) from
   the old root, parents first, recursive unless a CDI mount says ``bind``, remounted with
   ``ro``/``nosuid``/``nodev``/``noexec`` and the propagation their options name; the old root
   is then detached.

If anything fails before exec, the reason is written to STATUS_FD and the container exits
127; the shim first writes ``pid <init pid>`` (the process `nsenter` targets) on its own line,
and a successful exec closes STATUS_FD without writing more, so the agent knows which happened.
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
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
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
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
#: pivot_root's system call number per machine
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
EXIT_LAUNCH_FAILED = 127
OLD_ROOT = "/.host-root"

#: (name, major, minor) of the basic device nodes every container gets.
BASIC_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                 ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
#: Filesystem types of the machine that become lower layers of a container's root.
LAYER_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "overlay", "zfs", "f2fs", "9p",
                               "virtiofs", "nfs", "nfs4", "tmpfs"})
#: Signals the shim and the init pass on to the container's command.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH, signal.SIGCONT)

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


def _device(dev_dir: str, dev: dict[str, Any]) -> None:
    """Create one device node below the container's /dev from its type, major/minor, mode and owner."""
    rel = os.path.normpath(dev["path"]).lstrip("/")
    if not rel.startswith("dev/"):
        raise LaunchError(f"device {dev['path']}: device nodes must be below /dev")
    target = os.path.join(dev_dir, rel[len("dev/"):])
    os.makedirs(os.path.dirname(target), exist_ok=True)
    kind = {"b": stat.S_IFBLK, "p": stat.S_IFIFO}.get(dev.get("type") or "c", stat.S_IFCHR)
    mode = int(dev.get("mode", 0o666)) & 0o7777
    if os.path.lexists(target):
        os.unlink(target)
    os.mknod(target, mode | kind, os.makedev(int(dev["major"]), int(dev["minor"])))
    os.chown(target, int(dev.get("uid") or 0), int(dev.get("gid") or 0))
    os.chmod(target, mode)


def build_dev(dev_dir: str, devices: list[dict[str, Any]], extra_dev_dir: str | None) -> None:
    """Mount a tmpfs at `dev_dir` and populate it as the container's /dev."""
    os.makedirs(dev_dir, exist_ok=True)
    mount("tmpfs", dev_dir, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name, major, minor in BASIC_DEVICES:
        path = os.path.join(dev_dir, name)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(path, 0o666)
    for name in ("pts", "shm"):
        os.mkdir(os.path.join(dev_dir, name), 0o755)
    if os.path.isdir("/dev/pts"):
        mount("/dev/pts", os.path.join(dev_dir, "pts"), None, MS_BIND | MS_REC)
    mount("shm", os.path.join(dev_dir, "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k")
    for name, link in DEV_LINKS:
        os.symlink(link, os.path.join(dev_dir, name))
    if extra_dev_dir and os.path.isdir(extra_dev_dir):
        for entry in sorted(os.listdir(extra_dev_dir)):
            source, target = os.path.join(extra_dev_dir, entry), os.path.join(dev_dir, entry)
            if os.path.lexists(target):
                continue
            bind(source, target)
    for dev in devices:
        _device(dev_dir, dev)


def unescape_mount_path(field: str) -> str:
    """A mountinfo path field (spaces etc. are octal escapes)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def layer_mounts(mountinfo: str, staging: str) -> list[str]:
    """Mount points of the machine's filesystems (disks and tmpfs), parents first, that become
    layers of a container's root: not below /proc, /sys, /dev or the staging directory."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype = line.split(" - ", 1)[1].split()[0]
        point = unescape_mount_path(fields[4])
        if fstype not in LAYER_FILESYSTEMS:
            continue
        if any(point == p or point.startswith(p + "/") for p in ("/proc", "/sys", "/dev", staging)):
            continue
        if point not in points:
            points.append(point)
    return sorted(points, key=lambda p: (p.rstrip("/").count("/"), p))


def build_root(staging: str) -> str:
    """The container's root below `staging`: a tmpfs holding an overlay per disk mount of the
    machine (their changes stay in the tmpfs). Returns the new root's path."""
    os.makedirs(staging, exist_ok=True)
    mount("tmpfs", staging, "tmpfs", 0, "mode=755")
    root = os.path.join(staging, "root")
    with open("/proc/self/mountinfo") as f:
        points = layer_mounts(f.read(), staging.rstrip("/"))
    if "/" not in points:
        raise LaunchError("the machine's root filesystem is of a type an overlay cannot use as a layer")
    for n, point in enumerate(points):
        upper, work = os.path.join(staging, f"upper{n}"), os.path.join(staging, f"work{n}")
        os.mkdir(upper)
        os.mkdir(work)
        target = root if point == "/" else root + point
        if point == "/":
            os.mkdir(root)
        elif not os.path.isdir(target):
            continue
        mount("overlay", target, "overlay", 0, f"lowerdir={_escape_option(point)},upperdir={upper},workdir={work}")
    return root


def _escape_option(path: str) -> str:
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def pivot(root: str) -> None:
    """Make `root` the process's root; the old one stays reachable at OLD_ROOT until detached."""
    old = root + OLD_ROOT
    os.makedirs(old, exist_ok=True)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise LaunchError(f"pivot_root: unknown system call number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(number), root.encode(), old.encode()), "pivot_root")
    os.chdir("/")


def setup_root(spec: dict[str, Any]) -> None:
    """Build the root, enter it and mount what the container names (run by the init)."""
    mounts = sorted(spec.get("mounts") or [], key=lambda m: m["target"].rstrip("/").count("/"))
    sources = [os.path.realpath(m["source"]) for m in mounts]
    extra_dev = os.path.realpath(spec["extraDevDir"]) if spec.get("extraDevDir") else None
    root = build_root(spec["staging"])
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir("/sys"):
        os.makedirs(root + "/sys", exist_ok=True)
        mount("/sys", root + "/sys", None, MS_BIND | MS_REC)
        mount(None, root + "/sys", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    build_dev(root + "/dev", spec.get("devices") or [], extra_dev)
    pivot(root)
    for m, source in zip(mounts, sources, strict=True):
        bind(OLD_ROOT + source, m["target"], bool(m.get("readOnly")), bool(m.get("recursive", True)),
             m.get("options"))
    _check(_libc.umount2(OLD_ROOT.encode(), ctypes.c_int(MNT_DETACH)), f"detach {OLD_ROOT}")
    os.rmdir(OLD_ROOT)
    os.chdir(spec.get("workingDir") or "/")


def _die_with_parent(parent: int) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        raise LaunchError("the parent process exited while the container was starting")


def _forward_to(pid: int) -> None:
    def forward(signum: int, _frame: Any) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)


def _wait_for(pid: int) -> int:
    """Reap children until `pid` exits; its wait status."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0
        if got == pid:
            return status


def _exit_like(status: int) -> None:
    """End this process as a child with wait status `status` ended (a signal is re-raised)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else EXIT_LAUNCH_FAILED)


def run_command(spec: dict[str, Any], status_fd: int) -> None:
    """The command's process: default signal handling, then exec."""
    for sig in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    command, env = spec["argv"], spec["env"]
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        _fail(status_fd, f"exec {command[0]!r}: {exc.strerror} (PATH={env.get('PATH', '')})")
    os._exit(EXIT_LAUNCH_FAILED)


def run_init(spec: dict[str, Any], status_fd: int, shim: int, report_fd: int) -> None:
    """PID 1 of the container: build the root, start the command, pass signals, reap, exit with it."""
    try:
        _die_with_parent(shim)
        if spec.get("hostname"):
            socket.sethostname(spec["hostname"])
        setup_root(spec)
    except (LaunchError, OSError, ValueError, KeyError) as exc:
        _fail(status_fd, f"container setup failed: {exc}")
        os._exit(EXIT_LAUNCH_FAILED)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    command = os.fork()
    if command == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        run_command(spec, status_fd)
    os.close(status_fd)
    _forward_to(command)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    status = _wait_for(command)
    os.write(report_fd, str(status).encode())
    os._exit(0)


def run_shim(spec: dict[str, Any], status_fd: int) -> int:
    """This process: leave the machine's namespaces, fork the init, pass signals, exit like the command."""
    if spec.get("parentPid"):
        _die_with_parent(int(spec["parentPid"]))
    unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    report_r, report_w = os.pipe()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    init = os.fork()
    if init == 0:
        os.close(report_r)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        try:
            run_init(spec, status_fd, os.getppid(), report_w)
        finally:
            os._exit(EXIT_LAUNCH_FAILED)
    os.close(report_w)
    os.write(status_fd, f"pid {init}\n".encode())
    os.close(status_fd)
    _forward_to(init)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    init_status = _wait_for(init)
    with os.fdopen(report_r, "rb") as report:
        reported = report.read().decode().strip()
    _exit_like(int(reported) if reported else init_status)
    return EXIT_LAUNCH_FAILED


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
        return run_shim(spec, status_fd)
    except (LaunchError, OSError, ValueError, KeyError) as exc:
        return _fail(status_fd, f"container setup failed: {exc}")


def _fail(status_fd: int, message: str) -> int:
    try:
        os.write(status_fd, message.encode(errors="replace"))
    except OSError:
        pass
    print(message, file=sys.stderr)
    return EXIT_LAUNCH_FAILED


if __name__ == "__main__":
    sys.exit(main())
