"""Container processes: launch through the in-namespace launcher, signal, reap, exec inside.

A container is one process tree started by `cdriver.sim.node.simulated.launcher` in a new session
and its own PID namespace: SIGTERM goes to the launcher, which passes it to the command;
SIGKILL to the whole group (the namespace's init dying ends every process in it). Containers
are started from one long-lived thread of the agent's process, so their parent-death signal
fires when that process dies, not when a pod worker's thread ends. Output goes through pipes
into a CRI-format log file per run. Commands run "inside" a container (exec probes, `kubectl
exec`) enter its mount, UTS, IPC and PID namespaces and its root with ``nsenter`` and get the
container's environment.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.atomic import atomic_write
from cdriver.checkout import PACKAGE_PARENT
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.logs import STDERR, STDOUT, LogWriter, PipeCopier
from cdriver.sim.node.simulated.measured import run_measured
from cdriver.sim.node.simulated.volumes import BindMount

log = logging.getLogger(__name__)

#: Seconds the launcher may take to reach exec (imports, mounts) before the start fails.
LAUNCH_TIMEOUT = 30.0
NSENTER = "nsenter"
#: The thread every container is started from: it lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="container-spawner")


class StartError(CdriverError):
    """The container could not be started (setup before exec failed or exec failed)."""


@dataclass(frozen=True)
class DeviceSpec:
    """A device node the launcher creates in the container's /dev (mknod, as CDI runtimes do)."""

    path: str
    type: str
    major: int
    minor: int
    mode: int = 0o666
    uid: int = 0
    gid: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "type": self.type, "major": self.major, "minor": self.minor,
                "mode": self.mode, "uid": self.uid, "gid": self.gid}


@dataclass
class LaunchSpec:
    """Everything the launcher needs for one container run."""

    argv: list[str]
    env: dict[str, str]
    working_dir: str = "/"
    hostname: str = ""
    devices: list[DeviceSpec] = field(default_factory=list)
    mounts: list[BindMount] = field(default_factory=list)
    extra_dev_dir: str | None = None
    #: an empty directory of the node's that the container's private root is built on
    staging: str = ""

    def to_dict(self, parent_pid: int | None) -> dict[str, Any]:
        return {
            "argv": self.argv, "env": self.env, "workingDir": self.working_dir, "hostname": self.hostname,
            "devices": [d.to_dict() for d in self.devices], "mounts": [m.to_dict() for m in self.mounts],
            "extraDevDir": self.extra_dev_dir, "staging": self.staging, "parentPid": parent_pid,
        }


def launcher_command() -> list[str]:
    """argv prefix of the launcher: the packaged binary's subcommand, or this Python's module."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "sim", "node", "launch"]
    return [sys.executable, "-S", "-m", "cdriver.sim.node.simulated.launcher"]


def launcher_env() -> dict[str, str]:
    """The launcher's own environment (the container's is applied at exec)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if not getattr(sys, "frozen", False):
        package_parent = str(PACKAGE_PARENT)
        extra = os.environ.get("PYTHONPATH")
        env["PYTHONPATH"] = package_parent + (f":{extra}" if extra else "")
    return env


