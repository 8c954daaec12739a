"""Host-managed IMEX: is the administrator's nvidia-imex service on this node READY?

As upstream does, ``nvidia-imex-ctl -q --u=<socket>`` runs chrooted into the driver root, so
the host's own binary finds its own libraries and the socket path is the host's. Where the
chroot cannot run it (no CAP_SYS_CHROOT, or the ctl needs something the root lacks) the ctl
is run directly, with the socket path translated into the driver root. Any output line that
says READY (and not NOT READY) counts as ready.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from cdriver.imex import ctl
from cdriver.imex.config import IMEX_CTL_BINARY
from cdriver.imex.ctl import IMEX_READY_OUTPUT

log = logging.getLogger(__name__)

#: Exit statuses of chroot(1) itself: it could not chroot (125), or not run the command (126, 127).
CHROOT_FAILED = (125, 126, 127, ctl.RC_NOT_FOUND, ctl.RC_NOT_EXECUTABLE)


def host_socket(driver_root: Path, socket_path: str) -> Path:
    """The host service's command socket as this process sees it (inside the driver root)."""
    return Path(driver_root) / str(socket_path).lstrip("/")


def says_ready(returncode: int, output: str) -> bool:
    """Exit 0 and a line carrying the word READY without NOT (e.g. "READY", "Status: READY")."""
    if returncode != 0:
        return False
    for line in output.splitlines():
        words = re.split(r"[^A-Z_]+", line.upper())
        if IMEX_READY_OUTPUT in words and "NOT" not in words and "NOT_READY" not in words:
            return True
    return False


def _probe(driver_root: Path, ctl_path: str, socket_path: str, timeout: float) -> ctl.ProbeResult:
    if os.path.realpath(driver_root) != "/":
        inside = "/" + os.path.relpath(ctl_path, driver_root)
        chrooted = ctl.probe_ready(inside, unix_socket=socket_path, timeout=timeout,
                                   prefix=("chroot", str(driver_root)))
        if chrooted.returncode not in CHROOT_FAILED:
            return chrooted
        log.debug("chrooted readiness check unavailable (%s); running the ctl directly", chrooted.describe())
    return ctl.probe_ready(ctl_path, unix_socket=str(host_socket(driver_root, socket_path)), timeout=timeout)


def check_host_imex(driver_root: Path, socket_path: str, timeout: float = 5.0) -> str:
    """Return "" when the host daemon answers READY, else why not (socket and output named)."""
    sock = host_socket(driver_root, socket_path)
    ctl_path = ctl.find_ctl(str(driver_root))
    if ctl_path is None:
        return (
            f"host nvidia-imex daemon readiness check failed: {IMEX_CTL_BINARY} not found under driver "
            f"root {str(driver_root)!r} (searched /, opt/bin, usr/bin, usr/sbin, bin, sbin): is nvidia-imex "
            "installed on the host?"
        )
    result = _probe(Path(driver_root), ctl_path, socket_path, timeout)
    if says_ready(result.returncode, result.output):
        return ""
    return (
        f"host nvidia-imex daemon readiness check failed for socket {sock} (--imex-host-socket-path "
        f"{socket_path}): {result.describe()}; start the host nvidia-imex service with "
        f"IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH={socket_path}"
    )
