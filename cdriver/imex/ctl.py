"""Asking an IMEX daemon about itself through `nvidia-imex-ctl`.

`probe_ready` runs `-q` (local readiness; the daemon's readiness probe and the host-managed
check) and `query_domain` runs `-N -j` (whole-domain status as JSON). Both capture the ctl's
output so that errors can show it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdriver.errors import CdriverError
from cdriver.imex.config import IMEX_CTL_BINARY

IMEX_READY_OUTPUT = "READY"  # what `nvidia-imex-ctl -q` prints for a ready daemon
DEFAULT_HOST_IMEX_SOCKET = "/etc/nvidia-imex/imex_ctrl.sock"

RC_TIMEOUT = -1
RC_NOT_FOUND = 127
RC_NOT_EXECUTABLE = 126


class ImexCtlError(CdriverError):
    """nvidia-imex-ctl failed or printed something unusable (message carries its output)."""


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one `nvidia-imex-ctl -q` run."""

    ready: bool
    output: str  # stdout then stderr, as printed
    returncode: int  # RC_TIMEOUT on timeout, 127/126 when the ctl could not be run
    argv: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for logs and errors: command, exit status and output."""
        cmd = " ".join(self.argv) or IMEX_CTL_BINARY
        out = self.output.strip() or "<no output>"
        if self.ready:
            return f"{cmd}: {out}"
        if self.returncode == RC_TIMEOUT:
            return f"{cmd} timed out: {out}"
        if self.returncode == 0:
            return f"IMEX daemon not ready: {cmd} printed {out!r}, want {IMEX_READY_OUTPUT!r}"
        return f"IMEX daemon not ready: {cmd} exited {self.returncode}: {out}"


def ctl_argv(
    ctl_path: str,
    mode: Sequence[str],
    config_path: str | None = None,
    unix_socket: str | None = None,
    prefix: Sequence[str] = (),
) -> list[str]:
    """argv for nvidia-imex-ctl: `-c <cfg> <mode>` or `<mode> --u=<socket>` (host-managed form)."""
    if config_path and unix_socket:
        raise ValueError("pass either config_path or unix_socket, not both")
    argv = [*prefix, ctl_path]
    if config_path:
        argv += ["-c", config_path, *mode]
    elif unix_socket:
        argv += [*mode, f"--u={unix_socket}"]
    else:
        argv += list(mode)
    return argv


def interpret_probe(returncode: int, stdout: str) -> bool:
    """Ready only on exit 0 with stdout exactly READY (surrounding whitespace ignored)."""
    return returncode == 0 and stdout.strip() == IMEX_READY_OUTPUT


def _run(argv: list[str], timeout: float, env: Mapping[str, str] | None) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        partial = _text(e.stdout) + _text(e.stderr)
        detail = f": {partial.strip()}" if partial.strip() else ""
        return RC_TIMEOUT, "", f"no answer within {timeout:g}s{detail}"
    except FileNotFoundError:
        return RC_NOT_FOUND, "", f"{argv[0]} not found; is {IMEX_CTL_BINARY} installed in the driver root?"
    except PermissionError:
        return RC_NOT_EXECUTABLE, "", f"{argv[0]} is not executable; check its mode"
    except OSError as e:
        return RC_NOT_EXECUTABLE, "", f"cannot run {argv[0]}: {e.strerror or e}"
    return proc.returncode, _text(proc.stdout), _text(proc.stderr)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


def probe_ready(
    ctl_path: str = IMEX_CTL_BINARY,
    config_path: str | None = None,
    unix_socket: str | None = None,
    timeout: float = 5,
    prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ProbeResult:
    """Run `nvidia-imex-ctl -q` once; never raises for a failed or missing ctl.

    `prefix` goes before the ctl (e.g. `("chroot", root)` for the host-managed check).
    """
    argv = ctl_argv(ctl_path, ["-q"], config_path, unix_socket, prefix)
    rc, stdout, stderr = _run(argv, timeout, env)
    return ProbeResult(
        ready=interpret_probe(rc, stdout), output=stdout + stderr, returncode=rc, argv=tuple(argv)
    )


def query_domain(
    ctl_path: str = IMEX_CTL_BINARY,
    config_path: str | None = None,
    unix_socket: str | None = None,
    timeout: float = 5,
    prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> dict:
    """Run `nvidia-imex-ctl -N -j` and return the domain status document.

    The document has `status` (UP / DEGRADED / DOWN) and `nodes` (index -> node with
    `status`, `host`, `version`, `connections`). Raises ImexCtlError with the ctl's output.
    """
    argv = ctl_argv(ctl_path, ["-N", "-j"], config_path, unix_socket, prefix)
    rc, stdout, stderr = _run(argv, timeout, env)
    cmd = " ".join(argv)
    if rc != 0:
        out = (stdout + stderr).strip() or "<no output>"
        raise ImexCtlError(f"{cmd} exited {rc}: {out}")
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as e:
        raise ImexCtlError(
            f"{cmd} printed invalid JSON ({e.msg} at line {e.lineno}): {stdout[:200]!r}"
        ) from None
    return parse_domain_document(doc, cmd)


def parse_domain_document(doc: object, source: str = "domain status") -> dict:
    """Check the shape of a `-N -j` document: an object with a string `status` and object `nodes`."""
    if not isinstance(doc, dict):
        raise ImexCtlError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    if not isinstance(doc.get("status"), str):
        raise ImexCtlError(f"{source}: missing string field 'status'")
    nodes = doc.get("nodes", {})
    if not isinstance(nodes, dict) or not all(isinstance(n, dict) for n in nodes.values()):
        raise ImexCtlError(f"{source}: 'nodes' must be an object of node objects")
    return doc


def find_ctl(driver_root: str, name: str = IMEX_CTL_BINARY) -> str | None:
    """Path of `name` under a driver root's usual bin dirs (regular file), or None."""
    for sub in ("", "opt/bin", "usr/bin", "usr/sbin", "bin", "sbin"):
        candidate = os.path.join(driver_root, sub, name)
        if os.path.isfile(os.path.realpath(candidate)):
            return candidate
    return None
