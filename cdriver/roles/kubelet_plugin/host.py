"""Host-managed IMEX: is the administrator's nvidia-imex service on this node READY?

The ctl is looked up in the driver root's usual bin dirs and asked ``-q --u=<socket>``; the
socket path is the configured one inside the driver root.
"""

from __future__ import annotations

from pathlib import Path

from cdriver.imex import ctl
from cdriver.imex.config import IMEX_CTL_BINARY


def host_socket(driver_root: Path, socket_path: str) -> Path:
    """The host service's command socket as this process sees it (inside the driver root)."""
    return Path(driver_root) / str(socket_path).lstrip("/")


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
    result = ctl.probe_ready(ctl_path, unix_socket=str(sock), timeout=timeout)
    if result.ready:
        return ""
    return (
        f"host nvidia-imex daemon readiness check failed for socket {sock} (--imex-host-socket-path "
        f"{socket_path}): {result.describe()}; start the host nvidia-imex service with "
        f"IMEX_CMD_ENABLED=1 and IMEX_CMD_UNIX_DOMAIN_PATH={socket_path}"
    )
