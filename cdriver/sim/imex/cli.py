"""`cdriver sim imex daemon|ctl` and `cdriver sim host-imex start|stop|status|run`.

`imex` runs the IMEX stand-ins; their arguments pass through untouched so that the stand-ins
parse flags the way the real tools are called (`-c <cfg>`, `-q`, `--u=<socket>`, `-N -j`, ...).

`host-imex` is a simulated node's host IMEX service. `start` launches a detached runner
(`run`, the foreground form a service manager would call) that supervises the stand-in
`nvidia-imex`, and waits until its socket answers READY. The runner's PID is kept in
`<driver root>/run/nvidia-imex/host-imex.pid`; `stop` and `status` find it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
import psutil

from cdriver.api import constants
from cdriver.checkout import PACKAGE_PARENT
from cdriver.errors import CdriverError
from cdriver.imex.config import IMEX_CMD_PORT, IMEX_DAEMON_BINARY, IMEX_SERVER_PORT
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET, IMEX_READY_OUTPUT

if TYPE_CHECKING:
    from cdriver.sim.imex.host_service import HostImexPaths

# --- the stand-ins: `cdriver sim imex daemon|ctl` ------------------------------------
_PASSTHROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _passthrough(name: str, target: str, help_text: str) -> click.Command:
    @click.command(name, context_settings=_PASSTHROUGH, add_help_option=False, help=help_text)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def run(ctx: click.Context, args: tuple[str, ...]) -> None:
        import importlib

        entry: Callable[[list[str]], int] = importlib.import_module(target).main
        ctx.exit(entry(list(args)))

    return run


_DAEMON_HELP = "nvidia-imex stand-in (NO GPU mode): nvidia-imex -c <config>. Try --help."
_CTL_HELP = "nvidia-imex-ctl stand-in: -q | -N [-j] with -c <config>, -u <socket> or -i <ip> <port>."

@click.group("imex")
def command() -> None:
    """IMEX stand-ins (nvidia-imex, nvidia-imex-ctl) for simulated nodes."""


command.add_command(_passthrough("daemon", "cdriver.sim.imex.nvidia_imex", _DAEMON_HELP))
command.add_command(_passthrough("ctl", "cdriver.sim.imex.nvidia_imex_ctl", _CTL_HELP))


# --- the host service: `cdriver sim host-imex ...` -----------------------------------
EXIT_NOT_READY = 1
EXIT_NOT_RUNNING = 3  # as LSB init scripts and `systemctl status` report a stopped service


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


_root_option = click.option(
    "--driver-root", required=True, type=click.Path(file_okay=False, path_type=Path), envvar=constants.ENV_DRIVER_ROOT,
    help="The simulated node's driver root (env NVIDIA_DRIVER_ROOT).")


def _service_options(fn: Callable[..., None]) -> Callable[..., None]:
    """The options `start` and `run` share."""
    for option in reversed([
        _root_option,
        click.option("--ip", required=True, help="The node's IP: the daemon's bind address."),
        click.option("--peer", "peers", multiple=True, help="Another node of the host IMEX domain (repeatable)."),
        click.option("--socket", "socket_path", default=DEFAULT_HOST_IMEX_SOCKET, show_default=True,
                     help="Command socket, as a path on the host (below the driver root)."),
        click.option("--server-port", type=click.IntRange(1, 65535), default=IMEX_SERVER_PORT, show_default=True,
                     help="Peer port (SERVER_PORT)."),
        click.option("--cmd-port", type=click.IntRange(1, 65535), default=IMEX_CMD_PORT, show_default=True,
                     help="Command port (IMEX_CMD_PORT)."),
    ]):
        fn = option(fn)
    return fn


@click.group("host-imex")
def host_command() -> None:
    """A host-managed nvidia-imex service for a simulated node (outside pods)."""


# --- runner bookkeeping ------------------------------------------------------------------


def _paths(driver_root: Path, socket_path: str = DEFAULT_HOST_IMEX_SOCKET) -> HostImexPaths:
    from cdriver.sim.imex.host_service import HostImexError, HostImexPaths

    try:
        return HostImexPaths.for_root(driver_root, socket_path)
    except HostImexError as e:
        _fail(str(e))


def _recorded_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _runner(pid_file: Path, root: Path) -> psutil.Process | None:
    """The live runner recorded in `pid_file` for `root`, or None (a stale or reused PID is not ours)."""
    pid = _recorded_pid(pid_file)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
        zombie = proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return None
    if zombie or "host-imex" not in cmdline or str(root) not in cmdline:
        return None
    return proc


def _runner_argv(root: Path, ip: str, peers: tuple[str, ...], socket_path: str, server_port: int,
                 cmd_port: int) -> list[str]:
    from cdriver.sim.gpu.driver_root import cdriver_command

    argv = [*cdriver_command(), "sim", "host-imex", "run", "--driver-root", str(root), "--ip", ip,
            "--socket", socket_path, "--server-port", str(server_port), "--cmd-port", str(cmd_port)]
    for peer in peers:
        argv += ["--peer", peer]
    return argv


def _runner_env() -> dict[str, str]:
    env = dict(os.environ)
    if not getattr(sys, "frozen", False):
        package_parent = str(PACKAGE_PARENT)
        env["PYTHONPATH"] = package_parent + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
    return env


def _log_tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return "  | <no log>"
    return "\n".join(f"  | {line}" for line in lines) or "  | <empty log>"


# --- commands ----------------------------------------------------------------------------


@host_command.command("run")
@_service_options
def run_cmd(driver_root: Path, ip: str, peers: tuple[str, ...], socket_path: str, server_port: int,
            cmd_port: int) -> None:
    """Run the service in the foreground until SIGTERM/SIGINT (restarting a crashed daemon)."""
    from cdriver.atomic import atomic_write, remove_file
    from cdriver.sim.imex.host_service import HostImexService

    try:
        service = HostImexService(driver_root, ip, peers, socket_path=socket_path, server_port=server_port,
                                  cmd_port=cmd_port)
    except CdriverError as e:
        _fail(str(e))
    other = _runner(service.paths.pid_file, service.paths.root)
    if other is not None and other.pid != os.getpid():
        _fail(f"host nvidia-imex of {service.paths.root} is already running (runner pid {other.pid}); "
              f"stop it first: cdriver sim host-imex stop --driver-root {service.paths.root}")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    error = ""
    try:
        service.start(wait=False)
        service.paths.pid_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(service.paths.pid_file, f"{os.getpid()}\n")
        click.echo(f"host nvidia-imex of {service.paths.root}: daemon pid {service.pid}, "
                   f"socket {service.paths.socket}", err=True)
        while not done.wait(0.5):
            pass
    except (CdriverError, OSError) as e:
        error = str(e)
    finally:
        service.stop()
        if _recorded_pid(service.paths.pid_file) == os.getpid():
            remove_file(service.paths.pid_file)
    if error:
        _fail(error)


@host_command.command("start")
@_service_options
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True,
              help="Seconds to wait for the socket to answer READY.")
def start_cmd(driver_root: Path, ip: str, peers: tuple[str, ...], socket_path: str, server_port: int,
              cmd_port: int, timeout: float) -> None:
    """Start the service in the background and wait until it answers READY."""
    from cdriver.sim.imex.host_service import HostImexService

    try:
        service = HostImexService(driver_root, ip, peers, socket_path=socket_path, server_port=server_port,
                                  cmd_port=cmd_port)
        service.check_driver_root()
    except CdriverError as e:
        _fail(str(e))
    paths = service.paths
    running = _runner(paths.pid_file, paths.root)
    if running is not None:
        click.echo(f"host nvidia-imex of {paths.root} is already running (runner pid {running.pid})")
        return
    paths.log.parent.mkdir(parents=True, exist_ok=True)
    with open(paths.log, "ab") as log:
        proc = subprocess.Popen(_runner_argv(paths.root, service.ip, peers, socket_path, server_port, cmd_port),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=_runner_env(), start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            _fail(f"host nvidia-imex runner exited with code {proc.returncode}; log {paths.log}:\n"
                  f"{_log_tail(paths.log)}")
        if _runner(paths.pid_file, paths.root) is not None and paths.socket.exists():
            result = service.probe(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            if result.ready:
                break
        if time.monotonic() > deadline:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            _fail(f"host nvidia-imex of {paths.root} did not answer READY within {timeout:g}s; stopped it. "
                  f"Log {paths.log}:\n{_log_tail(paths.log)}")
        time.sleep(0.05)
    click.echo(f"host nvidia-imex of {paths.root} running (runner pid {proc.pid}); "
               f"{paths.socket} answers {IMEX_READY_OUTPUT}")


@host_command.command("stop")
@_root_option
@click.option("--grace", type=click.FloatRange(0), default=10.0, show_default=True,
              help="Seconds to wait after SIGTERM before SIGKILL.")
def stop_cmd(driver_root: Path, grace: float) -> None:
    """Stop the service (nothing to do when it is not running)."""
    from cdriver.atomic import remove_file

    paths = _paths(driver_root)
    runner = _runner(paths.pid_file, paths.root)
    if runner is None:
        remove_file(paths.pid_file)
        click.echo(f"host nvidia-imex of {paths.root} is not running")
        return
    children = runner.children(recursive=True)
    runner.terminate()
    _gone, alive = psutil.wait_procs([runner], timeout=grace + 5)
    if alive:
        for proc in [*alive, *children]:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs([*alive, *children], timeout=5)
    remove_file(paths.pid_file)
    click.echo(f"host nvidia-imex of {paths.root} stopped")


def service_status(driver_root: Path, timeout: float = 5.0) -> dict:
    """State of a node's host service: runner, daemon, socket and the ctl's answer."""
    from cdriver.imex import ctl
    from cdriver.imex.config import read_config

    paths = _paths(driver_root)
    runner = _runner(paths.pid_file, paths.root)
    doc: dict = {"driverRoot": str(paths.root), "running": runner is not None,
                 "runnerPid": runner.pid if runner else None, "daemonPid": None,
                 "config": str(paths.config), "socket": None, "ready": False, "detail": ""}
    if runner is not None:
        for child in runner.children():
            try:
                if child.name() == IMEX_DAEMON_BINARY:
                    doc["daemonPid"] = child.pid
            except psutil.Error:
                pass
    try:
        socket_path = read_config(paths.config).cmd_unix_path
    except CdriverError as e:
        doc["detail"] = str(e)
        return doc
    doc["socket"] = socket_path
    if not socket_path or not os.path.exists(socket_path):
        doc["detail"] = f"socket {socket_path or '(not configured)'} does not exist"
        return doc
    result = ctl.probe_ready(str(paths.ctl), unix_socket=socket_path, timeout=timeout)
    doc["ready"] = result.ready
    doc["detail"] = result.describe()
    return doc


@host_command.command("status")
@_root_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def status_cmd(driver_root: Path, as_json: bool) -> None:
    """Report the service: exit 0 READY, 1 running but not ready, 3 not running."""
    doc = service_status(driver_root)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    elif doc["running"]:
        click.echo(f"host nvidia-imex of {doc['driverRoot']}: running (runner pid {doc['runnerPid']}, daemon pid "
                   f"{doc['daemonPid']}); {doc['detail']}")
    else:
        click.echo(f"host nvidia-imex of {doc['driverRoot']}: not running")
    if not doc["running"]:
        sys.exit(EXIT_NOT_RUNNING)
    sys.exit(0 if doc["ready"] else EXIT_NOT_READY)
