"""Host-managed IMEX on a simulated node: the administrator's `nvidia-imex` service, outside pods.

In `hostManaged` mode a site runs one `nvidia-imex` per node as a host service; the kubelet
plugin only asks it `nvidia-imex-ctl -q --u=<socket>`. This module plays that service for a
simulated node: it writes the host's IMEX config below the node's driver root and runs the
driver root's `nvidia-imex` stand-in under the production `ProcessSupervisor`::

    <root>/etc/nvidia-imex/config.cfg        real IMEX keys; command socket below the root
    <root>/etc/nvidia-imex/nodes_config.cfg  this node and its peers, one IP per line
    <root>/etc/nvidia-imex/imex_ctrl.sock    command socket (path configurable)
    <root>/var/log/nvidia-imex.log           the daemon's output
    <root>/run/nvidia-imex/host-imex.pid     the `cdriver sim host-imex` runner (CLI only)

Paths inside the config are real absolute paths (the stand-in does not chroot), so the socket
sits where the plugin and `cdriver host-check` look for `<driver root>/<socket path>`. Every
node's service shares this machine's mount namespace, so host-check runs with the options of
`host_check_args`, which count only the daemon whose config lies below the node's driver root.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cdriver.errors import CdriverError
from cdriver.imex import config as imex_config
from cdriver.imex import ctl
from cdriver.imex.config import (
    DEFAULT_IMEX_CONFIG,
    DEFAULT_IMEX_NODES_CONFIG,
    IMEX_CMD_PORT,
    IMEX_CTL_BINARY,
    IMEX_DAEMON_BINARY,
    IMEX_SERVER_PORT,
)
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.imex.supervisor import ProcessSupervisor
from cdriver.sim.controlplane.pidfile import OWNER_ENV
from cdriver.sim.gpu.driver_root import BIN_SUBDIR, DriverRoot

LOG_FILE = "/var/log/nvidia-imex.log"
PID_FILE = "/run/nvidia-imex/host-imex.pid"
#: longest path a Unix socket address can hold (sun_path is 108 bytes with the NUL)
UNIX_PATH_MAX = 107


class HostImexError(CdriverError):
    """The host IMEX service cannot be configured, started or reached."""


def under_root(root: Path, path: str) -> Path:
    """`path` (absolute, as on a host) below the driver root `root`."""
    return root / path.lstrip("/")


@dataclass(frozen=True)
class HostImexPaths:
    """Where a simulated node's host IMEX service keeps its files."""

    root: Path
    bin_dir: Path
    config: Path
    nodes_config: Path
    socket: Path
    log: Path
    pid_file: Path

    @classmethod
    def for_root(cls, root: str | os.PathLike[str], socket_path: str = DEFAULT_HOST_IMEX_SOCKET,
                 bin_dir: Path | None = None) -> HostImexPaths:
        """The layout below `root`; `socket_path` is the socket as the host sees it (inside the root)."""
        base = Path(root).resolve()
        if not str(socket_path).startswith("/"):
            raise HostImexError(f"socket path {socket_path!r} must be absolute (a path on the host, "
                                f"e.g. {DEFAULT_HOST_IMEX_SOCKET})")
        return cls(
            root=base,
            bin_dir=bin_dir if bin_dir is not None else base / BIN_SUBDIR,
            config=under_root(base, DEFAULT_IMEX_CONFIG),
            nodes_config=under_root(base, DEFAULT_IMEX_NODES_CONFIG),
            socket=under_root(base, socket_path),
            log=under_root(base, LOG_FILE),
            pid_file=under_root(base, PID_FILE),
        )

    @property
    def daemon(self) -> Path:
        """The driver root's `nvidia-imex`."""
        return self.bin_dir / IMEX_DAEMON_BINARY

    @property
    def ctl(self) -> Path:
        """The driver root's `nvidia-imex-ctl`."""
        return self.bin_dir / IMEX_CTL_BINARY


# --- pure ----------------------------------------------------------------------------------


def host_check_args(root: str | os.PathLike[str]) -> list[str]:
    """`cdriver host-check` options for one simulated node among neighbours on this machine.

    All simulated nodes share the machine's mount namespace and root, so host-check tells
    their host services apart only by where their config lies: below this node's driver root.
    """
    return ["--driver-root", str(root), "--only-config-under-driver-root"]