def exit_details(returncode: int) -> tuple[int, int]:
    """(exit code, signal) as Kubernetes reports them: a signal N is exit code 128+N."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, 0


def nsenter_argv(pid: int, argv: list[str], working_dir: str | None = None) -> list[str]:
    """Run `argv` in the namespaces and root of container process `pid` (its init)."""
    out = [NSENTER, f"--target={pid}", "--mount", "--uts", "--ipc", "--pid", "--root"]
    if working_dir:
        out.append(f"--wdns={working_dir}")
    return [*out, "--", *argv]


class ContainerProcess:
    """One run of a container."""

    def __init__(self, spec: LaunchSpec, spec_path: Path, log_path: Path, name: str) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.log_path = log_path
        self.name = name
        self.popen: subprocess.Popen | None = None
        self.writer: LogWriter | None = None
        self.copiers: list[PipeCopier] = []
        self.started_at = 0.0
        self.returncode: int | None = None
        #: the container's init (PID 1 inside), which `nsenter` targets
        self.init_pid = 0

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0

    def start(self) -> ContainerProcess:
        """Launch and wait until the command was exec'd; raises StartError with the reason."""
        self.spec_path.parent.mkdir(parents=True, exist_ok=True)
        Path(self.spec.staging).mkdir(parents=True, exist_ok=True)
        atomic_write(self.spec_path, json.dumps(self.spec.to_dict(os.getpid())))
        self.writer = LogWriter(self.log_path)
        status_r, status_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.popen = _SPAWNER.submit(
                subprocess.Popen, [*launcher_command(), str(self.spec_path), str(status_w)],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, pass_fds=(status_w,),
                start_new_session=True, env=launcher_env(), close_fds=True,
            ).result()
        except OSError as exc:
            for fd in (status_r, status_w, out_r, out_w, err_r, err_w):
                os.close(fd)
            self.writer.close()
            raise StartError(f"cannot run the container launcher: {exc}") from None
        for fd in (status_w, out_w, err_w):
            os.close(fd)
        self.started_at = time.time()
        self.copiers = [PipeCopier(out_r, STDOUT, self.writer, f"log-{self.name}-out").start(),
                        PipeCopier(err_r, STDERR, self.writer, f"log-{self.name}-err").start()]
        message = self._read_status(status_r)
        if message is not None:
            self.kill_group()
            self.wait(5)
            raise StartError(message)
        return self

    def _read_status(self, fd: int) -> str | None:
        """None once exec succeeded (pipe closed empty), else the launcher's reason."""
        chunks: list[bytes] = []
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return f"the container did not start within {LAUNCH_TIMEOUT:.0f} s"
                ready, _, _ = select.select([fd], [], [], left)
                if not ready:
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        text = b"".join(chunks).decode(errors="replace")
        first, _, rest = text.partition("\n")
        if first.startswith("pid ") and first[4:].isdigit():
            self.init_pid, text = int(first[4:]), rest
        if text:
            return text
        if not self.init_pid:
            return "the container launcher ended before it started the container"
        return None

    def poll(self) -> int | None:
        """The raw return code once the main process exited (negative: killed by signal)."""
        if self.popen is None:
            return self.returncode
        if self.returncode is None:
            rc = self.popen.poll()
            if rc is not None:
                self.returncode = rc
                self.kill_group()  # the container ends with its main process
        return self.returncode

    def signal(self, sig: int) -> None:
        """Send `sig` to the main process."""
        if self.popen is not None and self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def kill_group(self) -> None:
        """SIGKILL every process of the container."""
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float | None = None) -> int | None:
        if self.popen is None:
            return self.returncode
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def stop(self, grace: float) -> int | None:
        """SIGTERM, then SIGKILL (whole group) after `grace` seconds; returns the return code."""
        if self.poll() is None:
            self.signal(signal.SIGTERM)
            if self.wait(max(grace, 0.0)) is None:
                self.kill_group()
                self.wait(10)
        return self.poll()

    def close(self) -> None:
        """Finish the log copiers (after the process ended)."""
        for copier in self.copiers:
            copier.join(2)
        if self.writer is not None and not any(c.thread.is_alive() for c in self.copiers):
            self.writer.close()


def run_in_container(pid: int, argv: list[str], env: dict[str, str], working_dir: str | None,
                     timeout: float, stdin: bytes | None = None,
                     account: Callable[[float], None] | None = None) -> subprocess.CompletedProcess:
    """Run a command inside a running container and capture its output (exec probes).

    `account(seconds)` gets the CPU time `nsenter` and the command used (see `measured`).
    Raises subprocess.TimeoutExpired after `timeout` (the command is killed)."""
    return run_measured(nsenter_argv(pid, argv, working_dir), env=env, timeout=timeout, stdin=stdin,
                        account=account)
