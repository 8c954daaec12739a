"""TCP bridges between the machine's loopback and the real nodes' network namespaces.

Real nodes live in network namespaces of their own; the control plane listens on the
machine's 127.0.0.1. Two bridges join them without giving the machine any other address:

- `Forwarder`: accepts inside a node's namespace (kubelet and pods reach the API server at the
  `kubernetes` Service address, which the node holds on its loopback) and connects to the API
  server on the machine's loopback.
- `ConnectProxy`: an HTTP CONNECT proxy on a Unix socket, the API server's egress for the
  "cluster" (kubelet) traffic: it connects to a node address inside that node's namespace,
  and to loopback addresses (simulated nodes) directly. Anything else is refused.

A socket belongs to the network namespace its creating thread was in; `socket_in` enters the
namespace on the calling thread only for the socket() call.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
BUFFER = 65536
_LIBC = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def entered(netns: Path | None) -> Iterator[None]:
    """Run the block on this thread inside network namespace `netns` (None: stay)."""
    if netns is None:
        yield
        return
    with open("/proc/thread-self/ns/net") as home, open(netns) as target:
        if _LIBC.setns(target.fileno(), CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
        try:
            yield
        finally:
            if _LIBC.setns(home.fileno(), CLONE_NEWNET) != 0:  # pragma: no cover - cannot recover
                os._exit(70)


def socket_in(netns: Path | None, family: int = socket.AF_INET) -> socket.socket:
    """A TCP socket of network namespace `netns` (None: this thread's)."""
    with entered(netns):
        return socket.socket(family, socket.SOCK_STREAM)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(BUFFER):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def splice(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides close; then close both."""
    other = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    other.start()
    _pipe(a, b)
    other.join()
    a.close()
    b.close()


class _Server:
    """An accept loop on a listening socket, one thread per connection."""

    def __init__(self, listener: socket.socket, handle: Callable[[socket.socket], None], name: str) -> None:
        self.listener = listener
        self.handle = handle
        self.name = name
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._guarded, args=(conn,), daemon=True).start()

    def _guarded(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        except OSError as e:
            log.debug("%s: %s", self.name, e)
            conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(timeout=5)


class Forwarder(_Server):
    """Listen on (`host`, `port`) inside `netns`; relay each connection to `target` on this
    process's own network (the machine's loopback)."""

    def __init__(self, netns: Path, host: str, port: int, target: tuple[str, int]) -> None:
        listener = socket_in(netns)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
        self.target = target
        super().__init__(listener, self._relay, f"forward {netns.name} {host}:{port}")

    def _relay(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(self.target, timeout=10)
        upstream.settimeout(None)
        splice(conn, upstream)


class ConnectProxy(_Server):
    """HTTP CONNECT proxy on a Unix socket: `routes` maps a node address to the namespace
    holding it; loopback addresses are dialled here; every other destination is refused."""

    def __init__(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(128)
        self.path = path
        self.routes: dict[str, Path] = {}
        super().__init__(listener, self._connect, f"connect-proxy {path}")

    def _netns_for(self, host: str) -> Path | None:
        if host in self.routes:
            return self.routes[host]
        if ipaddress.ip_address(host).is_loopback:
            return None
        raise PermissionError(f"no node has address {host}")

    def _connect(self, conn: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(4096)
            if not chunk or len(request) > 16384:
                conn.close()
                return
            request += chunk
        head, _, rest = request.partition(b"\r\n\r\n")
        method, target, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        try:
            if method != "CONNECT":
                raise PermissionError(f"only CONNECT is served, not {method}")
            host, _, port = target.rpartition(":")
            host = host.strip("[]")
            upstream = socket_in(self._netns_for(host))
            upstream.settimeout(10)
            upstream.connect((host, int(port)))
            upstream.settimeout(None)
        except (OSError, ValueError) as e:
            conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nX-Error: {e}\r\n\r\n".encode())
            conn.close()
            return
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        splice(conn, upstream)

    def stop(self) -> None:
        super().stop()
        self.path.unlink(missing_ok=True)
