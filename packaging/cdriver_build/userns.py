"""Run a command where arm64 programs run, without changing anything on the machine outside it.

`python -m cdriver_build.userns --qemu <qemu-aarch64-static> -- COMMAND...` starts COMMAND in a
new user and mount namespace whose uids and gids map one to one onto the machine's (so a Debian
root file system unpacked inside keeps its owners), mounts that namespace's **own**
``binfmt_misc`` (Linux 6.7 and newer give each user namespace one) and registers
`qemu-aarch64-static` there for AArch64 ELF executables with the F flag: the kernel opens the
emulator once, at registration, so it need not exist inside a chroot. The machine's own
``binfmt_misc`` is never touched; outside the namespace an arm64 program still fails with
"Exec format error". The mount is where programs look for it (``/proc/sys/fs/binfmt_misc``),
private to the namespace.

Needs to start as root (it writes the namespace's uid map itself: no newuidmap helper).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
#: the whole uid and gid range, mapped onto itself
ID_MAP = "0 0 4294967295\n"
#: where the namespace's binfmt_misc is mounted (over the machine's path, in the private mount namespace)
BINFMT_DIR = "/proc/sys/fs/binfmt_misc"
#: ELF header of an AArch64 executable or shared object, and which bits of it to compare
#: (class 64-bit, little-endian, version 1, type EXEC or DYN, machine 0xb7)
AARCH64_MAGIC = b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
AARCH64_MASK = b"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
ENTRY_NAME = "qemu-aarch64"


class NamespaceError(RuntimeError):
    """The namespace or its binfmt_misc cannot be set up."""


def _escape(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def registration(interpreter: str, name: str = ENTRY_NAME) -> str:
    """The line written to ``binfmt_misc/register`` for AArch64 ELF files run by `interpreter` (F flag)."""
    if ":" in interpreter or not interpreter.startswith("/"):
        raise NamespaceError(f"interpreter {interpreter!r} must be an absolute path without ':'")
    return f":{name}:M::{_escape(AARCH64_MAGIC)}:{_escape(AARCH64_MASK)}:{interpreter}:F"


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise NamespaceError(f"unshare(user, mount) failed: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, flags: int = 0) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise NamespaceError(f"mount -t {fstype} {source} {target}: {os.strerror(err)}"
                             + (" (a binfmt_misc per user namespace needs Linux 6.7 or newer)"
                                if fstype == "binfmt_misc" else ""))


MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def enter(interpreter: str) -> None:
    """Move this process into a new user+mount namespace with its own binfmt_misc registering `interpreter`.

    Forks once: the parent writes the child's id maps (as root outside), then waits for it and
    leaves with its exit status; only the child returns.
    """
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(mapped_w)
        try:
            _unshare(CLONE_NEWUSER | CLONE_NEWNS)
        except NamespaceError as e:
            print(f"error: {e}", file=sys.stderr)
            os._exit(125)
        os.write(ready_w, b"1")
        os.close(ready_w)
        if os.read(mapped_r, 1) != b"1":
            os._exit(125)
        os.close(mapped_r)
        try:
            os.setgid(0)
            os.setuid(0)
            _mount("none", "/", "", MS_REC | MS_PRIVATE)
            _mount("binfmt_misc", BINFMT_DIR, "binfmt_misc")
            Path(BINFMT_DIR, "register").write_text(registration(interpreter))
        except (NamespaceError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            os._exit(125)
        return
    os.close(ready_w)
    os.close(mapped_r)
    ok = os.read(ready_r, 1) == b"1"
    if ok:
        try:
            Path(f"/proc/{pid}/uid_map").write_text(ID_MAP)
            Path(f"/proc/{pid}/gid_map").write_text(ID_MAP)
            os.write(mapped_w, b"1")
        except OSError as e:
            print(f"error: writing the namespace's id maps: {e}", file=sys.stderr)
    os.close(mapped_w)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdriver_build.userns", description=__doc__.split("\n")[0])
    parser.add_argument("--qemu", required=True, help="the qemu-aarch64-static to register (absolute path)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    interpreter = os.path.abspath(args.qemu)
    if not os.access(interpreter, os.X_OK):
        print(f"error: {interpreter} is not an executable", file=sys.stderr)
        return 2
    enter(interpreter)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"error: {command[0]}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