def check_ip(value: str, what: str = "--ip") -> str:
    """`value` as a canonical IP address; HostImexError naming `what` otherwise."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise HostImexError(f"{what} {value!r} is not an IP address; pass the node's IP "
                            "(e.g. its InternalIP 127.0.1.1)") from None


def nodes_config_members(ip: str, peers: Iterable[str]) -> list[str]:
    """IMEX lists every node of the domain, itself included, in one file the same on every node
    (a node's ID is its line, and daemons with different lists do not connect): `ip` and
    `peers` in address order, each once."""
    members = {check_ip(ip)}
    members.update(check_ip(peer, "peer") for peer in peers)
    return sorted(members, key=ipaddress.ip_address)


def check_socket_path(path: Path) -> None:
    """A Unix socket path must fit in sun_path; say how to fix it when it does not."""
    size = len(os.fsencode(path))
    if size > UNIX_PATH_MAX:
        raise HostImexError(f"command socket {path} is {size} bytes long; a Unix socket path holds at most "
                            f"{UNIX_PATH_MAX}: use a shorter driver root or socket path")


def render_host_config(paths: HostImexPaths, ip: str, *, server_port: int = IMEX_SERVER_PORT,
                       cmd_port: int = IMEX_CMD_PORT, node_name: str = "") -> str:
    """The host service's config.cfg: the packaged IMEX template with this node's values."""
    text = imex_config.render_config(
        imex_config.load_template(), str(paths.nodes_config), ip, str(paths.socket),
        server_port=server_port, cmd_port=cmd_port, source="host IMEX config",
    )
    who = f" of simulated node {node_name}" if node_name else ""
    header = (f"# Host nvidia-imex service{who} (written by `cdriver sim host-imex`).\n"
              f"# Command socket: {paths.socket}\n")
    return header + _drop_leading_comment(text)


def _drop_leading_comment(text: str) -> str:
    """`text` without its first comment block (the template's note about per-domain daemons)."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    return "".join(lines[i:]) if i else text


# --- the service ---------------------------------------------------------------------------


class HostImexService:
    """The host `nvidia-imex` of one simulated node, supervised from this process.

    `driver_root` is a `DriverRoot` (from `create_driver_root`) or its directory; `ip` is the
    node's IP (bind address); `peers` the other nodes of the host IMEX domain. `env` is the
    daemon's environment (default: this process's; CDRIVER_SIM_IMEX_* timings apply).
    """

    def __init__(self, driver_root: DriverRoot | str | os.PathLike[str], ip: str, peers: Iterable[str] = (),
                 *, socket_path: str = DEFAULT_HOST_IMEX_SOCKET, server_port: int = IMEX_SERVER_PORT,
                 cmd_port: int = IMEX_CMD_PORT, env: Mapping[str, str] | None = None,
                 initial_backoff: float = 0.5, max_backoff: float = 5.0) -> None:
        if isinstance(driver_root, DriverRoot):
            self.paths = HostImexPaths.for_root(driver_root.root, socket_path, driver_root.bin_dir)
            self.node_name = driver_root.node_name
        else:
            self.paths = HostImexPaths.for_root(driver_root, socket_path)
            self.node_name = ""
        check_socket_path(self.paths.socket)
        self.ip = check_ip(ip)
        self.peers = nodes_config_members(self.ip, peers)
        self.server_port = server_port
        self.cmd_port = cmd_port
        self.env = {**(os.environ if env is None else env), OWNER_ENV: str(self.paths.root)}
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._supervisor: ProcessSupervisor | None = None
        self._lock = threading.Lock()
        self._crashes = 0  # unexpected daemon exits so far
        self._last_crash: tuple[int, list[str]] | None = None

    def __repr__(self) -> str:
        return f"HostImexService(root={str(self.paths.root)!r}, ip={self.ip!r}, running={self.is_running()})"

    # --- configuration ---------------------------------------------------------------------

    def check_driver_root(self) -> None:
        """HostImexError unless the driver root has the nvidia-imex stand-in."""
        if not self.paths.daemon.is_file():
            raise HostImexError(f"{self.paths.daemon} not found: {self.paths.root} is not a simulated driver "
                                "root; create it with `cdriver sim driver-root`")

    def write_config(self) -> Path:
        """Write config.cfg and nodes_config.cfg (atomically); the config's path."""
        self.check_driver_root()
        text = render_host_config(self.paths, self.ip, server_port=self.server_port, cmd_port=self.cmd_port,
                                  node_name=self.node_name)
        imex_config.write_file_atomic(self.paths.nodes_config, imex_config.render_nodes_config(self.peers))
        imex_config.write_file_atomic(self.paths.config, text)
        return self.paths.config

    def set_peers(self, peers: Iterable[str]) -> None:
        """Rewrite the nodes config; a running daemon re-reads it (SIGUSR1)."""
        self.peers = nodes_config_members(self.ip, peers)
        imex_config.write_file_atomic(self.paths.nodes_config, imex_config.render_nodes_config(self.peers))
        with self._lock:
            supervisor = self._supervisor
        if supervisor is not None and supervisor.running:
            supervisor.reload()

    # --- lifecycle -------------------------------------------------------------------------

    def argv(self) -> list[str]:
        """How the service runs the daemon: the driver root's nvidia-imex with the host config."""
        return [str(self.paths.daemon), "-c", str(self.paths.config)]

    def start(self, wait: bool = True, timeout: float = 30.0) -> None:
        """Write the config and start the daemon (no-op while it runs); with `wait`, until READY."""
        crashes = self._crashes
        with self._lock:
            if self._supervisor is None or not self._supervisor.active:
                self.write_config()
                self.paths.log.parent.mkdir(parents=True, exist_ok=True)
                self._supervisor = ProcessSupervisor(
                    self.argv(), env=self.env, log_path=self.paths.log, max_backoff=self.max_backoff,
                    initial_backoff=self.initial_backoff, on_exit=self._on_exit, name=IMEX_DAEMON_BINARY,
                )
                try:
                    self._supervisor.start()
                except CdriverError as e:
                    self._supervisor = None
                    raise HostImexError(f"cannot start the host nvidia-imex of {self.paths.root}: {e}") from None
        if wait:
            try:
                self._wait_ready(timeout, crashes)
            except HostImexError:
                self.stop()  # leave nothing crash-looping behind a failed start
                raise

    def _on_exit(self, returncode: int, expected: bool) -> None:
        if not expected:
            supervisor = self._supervisor
            tail = supervisor.last_output_lines(10) if supervisor is not None else []
            self._last_crash = (returncode, tail)
            self._crashes += 1

    def probe(self, timeout: float = 5.0) -> ctl.ProbeResult:
        """`nvidia-imex-ctl -q --u=<socket>` once, as the plugin asks it."""
        return ctl.probe_ready(str(self.paths.ctl), unix_socket=str(self.paths.socket), timeout=timeout,
                               env=self.env)

    def wait_ready(self, timeout: float = 30.0) -> ctl.ProbeResult:
        """Until the socket answers READY.

        HostImexError (with the daemon's output) if the daemon exits during the wait, is not
        started, or does not answer in time. A crashed daemon is restarted by the supervisor
        meanwhile; `start()` stops it when its wait fails.
        """
        return self._wait_ready(timeout, self._crashes)

    def _wait_ready(self, timeout: float, crashes: int) -> ctl.ProbeResult:
        deadline = time.monotonic() + timeout
        last: ctl.ProbeResult | None = None
        while True:
            if self._crashes != crashes and self._last_crash is not None:
                code, tail = self._last_crash
                output = "\n".join(f"  | {line}" for line in tail) or "  | <no output>"
                raise HostImexError(f"host nvidia-imex of {self.paths.root} exited with code {code} "
                                    f"before answering READY (log {self.paths.log}):\n{output}")
            supervisor = self._supervisor
            if supervisor is None or not supervisor.active:
                raise HostImexError(f"host nvidia-imex of {self.paths.root} is not running; start it first")
            remaining = deadline - time.monotonic()
            if self.paths.socket.exists():
                last = self.probe(timeout=max(0.5, min(5.0, remaining)))
                if last.ready:
                    return last
            if remaining <= 0:
                detail = last.describe() if last is not None else f"socket {self.paths.socket} was never created"
                raise HostImexError(f"host nvidia-imex of {self.paths.root} not READY within {timeout:g}s: "
                                    f"{detail} (log {self.paths.log})")
            time.sleep(0.05)

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the daemon (SIGKILL after `grace`); its exit code, None if nothing ran."""
        with self._lock:
            supervisor, self._supervisor = self._supervisor, None
        if supervisor is None:
            return None
        return supervisor.stop(grace)

    def is_running(self) -> bool:
        """True while the daemon process is alive."""
        supervisor = self._supervisor
        return supervisor is not None and supervisor.running

    @property
    def pid(self) -> int | None:
        """PID of the daemon, or None."""
        supervisor = self._supervisor
        return supervisor.pid if supervisor is not None else None

    def last_output(self, n: int = 20) -> list[str]:
        """The daemon's last output lines."""
        supervisor = self._supervisor
        return supervisor.last_output_lines(n) if supervisor is not None else []

    def __enter__(self) -> HostImexService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
