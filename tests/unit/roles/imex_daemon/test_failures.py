"""Failure diagnosis: port held by another process, start-up exits, state for the probe."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from cdriver.roles.imex_daemon import failures


def test_imex_ports_follow_the_config() -> None:
    assert failures.imex_ports({}) == [50000, 50005]
    assert failures.imex_ports({"SERVER_PORT": "51000", "IMEX_CMD_PORT": "51005"}) == [51000, 51005]
    assert failures.imex_ports({"IMEX_CMD_ENABLED": "0"}) == [50000]
    assert failures.imex_ports({"SERVER_PORT": "x"}) == [50005]


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def test_a_listener_on_the_pod_ip_is_found_with_its_process() -> None:
    ip = "127.0.0.1"
    port = _free_port(ip)
    assert failures.find_port_holder(ip, [port]) is None
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ip, port))
        listener.listen()
        holder = failures.find_port_holder(ip, [port])
        assert holder is not None
        assert holder.port == port and holder.pid == os.getpid()
        assert failures.find_port_holder(ip, [port], exclude_pids={os.getpid()}) is None
        msg = failures.port_conflict_message(ip, holder)
    assert f"IMEX port {port} on pod IP {ip} is already in use by process {os.getpid()}" in msg
    assert "systemctl disable --now nvidia-imex.service" in msg
    assert "readiness probe would talk to the wrong daemon" in msg


def test_a_wildcard_listener_also_conflicts() -> None:
    port = _free_port("0.0.0.0")
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", port))
        listener.listen()
        holder = failures.find_port_holder("127.0.0.1", [port])
    assert holder is not None and holder.pid == os.getpid()


def test_a_closed_connection_in_time_wait_is_not_a_conflict() -> None:
    ip = "127.0.0.1"
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ip, 0))
        port = listener.getsockname()[1]
        listener.listen()
        client = socket.create_connection((ip, port))
        server_side, _ = listener.accept()
        server_side.close()  # server closes first: its side lingers in TIME_WAIT
        client.close()
    assert failures.find_port_holder(ip, [port]) is None


def test_startup_failure_message_carries_code_restarts_and_last_lines() -> None:
    msg = failures.startup_failure_message(1, 3, ["starting", "", "error: bad SERVER_PORT 'x'"])
    assert msg == ("nvidia-imex exited during start-up (exit 1, restart count 3); last output: "
                   "starting | error: bad SERVER_PORT 'x'")
    assert "exit signal 9" in failures.crash_message(-9, 0, [])
    assert "(no output)" in failures.crash_message(-9, 0, [])


def test_event_messages_are_capped_keeping_the_tail() -> None:
    msg = "x" * 2000 + "THE ERROR"
    out = failures.truncate_event_message(msg)
    assert len(out) <= 1024 and out.endswith("THE ERROR")


def test_state_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert failures.read_state(path) is None
    failures.write_state(path, failures.PHASE_PORT_CONFLICT, "port taken")
    assert failures.read_state(path) == {"phase": "port-conflict", "message": "port taken"}
    failures.clear_state(path)
    failures.clear_state(path)
    assert failures.read_state(path) is None
    path.write_text("{not json")
    assert failures.read_state(path) is None


def test_command_port_follows_the_config() -> None:
    assert failures.command_port({}) == 50005
    assert failures.command_port({"IMEX_CMD_PORT": "6000"}) == 6000
    assert failures.command_port({"IMEX_CMD_ENABLED": "0"}) is None
    assert failures.command_port({"IMEX_CMD_PORT": "0"}) is None
