"""`cdriver host-check` against simulated driver roots (no Kubernetes needed).

Each node is a real simulated driver root (simulated NVML, /proc/devices, real channel
character devices) with, where the test wants one, the host IMEX stand-in service running
outside pods on a Unix socket. host-check runs as its own process, as an administrator
would run it. A healthy host-managed node passes every check; each single broken
precondition fails exactly its check, with the fix line the administrator needs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.nvml.discover import IMEX_CHANNELS_DEVICE_NAME
from cdriver.sim.gpu import devices
from cdriver.sim.gpu.driver_root import DriverRoot, create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path
from cdriver.sim.imex.host_service import HostImexService, host_check_args
from cdriver.sim.node.addresses import lease_block
from tests.support.imex_timing import fast_imex_env

NODE = "worker-1"
#: addresses of a block leased for this test run, so other runs' clusters never share their ports
BLOCK = lease_block()
NODE_IP, PEER_IP = BLOCK.ip(1), BLOCK.ip(2)
FAST = fast_imex_env()
CHECK_NAMES = ["driver-root", "channel-major", "channel-device", "nvlink-fabric", "imex-service",
               "imex-config", "imex-socket"]


def cdriver_argv() -> list[str]:
    """The installed `cdriver` console script next to this Python, else `python -m cdriver`."""
    script = Path(sys.executable).with_name("cdriver")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "cdriver"]


def free_ports(ip: str) -> tuple[int, int]:
    """(server port, command port) both free on `ip`."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000)
        try:
            for port in (base, base + 5):
                with socket.socket() as s:
                    s.bind((ip, port))
        except OSError:
            continue
        return base, base + 5
    raise RuntimeError(f"no free port pair on {ip}")


def host_check(root: Path, *args: str, among_neighbours: bool = True) -> tuple[int, dict]:
    """Run `cdriver host-check --json`; (exit code, the parsed document).

    `among_neighbours` passes the simulation's options (only this node's service counts);
    without it host-check runs as on a real node, where every host nvidia-imex counts.
    """
    options = host_check_args(root) if among_neighbours else ["--driver-root", str(root)]
    proc = subprocess.run([*cdriver_argv(), "host-check", *options, "--json", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **FAST})
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"host-check printed no JSON (exit {proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}") from None
    return proc.returncode, doc


def by_name(doc: dict) -> dict[str, dict]:
    return {check["name"]: check for check in doc["checks"]}


def failed(doc: dict) -> dict[str, dict]:
    return {check["name"]: check for check in doc["checks"] if check["status"] == "FAIL"}


