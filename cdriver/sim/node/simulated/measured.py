"""A command run to its end, with the CPU time it used.

`run_measured` is `subprocess.run(..., capture_output=True, timeout=...)` that also reports,
through `account(seconds)`, the user + system CPU seconds of the process and of every
descendant it reaped (the kernel's rusage of the reaped child, as ``wait4`` returns it). It
reports them on a timeout too: the processes are killed leaves first, so that each is reaped
by its parent and its time counted, then the command is reaped. Exec probes run
through it, so that the CPU a probe costs is counted for the container it probes: the probe
runs from the node, outside the container's process tree.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

import psutil

#: how long the output readers may take after a killed command (a grandchild may hold the pipes)
READER_GRACE = 1.0
#: how long a timed-out command's processes get to be reaped by their parents, leaves first
KILL_GRACE = 1.0


def cpu_seconds_of(usage: resource.struct_rusage) -> float:
    """User + system seconds of a rusage (``os.wait4``'s third value)."""
    return usage.ru_utime + usage.ru_stime


def _reader(pipe: IO[bytes], into: list[bytes]) -> threading.Thread:
    def read() -> None:
        try:
            into.append(pipe.read())
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    thread = threading.Thread(target=read, name="measured-output", daemon=True)
    thread.start()
    return thread


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def _ends_within(pid: int, timeout: float) -> bool:
    """Whether process `pid` (our child) ends within `timeout` seconds (it is not reaped)."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        return bool(ready)
    finally:
        os.close(fd)


def _kill_leaves_first(pid: int) -> None:
    """Kill `pid` and its descendants, each before its parent, so that every parent reaps its
    children (and adds their CPU time to its own) before it dies itself."""
    deadline = time.monotonic() + KILL_GRACE
    while time.monotonic() < deadline:
        try:
            below = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return
        if not below:
            break
        for proc in below:
            try:
                if not proc.children():
                    proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        time.sleep(0.02)
    if not _ends_within(pid, max(deadline - time.monotonic(), 0.05)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_measured(argv: list[str], *, env: dict[str, str] | None = None, timeout: float,
                 stdin: bytes | None = None,
                 account: Callable[[float], None] | None = None) -> subprocess.CompletedProcess:
    """Run `argv`, capture its output, and report its CPU seconds to `account`.

    Raises subprocess.TimeoutExpired after `timeout` seconds (the command is killed, its CPU
    time still reported)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [_reader(proc.stdout, out), _reader(proc.stderr, err)]
    if stdin is not None:
        assert proc.stdin is not None
        threading.Thread(target=_feed, args=(proc.stdin, stdin), name="measured-input", daemon=True).start()
    timed_out = not _ends_within(proc.pid, timeout)
    if timed_out:
        _kill_leaves_first(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    if account is not None:
        account(cpu_seconds_of(usage))
    for reader in readers:
        reader.join(READER_GRACE if timed_out else None)
    stdout, stderr = b"".join(out), b"".join(err)
    if timed_out:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
