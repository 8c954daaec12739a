"""WebSocket framing and the kubelet API's exec/log helpers on simulated nodes."""

from __future__ import annotations

import datetime as dt
import io
import socket

import pytest

from cdriver.sim.node.simulated import kubelet_server as ks
from cdriver.sim.node.simulated import logs
from cdriver.sim.node.simulated import websocket as ws


def test_accept_key_matches_rfc_6455_example() -> None:
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_protocol_choice_prefers_v5_over_v4() -> None:
    supported = ks.SUPPORTED_PROTOCOLS
    assert ws.choose_protocol("v4.channel.k8s.io, v5.channel.k8s.io", supported) == "v5.channel.k8s.io"
    assert ws.choose_protocol("v4.channel.k8s.io", supported) == "v4.channel.k8s.io"
    assert ws.choose_protocol("channel.k8s.io", supported) is None


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65535, 65536, 200000])
def test_frames_round_trip_masked_and_unmasked(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for mask in (None, b"\x01\x02\x03\x04"):
        data = io.BytesIO(ws.encode_frame(ws.OP_BINARY, payload, mask))
        fin, opcode, got = ws.read_frame(data.read)
        assert (fin, opcode, got) == (True, ws.OP_BINARY, payload)


def test_connection_joins_fragments_answers_pings_and_sees_close() -> None:
    server, client = socket.socketpair()
    key = b"\x0a\x0b\x0c\x0d"
    client.sendall(ws.encode_frame(ws.OP_BINARY, b"\x00hel", key, fin=False)
                   + ws.encode_frame(ws.OP_PING, b"p", key)
                   + ws.encode_frame(ws.OP_CONTINUATION, b"lo", key)
                   + ws.encode_frame(ws.OP_CLOSE, ws.close_payload(), key))
    conn = ws.WebSocketConn(server, server.makefile("rb"))
    assert conn.receive() == b"\x00hello"
    assert conn.receive() is None and conn.closed_by_peer
    reply = client.makefile("rb")
    assert ws.read_frame(lambda n: reply.read(n)) == (True, ws.OP_PONG, b"p")
    assert ws.read_frame(lambda n: reply.read(n))[1] == ws.OP_CLOSE
    with pytest.raises(ws.WebSocketError):
        conn.send(b"late")
    server.close()
    client.close()


def test_exit_status_carries_the_exit_code_for_kubectl() -> None:
    assert ks.exit_status(0, ["true"]) == {"metadata": {}, "status": "Success"}
    failed = ks.exit_status(3, ["sh"])
    assert failed["reason"] == "NonZeroExitCode"
    assert failed["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]


def test_flags_accept_kubelet_and_client_names() -> None:
    query = {"output": ["1"], "stdin": ["true"], "tty": ["0"]}
    assert ks.flag(query, "output", "stdout") and ks.flag(query, "input", "stdin")
    assert not ks.flag(query, "tty") and not ks.flag(query, "error", "stderr")


def test_since_filter_keeps_recent_entries() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    entries = [logs.Entry(logs.timestamp(now - dt.timedelta(seconds=s)), "stdout", b"x\n") for s in (30, 5)]
    assert ks.filter_since(entries, now - dt.timedelta(seconds=10)) == entries[1:]
    assert ks.filter_since(entries, None) == entries
