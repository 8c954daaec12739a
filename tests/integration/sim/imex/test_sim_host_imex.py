"""The simulated host IMEX service: real stand-in daemons on Unix sockets, outside pods.

What the simulated node agent and `cdriver sim host-imex` rely on: the service answers READY
on `<driver root>/etc/nvidia-imex/imex_ctrl.sock` through the driver root's nvidia-imex-ctl,
a daemon that cannot start is reported with its own output, a new peer list reaches the
running daemon, a killed daemon comes back, and the CLI starts, reports and stops a
detached service.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cdriver.imex import ctl
from cdriver.imex.config import IMEX_CTL_BINARY
from cdriver.sim.gpu.driver_root import DriverRoot, create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path
from cdriver.sim.imex.host_service import HostImexError, HostImexService, host_check_args
from cdriver.sim.imex.protocol import (
    IMEX_DOMAIN_UP,
    IMEX_NODE_READY,
)
from cdriver.sim.node.addresses import lease_block
from tests.support.imex_standin import free_ports
from tests.support.imex_timing import fast_imex_env
from tests.support.waiting import wait_for

#: addresses of a block leased for this test run, so other runs' clusters never share their ports
BLOCK = lease_block()
IP_A, IP_B = BLOCK.ip(11), BLOCK.ip(12)
FAST = fast_imex_env()
ENV = {**os.environ, **FAST}


def cdriver_argv() -> list[str]:
    script = Path(sys.executable).with_name("cdriver")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "cdriver"]


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hi-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def roots(base: Path) -> tuple[DriverRoot, DriverRoot]:
    return (create_driver_root(base / "a", "worker-1", demo_topology_path(), channel_count=1),
            create_driver_root(base / "b", "worker-2", demo_topology_path(), channel_count=1))


@pytest.fixture
def services() -> Iterator[list[HostImexService]]:
    started: list[HostImexService] = []
    yield started
    for service in started:
        service.stop()


def domain(service: HostImexService) -> dict:
    return ctl.query_domain(str(service.paths.ctl), unix_socket=str(service.paths.socket), timeout=10, env=ENV)


def ready_nodes(service: HostImexService) -> int:
    return sum(node.get("status") == IMEX_NODE_READY for node in domain(service)["nodes"].values())


def test_service_answers_ready_on_the_socket_below_the_driver_root(
        roots: tuple[DriverRoot, DriverRoot], services: list[HostImexService]) -> None:
    ports = free_ports([IP_A])
    service = HostImexService(roots[0], IP_A, server_port=ports[0], cmd_port=ports[1], env=ENV)
    services.append(service)
    assert not service.is_running()
    service.start()
    assert service.is_running()
    assert service.paths.socket == roots[0].root / "etc/nvidia-imex/imex_ctrl.sock"
    result = ctl.probe_ready(str(roots[0].bin_dir / IMEX_CTL_BINARY), unix_socket=str(service.paths.socket),
                             env=ENV)
    assert result.ready, result.describe()
    pid = service.pid
    service.start()  # already running: nothing happens
    assert service.pid == pid
    assert service.stop() == 0
    assert not service.is_running()
    assert not service.paths.socket.exists()  # a clean shutdown removes its socket


def test_two_nodes_form_one_host_domain_and_pick_up_new_peers(
        roots: tuple[DriverRoot, DriverRoot], services: list[HostImexService]) -> None:
    ports = free_ports([IP_A, IP_B])
    a = HostImexService(roots[0], IP_A, server_port=ports[0], cmd_port=ports[1], env=ENV)
    b = HostImexService(roots[1], IP_B, [IP_A], server_port=ports[0], cmd_port=ports[1], env=ENV)
    services += [a, b]
    a.start()
    b.start()
    assert len(domain(a)["nodes"]) == 1  # a does not know b yet
    a.set_peers([IP_B])  # rewrites the nodes config and signals the running daemon
    assert a.paths.nodes_config.read_text().split() == [IP_A, IP_B]
    wait_for("a sees b", lambda: ready_nodes(a) == 2 and domain(a)["status"] == IMEX_DOMAIN_UP, 15)
    wait_for("b sees a", lambda: ready_nodes(b) == 2, 15)


def test_a_daemon_that_cannot_start_is_reported_with_its_output(
        roots: tuple[DriverRoot, DriverRoot], services: list[HostImexService]) -> None:
    ports = free_ports([IP_A])
    with socket.socket() as busy:
        busy.bind((IP_A, ports[0]))
        busy.listen()
        service = HostImexService(roots[0], IP_A, server_port=ports[0], cmd_port=ports[1], env=ENV)
        services.append(service)
        with pytest.raises(HostImexError) as info:
            service.start(timeout=30)
    message = str(info.value)
    assert "exited with code 1 before answering READY" in message
    assert f"{IP_A}:{ports[0]}" in message and "address already in use" in message
    assert str(service.paths.log) in message
    assert not service.is_running()


def test_a_killed_daemon_is_restarted(roots: tuple[DriverRoot, DriverRoot],
                                      services: list[HostImexService]) -> None:
    ports = free_ports([IP_A])
    service = HostImexService(roots[0], IP_A, server_port=ports[0], cmd_port=ports[1], env=ENV,
                              initial_backoff=0.1)
    services.append(service)
    service.start()
    first = service.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for("a new daemon", lambda: service.pid not in (None, first), 15)
    assert service.wait_ready(30).ready


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cdriver_argv(), "sim", "host-imex", *args], capture_output=True, text=True,
                          timeout=90, env=ENV)


def test_cli_starts_reports_and_stops_a_detached_service(roots: tuple[DriverRoot, DriverRoot]) -> None:
    root = str(roots[0].root)
    ports = free_ports([IP_A])
    start = ["start", "--driver-root", root, "--ip", IP_A, "--server-port", str(ports[0]),
             "--cmd-port", str(ports[1])]
    try:
        proc = run_cli(*start)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "answers READY" in proc.stdout

        status = run_cli("status", "--driver-root", root, "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        doc = json.loads(status.stdout)
        assert doc["running"] is True and doc["ready"] is True
        assert doc["socket"] == str(roots[0].root / "etc/nvidia-imex/imex_ctrl.sock")
        assert doc["daemonPid"] is not None

        again = run_cli(*start)
        assert again.returncode == 0 and "already running" in again.stdout

        check = subprocess.run([*cdriver_argv(), "host-check", *host_check_args(root), "--json"],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout
    finally:
        stop = run_cli("stop", "--driver-root", root)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "stopped" in stop.stdout
    status = run_cli("status", "--driver-root", root)
    assert status.returncode == 3 and "not running" in status.stdout
    assert not psutil_pid_alive(doc["daemonPid"])
    assert not (roots[0].root / "run/nvidia-imex/host-imex.pid").exists()


def psutil_pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_cli_refuses_a_directory_that_is_not_a_driver_root(base: Path) -> None:
    proc = run_cli("start", "--driver-root", str(base), "--ip", IP_A)
    assert proc.returncode == 1
    assert "is not a simulated driver root; create it with `cdriver sim driver-root`" in proc.stderr
    bad_ip = run_cli("start", "--driver-root", str(base), "--ip", "node-a")
    assert bad_ip.returncode == 1
    assert "--ip 'node-a' is not an IP address" in bad_ip.stderr
