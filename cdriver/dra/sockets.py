"""gRPC servers on Unix sockets: stale-file replacement, path checks, owner-only mode."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

#: sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


class SocketError(CdriverError):
    """A Unix socket could not be served (bad path, not removable, bind failure)."""


def check_socket_path(path: Path) -> None:
    """Raise SocketError if path cannot be a Unix socket address."""
    if not path.is_absolute():
        raise SocketError(f"socket path {str(path)!r} must be absolute")
    size = len(os.fsencode(str(path)))
    if size > MAX_SOCKET_PATH:
        raise SocketError(
            f"socket path {str(path)!r} is {size} bytes long; Unix sockets allow at most "
            f"{MAX_SOCKET_PATH}: choose a shorter kubelet directory"
        )


def remove_stale(path: Path) -> bool:
    """Remove a leftover socket (or file) at path; True if something was removed.

    A directory at that path is an operator error and is reported, never removed.
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise SocketError(f"{path} is a directory; remove it so the socket can be created there")
    path.unlink()
    log.info("removed stale socket %s", path)
    return True


def serve_unix(
    path: Path,
    register: list[Callable[[grpc.Server], None]],
    max_workers: int = 16,
    mode: int = 0o600,
) -> grpc.Server:
    """Start a gRPC server listening on the Unix socket `path` and return it.

    `register` holds functions like ``add_FooServicer_to_server`` bound to their servicer.
    Parent directories are created; a stale socket file is replaced; the socket gets `mode`.
    """
    path = Path(path)
    check_socket_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=f"grpc-{path.name}"),
        options=[("grpc.so_reuseport", 0)],
    )
    for add in register:
        add(server)
    try:
        server.add_insecure_port(f"unix://{path}")
    except RuntimeError as exc:
        raise SocketError(f"cannot listen on {path}: {exc}") from exc
    server.start()
    os.chmod(path, mode)
    log.info("serving gRPC on unix://%s", path)
    return server


def stop_server(server: grpc.Server | None, path: Path | None = None, grace: float = 1.0) -> None:
    """Stop a server (waiting up to `grace` s for in-flight calls) and make sure its socket is gone."""
    if server is not None:
        server.stop(grace).wait(grace + 1)
    if path is not None:
        try:
            Path(path).unlink()
        except FileNotFoundError:
            pass
