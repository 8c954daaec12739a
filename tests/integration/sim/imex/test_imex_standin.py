"""IMEX stand-ins as real processes on loopback addresses (no Kubernetes needed).

Seed-003 scenario 2 at process level: daemon A alone is READY but the domain is not UP;
B joins and the domain is UP with two READY NO_GPU nodes; B is SIGKILLed and A reports
DEGRADED. Plus SIGUSR1 re-reading DNS names, the Unix-socket probe, broken configs and
busy ports, and the stand-in running under the production supervisor.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.imex import ctl
from cdriver.imex.hosts import rewrite_hosts_file
from cdriver.imex.names import dns_names
from cdriver.imex.supervisor import ProcessSupervisor
from cdriver.sim.imex.protocol import (
    ENV_SIM_HOSTS_FILE,
)
from cdriver.sim.node.addresses import lease_block
from tests.support.imex_standin import StandInWorld
from tests.support.waiting import wait_for

#: addresses of a block leased for this test run, so other runs' clusters never share their ports
BLOCK = lease_block()
A_IP, B_IP = BLOCK.ip(1), BLOCK.ip(2)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[StandInWorld]:
    w = StandInWorld(tmp_path, [A_IP, B_IP])
    yield w
    w.cleanup()


def test_scenario_two_daemons_up_then_degraded(world: StandInWorld) -> None:
    cfg_a = world.config("a", A_IP, [A_IP, B_IP])
    cfg_b = world.config("b", B_IP, [A_IP, B_IP])

    # 2a/2b: A alone is READY locally, but the domain is not UP
    world.start(cfg_a)
    result = world.wait_ready(cfg_a)
    assert result.output == "READY\n"
    doc = world.domain(cfg_a)
    assert doc["status"] == "DEGRADED"
    assert doc["nodes"]["1"]["status"] == "UNAVAILABLE"

    # 2c/2d: B joins; A sees the domain UP with two READY NO_GPU nodes
    proc_b = world.start(cfg_b)
    world.wait_ready(cfg_b)
    wait_for("A to report UP", lambda: world.status(cfg_a) == "UP", 15)
    nodes = world.domain(cfg_a)["nodes"]
    assert sorted(nodes) == ["0", "1"]
    assert [n["status"] for n in nodes.values()] == ["READY", "READY"]
    assert [n["version"] for n in nodes.values()] == ["NO_GPU", "NO_GPU"]
    assert [n["host"] for n in nodes.values()] == [A_IP, B_IP]
    assert nodes["0"]["connections"]["1"]["status"] == "CONNECTED"
    assert world.status(cfg_b) == "UP"

    # 2e: B is SIGKILLed; A degrades within 5 s and stays READY locally
    proc_b.send_signal(signal.SIGKILL)
    proc_b.wait()
    wait_for("A to report DEGRADED", lambda: world.status(cfg_a) == "DEGRADED", 5)
    assert world.domain(cfg_a)["nodes"]["1"]["status"] == "UNAVAILABLE"
    assert world.probe(cfg_a).ready

    # B comes back: A reconnects and the domain is UP again
    world.start(cfg_b)
    world.wait_ready(cfg_b)
    wait_for("A to report UP after B restarted", lambda: world.status(cfg_a) == "UP", 15)

    # 2f: SIGTERM is a clean shutdown
    proc_a = world.procs[0]
    proc_a.send_signal(signal.SIGTERM)
    assert proc_a.wait(10) == 0
    assert "clean shutdown" in world.log(cfg_a)
    assert f"peer node 1 - {B_IP} at {B_IP} lost" in world.log(cfg_a)


def test_hung_peer_is_detected_by_missing_heartbeats(world: StandInWorld) -> None:
    cfg_a = world.config("a", A_IP, [A_IP, B_IP])
    cfg_b = world.config("b", B_IP, [A_IP, B_IP])
    world.start(cfg_a)
    proc_b = world.start(cfg_b)
    world.wait_ready(cfg_a)
    world.wait_ready(cfg_b)
    wait_for("A to report UP", lambda: world.status(cfg_a) == "UP", 15)
    proc_b.send_signal(signal.SIGSTOP)  # sockets stay open: only the heartbeats stop
    try:
        wait_for("A to notice the silent peer", lambda: world.status(cfg_a) == "DEGRADED", 5)
    finally:
        proc_b.send_signal(signal.SIGCONT)
    wait_for("A to report UP after B resumed", lambda: world.status(cfg_a) == "UP", 15)
    assert "no heartbeat for 1s" in world.log(cfg_a)


def test_sigusr1_rereads_peer_names_from_hosts_file(world: StandInWorld) -> None:
    names = dns_names("4f0c8a52-6d1e-4b7a-9c3e-2a5b7d9e1f00", 2)
    hosts_a = world.dir / "hosts-a"
    hosts_b = world.dir / "hosts-b"
    hosts_a.write_text("127.0.0.1\tlocalhost\n")
    rewrite_hosts_file(hosts_a, {names[0]: A_IP})
    rewrite_hosts_file(hosts_b, {names[0]: A_IP, names[1]: B_IP})
    cfg_a = world.config("a", A_IP, names)
    cfg_b = world.config("b", B_IP, names)
    env_a = {**world.env, ENV_SIM_HOSTS_FILE: str(hosts_a)}
    env_b = {**world.env, ENV_SIM_HOSTS_FILE: str(hosts_b)}

    proc_a = world.start(cfg_a, env_a)
    world.start(cfg_b, env_b)
    world.wait_ready(cfg_a)
    world.wait_ready(cfg_b)
    wait_for("B to see both names connected", lambda: world.status(cfg_b) == "UP", 15)
    # A resolves only its own name; the new mapping takes effect on SIGUSR1, not before
    rewrite_hosts_file(hosts_a, {names[0]: A_IP, names[1]: B_IP})
    assert list(world.domain(cfg_a)["nodes"]) == ["0"]

    proc_a.send_signal(signal.SIGUSR1)
    wait_for("A to re-read its peers", lambda: len(world.domain(cfg_a)["nodes"]) == 2, 10)
    wait_for("A to report UP", lambda: world.status(cfg_a) == "UP", 10)
    out = subprocess.run([str(world.ctl), "-c", str(cfg_a), "-N", "-H"], env=world.env,
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    assert f"{B_IP} ({names[1]}) - READY" in out.stdout
    assert "SIGUSR1: re-read" in world.log(cfg_a)


def test_unix_socket_probe_in_host_managed_form(world: StandInWorld) -> None:
    sock = world.dir / "run" / "imex_ctrl.sock"
    cfg = world.config("host", A_IP, [A_IP], unix_socket=str(sock))
    proc = world.start(cfg)
    result = wait_for(
        "the Unix socket probe",
        lambda: (r := ctl.probe_ready(str(world.ctl), unix_socket=str(sock), timeout=10, env=world.env)).ready
        and r,
        15,
    )
    assert result.argv[-2:] == ("-q", f"--u={sock}")
    assert result.output == "READY\n"
    assert ctl.query_domain(str(world.ctl), unix_socket=str(sock), env=world.env)["status"] == "UP"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert not sock.exists()
    after = ctl.probe_ready(str(world.ctl), unix_socket=str(sock), timeout=10, env=world.env)
    assert not after.ready
    assert after.returncode == 1
    assert "cannot reach the IMEX daemon" in after.output


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda t: t.replace("DAEMONIZE=0", "DAEMONIZE 0"), "expected KEY=value"),
        (lambda t: t.replace("IMEX_CMD_PORT=", "IMEX_CMD_PORT=x"), "IMEX_CMD_PORT="),
        (lambda t: t.replace("IMEX_NODE_CONFIG_FILE=", "IMEX_NODE_CONFIG_FILE=/nonexistent"), "nodes config"),
        (lambda t: t.replace(f"IMEX_CMD_BIND_INTERFACE_IP={A_IP}\n", "IMEX_CMD_BIND_INTERFACE_IP=\n"),
         "cannot tell which nodes config entry is this node"),
    ],
)
def test_broken_config_exits_with_one_clear_line(world: StandInWorld, mutate, fragment) -> None:
    cfg = world.config("a", A_IP, ["10.99.0.1", "10.99.0.2"])
    text = cfg.read_text()
    assert mutate(text) != text, "the mutation must break the config it is given"
    cfg.write_text(mutate(text))
    proc = world.start(cfg)
    assert proc.wait(15) == 1
    log = world.log(cfg)
    assert fragment in log
    assert "Traceback" not in log
    assert log.strip().splitlines()[-1].startswith("nvidia-imex: error: ")


def test_missing_config_file_is_reported(world: StandInWorld) -> None:
    proc = world.start(world.dir / "absent.cfg")
    assert proc.wait(15) == 1
    assert "cannot read IMEX config file" in world.log(world.dir / "absent.cfg")


def test_busy_port_exits_with_clear_error(world: StandInWorld) -> None:
    cfg = world.config("a", A_IP, [A_IP])
    with socket.socket() as holder:
        holder.bind((A_IP, world.ports[0]))
        holder.listen()
        proc = world.start(cfg)
        assert proc.wait(15) == 1
    log = world.log(cfg)
    assert f"cannot listen on {A_IP}:{world.ports[0]} (SERVER_PORT): address already in use" in log
    assert "Traceback" not in log


def test_ctl_without_daemon_is_not_ready(world: StandInWorld) -> None:
    cfg = world.config("a", A_IP, [A_IP])
    result = world.probe(cfg)
    assert not result.ready
    assert result.returncode == 1
    assert "READY" not in result.output.replace("not ready", "")
    assert f"{A_IP}:{world.ports[1]}" in result.output
    with pytest.raises(ctl.ImexCtlError) as err:
        world.domain(cfg)
    assert "cannot reach the IMEX daemon" in str(err.value)


def test_ctl_usage_error_exits_2(world: StandInWorld) -> None:
    out = subprocess.run([str(world.ctl), "-c", "/x.cfg"], env=world.env, capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 2
    assert "one of the arguments -q/--q -N/--N -n/--n is required" in out.stderr


def test_probe_times_out_on_a_hung_ctl(tmp_path: Path) -> None:
    hung = tmp_path / "nvidia-imex-ctl"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    result = ctl.probe_ready(str(hung), config_path="/imexd/imexd.cfg", timeout=0.3)
    assert not result.ready
    assert result.returncode == ctl.RC_TIMEOUT
    assert "timed out" in result.describe()


def test_standin_under_the_supervisor_restarts_and_reloads(world: StandInWorld) -> None:
    cfg = world.config("a", A_IP, [A_IP])
    log_path = world.dir / "imex.log"
    exits: list[tuple[int, bool]] = []
    sup = ProcessSupervisor(world.daemon_argv(cfg), env=world.env, log_path=log_path,
                            initial_backoff=0.05, max_backoff=0.2,
                            on_exit=lambda rc, expected: exits.append((rc, expected)), name="nvidia-imex")
    try:
        sup.start()
        world.wait_ready(cfg)
        sup.reload()
        wait_for("the reload to be logged",
                 lambda: any("SIGUSR1: re-read" in line for line in sup.last_output_lines(50)), 10)
        first = sup.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for("a restart", lambda: sup.restart_count == 1 and sup.pid not in (None, first), 10)
        world.wait_ready(cfg)
        assert exits == [(-signal.SIGKILL, False)]
    finally:
        rc = sup.stop(grace=10)
    assert rc == 0
    assert exits[-1] == (0, True)
    assert "clean shutdown" in log_path.read_text()