class Node:
    """A simulated node: its driver root and (optionally) its host IMEX service."""

    def __init__(self, base: Path, name: str = NODE, ip: str = NODE_IP, peer: str = PEER_IP,
                 fabric_state: str = "completed") -> None:
        self.driver_root: DriverRoot = create_driver_root(base / "r", name, demo_topology_path(),
                                                          fabric_state=fabric_state, channel_count=2)
        self.ip, self.peer = ip, peer
        self.ports = free_ports(ip)
        self.service: HostImexService | None = None

    @property
    def root(self) -> Path:
        return self.driver_root.root

    @property
    def channel0(self) -> Path:
        return self.driver_root.dev_dir / "nvidia-caps-imex-channels" / "channel0"

    def start_service(self, socket_path: str = DEFAULT_HOST_IMEX_SOCKET) -> HostImexService:
        self.service = HostImexService(self.driver_root, self.ip, [self.peer], socket_path=socket_path,
                                       server_port=self.ports[0], cmd_port=self.ports[1],
                                       env={**os.environ, **FAST})
        self.service.start(timeout=30)
        return self.service

    def stop_service(self) -> None:
        if self.service is not None:
            self.service.stop()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A temp dir with a short path: the command socket lives below it (Unix paths are short)."""
    path = Path(tempfile.mkdtemp(prefix="hc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node(short_dir: Path) -> Iterator[Node]:
    n = Node(short_dir)
    yield n
    n.stop_service()


def test_healthy_host_managed_node_passes_every_check(node: Node) -> None:
    service = node.start_service()
    rc, doc = host_check(node.root)
    assert rc == 0, doc
    assert doc["mode"] == IMEX_MODE_HOST_MANAGED
    assert doc["driverRoot"] == str(node.root)
    assert doc["socket"] == str(service.paths.socket)
    assert doc["passed"] is True
    assert [check["name"] for check in doc["checks"]] == CHECK_NAMES
    assert {check["status"] for check in doc["checks"]} == {"PASS"}
    for check in doc["checks"]:
        assert set(check) == {"name", "status", "evidence", "fix"}
        assert isinstance(check["evidence"], str) and check["evidence"]
        assert check["fix"] == ""
    checks = by_name(doc)
    assert f"pid {service.pid}" in checks["imex-service"]["evidence"]
    assert "00000000-0000-0000-0000-0000000000ab.0" in checks["nvlink-fabric"]["evidence"]
    assert f"ports {node.ports[0]}/{node.ports[1]}" in checks["imex-config"]["evidence"]


def test_table_output_lists_every_check(node: Node) -> None:
    node.start_service()
    proc = subprocess.run([*cdriver_argv(), "host-check", *host_check_args(node.root)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in CHECK_NAMES:
        assert any(line.startswith("PASS") and f" {name} " in line for line in lines), proc.stdout
    assert "To fix:" not in proc.stdout
    # logVerbosity 0 (the default): the start-up configuration, once, on stderr (stdout is the report)
    starts = [line for line in proc.stderr.splitlines() if "start-up configuration of host-check" in line]
    assert len(starts) == 1 and f"driver_root='{node.root}'" in starts[0], proc.stderr


def test_wrong_major_fails_the_channel_device_check(node: Node) -> None:
    node.start_service()
    dr = node.driver_root
    other = devices.choose_majors(dr.proc_devices.read_text(), 1)[0]
    dr.proc_devices.write_text(devices.render_proc_devices(devices.host_proc_devices(), other, dr.caps_major))
    rc, doc = host_check(node.root)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["channel-device"]
    assert by_name(doc)["channel-major"]["evidence"].startswith(f"{IMEX_CHANNELS_DEVICE_NAME} major {other} ")
    assert f"major {dr.channel_major}" in bad["channel-device"]["evidence"]
    assert bad["channel-device"]["fix"] == (f"recreate it with the driver's major: rm {node.channel0} && "
                                            f"mknod -m 666 {node.channel0} c {other} 0")


def test_missing_channel_entry_fails_the_channel_major_check(node: Node) -> None:
    node.start_service()
    dr = node.driver_root
    text = dr.proc_devices.read_text()
    dr.proc_devices.write_text(text.replace(f"{dr.channel_major} {IMEX_CHANNELS_DEVICE_NAME}\n", ""))
    rc, doc = host_check(node.root)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["channel-major"]
    assert bad["channel-major"]["fix"] == "load an NVIDIA driver with IMEX channel support (>= 570) on this node"


def test_missing_device_fails_the_channel_device_check(node: Node) -> None:
    node.start_service()
    node.channel0.unlink()
    rc, doc = host_check(node.root)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["channel-device"]
    assert bad["channel-device"]["evidence"] == f"{node.channel0} does not exist"
    assert bad["channel-device"]["fix"] == (
        f"create it: mknod -m 666 {node.channel0} c {node.driver_root.channel_major} 0")


def test_socket_path_mismatch_fails_the_config_check(node: Node) -> None:
    service = node.start_service(socket_path="/run/nvidia-imex/site.sock")
    rc, doc = host_check(node.root)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["imex-config"]
    expected = node.root / DEFAULT_HOST_IMEX_SOCKET.lstrip("/")
    assert f"IMEX_CMD_UNIX_DOMAIN_PATH={service.paths.socket}" in bad["imex-config"]["evidence"]
    assert str(expected) in bad["imex-config"]["evidence"]
    assert bad["imex-config"]["fix"] == (f"set IMEX_CMD_UNIX_DOMAIN_PATH={expected}, or install the driver with "
                                         f"imex.hostSocketPath={service.paths.socket}")
    assert by_name(doc)["imex-socket"]["status"] == "SKIP"

    # told the socket the site uses, host-check agrees with the service
    rc, doc = host_check(node.root, "--socket", "/run/nvidia-imex/site.sock")
    assert rc == 0, failed(doc)


def test_service_down_fails_the_service_check(node: Node) -> None:
    node.start_service()
    node.stop_service()
    rc, doc = host_check(node.root)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["imex-service"]
    assert bad["imex-service"]["fix"] == "start the host service: systemctl enable --now nvidia-imex"
    checks = by_name(doc)
    assert checks["imex-config"]["status"] == "SKIP"
    assert checks["imex-socket"]["status"] == "SKIP"


def test_fabric_in_progress_fails_the_fabric_check(short_dir: Path) -> None:
    node = Node(short_dir, fabric_state="in_progress")
    try:
        node.start_service()
        rc, doc = host_check(node.root)
    finally:
        node.stop_service()
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["nvlink-fabric"]
    assert "in_progress" in bad["nvlink-fabric"]["evidence"]
    assert bad["nvlink-fabric"]["fix"].startswith("wait for the NVLink fabric to reach state COMPLETED")


def test_driver_managed_node_must_not_run_the_host_service(node: Node) -> None:
    rc, doc = host_check(node.root, "--mode", IMEX_MODE_DRIVER_MANAGED)
    assert rc == 0, failed(doc)
    assert doc["mode"] == IMEX_MODE_DRIVER_MANAGED

    service = node.start_service()
    rc, doc = host_check(node.root, "--mode", IMEX_MODE_DRIVER_MANAGED)
    assert rc == 1
    bad = failed(doc)
    assert list(bad) == ["imex-service"]
    assert f"pid {service.pid}" in bad["imex-service"]["evidence"]
    assert bad["imex-service"]["fix"] == "stop and disable it: systemctl disable --now nvidia-imex"


def test_another_nodes_service_is_not_this_nodes(node: Node, short_dir: Path) -> None:
    """Two simulated nodes on one machine: node B's daemon does not count for node A."""
    other = Node(short_dir / "b", "worker-2", PEER_IP, NODE_IP)
    try:
        other.start_service()
        rc, doc = host_check(node.root)
    finally:
        other.stop_service()
    assert rc == 1
    assert list(failed(doc)) == ["imex-service"]


def test_on_a_real_node_a_host_service_configured_outside_the_driver_root_counts(node: Node,
                                                                                 short_dir: Path) -> None:
    """A containerized driver's root does not hold the host's IMEX config: the daemon still counts."""
    other = Node(short_dir / "b", "worker-2", PEER_IP, NODE_IP)
    try:
        pid = other.start_service().pid
        rc, doc = host_check(node.root, among_neighbours=False)
    finally:
        other.stop_service()
    checks = by_name(doc)
    assert checks["imex-service"]["status"] == "PASS", checks["imex-service"]
    assert f"pid {pid}" in checks["imex-service"]["evidence"]


def test_bad_options_cannot_run_and_say_why(node: Node) -> None:
    rc, doc = host_check(node.root, "--mode", "bogus")
    assert rc == 2
    assert doc["checks"] == []
    assert "--mode" in doc["error"] and "hostManaged" in doc["error"]

    proc = subprocess.run([*cdriver_argv(), "host-check", *host_check_args(node.root), "--socket", "imex.sock"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--socket" in proc.stderr and "must be an absolute path" in proc.stderr
