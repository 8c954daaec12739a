"""`cdriver sim`: check-fabric exit codes, driver-root, topology commands, lazy subcommands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cdriver.cli import cli
from cdriver.sim import cli as sim_cli
from cdriver.sim.gpu.driver_root import create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path

DEMO_UUID = "00000000-0000-0000-0000-0000000000ab"


def check_fabric(driver_root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CDRIVER_SIM_NVML_CONFIG", "NVIDIA_DRIVER_ROOT")}
    return subprocess.run([sys.executable, "-m", "cdriver", "sim", "check-fabric", "--driver-root", str(driver_root)],
                          capture_output=True, text=True, env=env, timeout=60)


def test_check_fabric_ok(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-4", demo_topology_path(), gpu_count=2, channel_count=1)
    proc = check_fabric(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "Discovered 2 GPU(s)\n"
        "GPU 0 (GPU-b200b200-0000-0000-0000-000000000000)\n"
        f"  clusterUuid : {DEMO_UUID}\n"
        "  cliqueId    : 1\n"
        "  state       : completed (3)\n"
        "GPU 1 (GPU-b200b200-0000-0000-0000-000000000001)\n"
        f"  clusterUuid : {DEMO_UUID}\n"
        "  cliqueId    : 1\n"
        "  state       : completed (3)\n")


def test_check_fabric_shows_incomplete_state(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-1", demo_topology_path(), gpu_count=1, channel_count=1,
                       fabric_state="in_progress")
    proc = check_fabric(tmp_path)
    assert proc.returncode == 0
    assert "  state       : in_progress (2)\n" in proc.stdout


def test_check_fabric_not_supported_exits_2(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "cpu-1", None, fabric_state="not_supported", gpu_count=1, channel_count=1)
    proc = check_fabric(tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ("Discovered 1 GPU(s)\n"
                           "GPU 0 (GPU-b200b200-0000-0000-0000-000000000000): fabric NOT SUPPORTED\n")


def test_check_fabric_nvml_failure_exits_1(tmp_path: Path) -> None:
    dr = create_driver_root(tmp_path / "r", "worker-1", demo_topology_path(), gpu_count=1, channel_count=1)
    dr.nvml_config.unlink()
    proc = check_fabric(tmp_path / "r")
    assert proc.returncode == 1
    assert "nvmlInit: Driver Not Loaded" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = check_fabric(empty)
    assert proc.returncode == 1
    assert "nvmlInit: libnvidia-ml.so.1 not found below driver root" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_driver_root_command(tmp_path: Path) -> None:
    topo = tmp_path / "t.yaml"
    topo.write_text(demo_topology_path().read_text())
    result = CliRunner().invoke(cli, ["sim", "driver-root", "--root", str(tmp_path / "r"), "--topology", str(topo),
                                      "--channels", "2", "--json"], env={"NODE_NAME": "worker-2"})
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["node"] == "worker-2" and info["clique"] == f"{DEMO_UUID}.0" and info["channels"] == 2
    assert (tmp_path / "r/dev/nvidia-caps-imex-channels/channel1").exists()


def test_driver_root_command_reports_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("version: 1\ndomains:\n  - uuid: xyz\n    cliques: []\n")
    result = CliRunner().invoke(cli, ["sim", "driver-root", "--root", str(tmp_path / "r"), "--node", "worker-1",
                                      "--topology", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {bad}: domains[0].uuid: 'xyz' is not a UUID")
    assert not (tmp_path / "r").exists()


def test_topology_validate(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["sim", "topology", "validate", str(demo_topology_path())])
    assert result.exit_code == 0
    assert "valid: 1 domain(s), 2 clique(s), 4 node(s)" in result.output
    assert f"  {DEMO_UUID}.1: worker-3, worker-4" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"version: 1\ndomains:\n  - uuid: {DEMO_UUID}\n    cliques:\n      - id: 0\n"
                   "        nodes: [a, b, a]\n")
    result = CliRunner().invoke(cli, ["sim", "topology", "validate", str(bad)])
    assert result.exit_code == 1
    assert "duplicate node 'a'" in result.output


def test_topology_identity_and_demo() -> None:
    result = CliRunner().invoke(cli, ["sim", "topology", "identity", str(demo_topology_path()), "--node", "worker-3"])
    assert (result.exit_code, result.output) == (0, f"{DEMO_UUID}.1\n")
    result = CliRunner().invoke(cli, ["sim", "topology", "identity", str(demo_topology_path()), "--node", "x"])
    assert result.exit_code == 1 and "'x' is not in any clique" in result.output
    result = CliRunner().invoke(cli, ["sim", "topology", "demo"])
    assert result.output == demo_topology_path().read_text()


def test_lazy_subcommands_appear_only_when_their_module_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sim_cli.LAZY_COMMANDS, "ghost", "cdriver.sim.no_such_module:command")
    monkeypatch.setitem(sim_cli.LAZY_COMMANDS, "topo-demo", "cdriver.sim.gpu.cli:topology_demo")
    result = CliRunner().invoke(cli, ["sim", "--help"])
    assert "ghost" not in result.output
    assert "topo-demo" in result.output and "check-fabric" in result.output
    assert CliRunner().invoke(cli, ["sim", "ghost"]).exit_code == 2
    assert CliRunner().invoke(cli, ["sim", "topo-demo"]).output == demo_topology_path().read_text()
