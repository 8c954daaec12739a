"""The API server's egress proxy for real nodes: it relays to loopback and to known node
addresses, and refuses every other destination without dialling it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.sim.node.real.relay import ConnectProxy


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ConnectProxy]:
    p = ConnectProxy(tmp_path / "egress.sock")
    p.start()
    yield p
    p.stop()


def echo_server() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"echo:" + conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def connect(proxy: ConnectProxy, target: str) -> tuple[socket.socket, bytes]:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(str(proxy.path))
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(1)
        if not chunk:
            break
        head += chunk
    return client, head


def test_connect_to_loopback_relays_both_ways(proxy: ConnectProxy) -> None:
    server, port = echo_server()
    with server:
        client, head = connect(proxy, f"127.0.0.1:{port}")
        with client:
            assert head.startswith(b"HTTP/1.1 200")
            client.sendall(b"hello")
            assert client.recv(100) == b"echo:hello"


def test_connect_elsewhere_is_refused(proxy: ConnectProxy) -> None:
    client, head = connect(proxy, "192.0.2.7:10250")
    with client:
        assert head.startswith(b"HTTP/1.1 502")
        assert b"no node has address 192.0.2.7" in head


def test_proxy_socket_is_removed_on_stop(tmp_path: Path) -> None:
    p = ConnectProxy(tmp_path / "e.sock")
    p.start()
    assert (tmp_path / "e.sock").exists()
    p.stop()
    assert not (tmp_path / "e.sock").exists()
