"""Server side of RFC 6455 WebSockets, as much as the Kubernetes streaming protocols need.

Pure framing helpers plus `WebSocketConn`, which reads client messages (masked, possibly
fragmented, with pings answered) and sends binary frames from several threads safely.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
from collections.abc import Callable

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
MAX_MESSAGE = 64 * 1024 * 1024


class WebSocketError(Exception):
    """The peer broke the protocol or went away."""


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode()).digest()).decode()


def choose_protocol(offered: str, supported: tuple[str, ...]) -> str | None:
    """The first of `supported` (our preference order) among the client's offered protocols."""
    names = {p.strip() for p in offered.split(",") if p.strip()}
    for proto in supported:
        if proto in names:
            return proto
    return None


def encode_frame(opcode: int, payload: bytes, mask_key: bytes | None = None, fin: bool = True) -> bytes:
    """One frame; servers send unmasked frames, clients masked ones (`mask_key`)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    mask_bit = 0x80 if mask_key else 0
    if n < 126:
        head += bytes([mask_bit | n])
    elif n < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", n)
    if mask_key:
        return head + mask_key + apply_mask(payload, mask_key)
    return head + payload


def apply_mask(data: bytes, key: bytes) -> bytes:
    if not data:
        return data
    repeated = (key * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(data), "big")


def close_payload(code: int = CLOSE_NORMAL, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode()[:120]


def read_frame(recv_exact: Callable[[int], bytes]) -> tuple[bool, int, bytes]:
    """(fin, opcode, unmasked payload) of the next frame."""
    b1, b2 = recv_exact(2)
    fin, opcode = bool(b1 & 0x80), b1 & 0x0F
    masked, n = bool(b2 & 0x80), b2 & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(8))[0]
    if n > MAX_MESSAGE:
        raise WebSocketError(f"frame of {n} bytes is too large")
    key = recv_exact(4) if masked else b""
    payload = recv_exact(n) if n else b""
    return fin, opcode, apply_mask(payload, key) if masked else payload


class WebSocketConn:
    """An upgraded connection (server side)."""

    def __init__(self, sock: socket.socket, rfile) -> None:
        self.sock = sock
        self.rfile = rfile  # buffered reader the HTTP request was read from
        self._send_lock = threading.Lock()
        self.closed_by_peer = False
        self._close_sent = False

    @property
    def close_sent(self) -> bool:
        return self._close_sent

    def _recv_exact(self, n: int) -> bytes:
        data = self.rfile.read(n)
        if data is None or len(data) < n:
            raise WebSocketError("connection closed by the peer")
        return data

    def send(self, payload: bytes, opcode: int = OP_BINARY) -> None:
        with self._send_lock:
            if self._close_sent:
                raise WebSocketError("connection is closing")
            self.sock.sendall(encode_frame(opcode, payload))

    def receive(self) -> bytes | None:
        """The next data message (pings answered); None once the peer closed."""
        parts: list[bytes] = []
        while True:
            try:
                fin, opcode, payload = read_frame(self._recv_exact)
            except (OSError, ValueError):
                self.closed_by_peer = True
                return None
            except WebSocketError:
                self.closed_by_peer = True
                return None
            if opcode == OP_CLOSE:
                self.closed_by_peer = True
                self.close(CLOSE_NORMAL)
                return None
            if opcode == OP_PING:
                try:
                    with self._send_lock:
                        if not self._close_sent:
                            self.sock.sendall(encode_frame(OP_PONG, payload))
                except OSError:
                    pass
                continue
            if opcode == OP_PONG:
                continue
            parts.append(payload)
            if sum(len(p) for p in parts) > MAX_MESSAGE:
                raise WebSocketError("message too large")
            if fin:
                return b"".join(parts)

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Send a close frame once."""
        with self._send_lock:
            if self._close_sent:
                return
            self._close_sent = True
            try:
                self.sock.sendall(encode_frame(OP_CLOSE, close_payload(code, reason)))
            except OSError:
                pass
