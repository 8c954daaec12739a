"""Failures users hit in the field, diagnosed and worded so they can act on them.

- nvidia-imex exiting during start-up: its last output lines and the restart count.
- the IMEX port on the pod IP already held by another process (typically a host
  nvidia-imex.service left running while the driver manages IMEX): who holds it and how to
  fix it, instead of letting the readiness probe talk to the wrong daemon.

A small state file in /imexd carries a blocking condition to the `check` probe.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from cdriver.atomic import atomic_write
from cdriver.imex.config import IMEX_CMD_PORT, IMEX_SERVER_PORT

HOST_IMEX_SERVICE = "nvidia-imex.service"
EVENT_REASON_IMEX_START_FAILED = "IMEXDaemonStartFailed"
EVENT_REASON_IMEX_PORT_CONFLICT = "IMEXPortConflict"
EVENT_REASON_IMEX_RESTARTED = "IMEXDaemonRestarted"

log = logging.getLogger(__name__)

PHASE_PORT_CONFLICT = "port-conflict"


@dataclass(frozen=True)
class PortHolder:
    """A process listening on a port we need (pid/name unknown when not visible to us)."""

    port: int
    pid: int | None = None
    name: str = ""
    cmdline: str = ""


def _config_port(config: dict[str, str], key: str, default: int) -> int | None:
    value = (config.get(key) or "").strip()
    try:
        port = int(value) if value else default
    except ValueError:
        return None  # nvidia-imex itself reports the bad value at start-up
    return port if 0 < port < 65536 else None


def command_port(config: dict[str, str]) -> int | None:
    """The command service port (`nvidia-imex-ctl` talks to it), None when disabled or invalid."""
    if (config.get("IMEX_CMD_ENABLED") or "1").strip() == "0":
        return None
    return _config_port(config, "IMEX_CMD_PORT", IMEX_CMD_PORT)


def imex_ports(config: dict[str, str]) -> list[int]:
    """Ports nvidia-imex binds on the pod IP, from its parsed config (defaults 50000/50005)."""
    ports = []
    for port in (_config_port(config, "SERVER_PORT", IMEX_SERVER_PORT), command_port(config)):
        if port is not None and port not in ports:
            ports.append(port)
    return ports


def _port_in_use(ip: str, port: int) -> bool:
    """True when binding ip:port fails because something listens there.

    SO_REUSEADDR makes lingering TIME_WAIT connections of an earlier nvidia-imex not count.
    """
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _listener(ip: str, port: int) -> PortHolder:
    import psutil

    wildcard = {ip, "0.0.0.0", "::", "::ffff:" + ip}
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return PortHolder(port)
    for conn in conns:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip not in wildcard:
            continue
        if conn.pid is None:
            return PortHolder(port)
        try:
            proc = psutil.Process(conn.pid)
            return PortHolder(port, conn.pid, proc.name(), " ".join(proc.cmdline()))
        except psutil.Error:
            return PortHolder(port, conn.pid)
    return PortHolder(port)


def find_port_holder(ip: str, ports: list[int], exclude_pids: set[int] | None = None) -> PortHolder | None:
    """The first of `ports` on `ip` that another process listens on, or None."""
    for port in ports:
        if _port_in_use(ip, port):
            holder = _listener(ip, port)
            if holder.pid is not None and holder.pid in (exclude_pids or set()):
                continue
            return holder
    return None


def port_conflict_message(ip: str, holder: PortHolder) -> str:
    """What is wrong, who holds the port, and how to fix it."""
    who = "another process"
    if holder.pid is not None:
        who = f"process {holder.pid}" + (f" ({holder.name})" if holder.name else "")
        if holder.cmdline:
            who += f": {holder.cmdline}"
    return (
        f"IMEX port {holder.port} on pod IP {ip} is already in use by {who}; nvidia-imex for this "
        "ComputeDomain cannot start, and a readiness probe would talk to the wrong daemon. This is "
        f"typically the host's {HOST_IMEX_SERVICE} left running while IMEX is driver-managed. "
        f"Fix: on this node run `systemctl disable --now {HOST_IMEX_SERVICE}` (or stop whatever "
        "holds the port); this daemon starts nvidia-imex as soon as the port is free. To use the "
        "host service instead, install the driver with resources.computeDomains.imex.mode=hostManaged "
        "(and the HostManagedIMEXDaemon feature gate)."
    )


def _exit_text(exit_code: int | None) -> str:
    if exit_code is None:
        return "unknown"
    return f"signal {-exit_code}" if exit_code < 0 else str(exit_code)


def _tail(lines: list[str]) -> str:
    return " | ".join(line.strip() for line in lines if line.strip()) or "(no output)"


def startup_failure_message(exit_code: int | None, restart_count: int, lines: list[str]) -> str:
    """nvidia-imex exited before it ever answered READY: code, restarts so far, last output."""
    return (
        f"nvidia-imex exited during start-up (exit {_exit_text(exit_code)}, restart count "
        f"{restart_count}); last output: {_tail(lines)}"
    )


def crash_message(exit_code: int | None, restart_count: int, lines: list[str]) -> str:
    """nvidia-imex exited after it had been ready; the supervisor restarts it."""
    return (
        f"nvidia-imex exited unexpectedly (exit {_exit_text(exit_code)}, restart count "
        f"{restart_count}); it is restarted; last output: {_tail(lines)}"
    )


def truncate_event_message(message: str, limit: int = 1024) -> str:
    """Kubernetes caps Event messages at 1 KiB; keep the end, where the error lines are."""
    if len(message) <= limit:
        return message
    return message[: limit // 3] + " ... " + message[-(limit - limit // 3 - 5):]


# --- state shared with `check` -------------------------------------------------------


def write_state(path: Path, phase: str, message: str) -> None:
    """Record a blocking condition for the probe (atomic)."""
    atomic_write(path, json.dumps({"phase": phase, "message": message}) + "\n")


def clear_state(path: Path) -> None:
    """Remove the blocking condition (idempotent)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def read_state(path: Path) -> dict | None:
    """The recorded blocking condition, or None (missing or unreadable file: nothing blocks)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("phase") else None
