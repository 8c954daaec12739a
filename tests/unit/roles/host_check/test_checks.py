"""host-check verdicts from node facts: each broken precondition fails exactly its check."""

from __future__ import annotations

import dataclasses

import pytest

from cdriver.imex.config import ImexConfig
from cdriver.imex.ctl import ProbeResult
from cdriver.roles.host_check import checks
from cdriver.roles.host_check.facts import (
    DeviceNodeFacts,
    FabricFacts,
    ImexProcessFacts,
    NodeFacts,
    in_pod_cgroup,
    is_imex_process,
    parse_channel_major,
)

SOCKET = "/drv/etc/nvidia-imex/imex_ctrl.sock"


def healthy(mode: str = "hostManaged") -> NodeFacts:
    cfg = ImexConfig.from_values({"IMEX_CMD_ENABLED": "1", "IMEX_CMD_UNIX_DOMAIN_PATH": SOCKET}, "cfg")
    return NodeFacts(
        mode=mode, driver_root="/drv", driver_root_exists=True, nvml_library="/drv/lib/libnvidia-ml.so.1",
        proc_devices_path="/drv/proc/devices", proc_devices_error=None, channel_major=234,
        channel0=DeviceNodeFacts("/drv/dev/nvidia-caps-imex-channels/channel0", True, True, 234, 0),
        fabric=FabricFacts(clique_id="00000000-0000-0000-0000-0000000000ab.0"),
        expected_socket=SOCKET,
        processes=[ImexProcessFacts(pid=42, cmdline=["nvidia-imex", "-c", "/drv/cfg"], config_path="/drv/cfg",
                                    config=cfg)] if mode == "hostManaged" else [],
        ctl_path="/drv/bin/nvidia-imex-ctl",
        probe=ProbeResult(ready=True, output="READY\n", returncode=0),
    )


def failed(results: list[checks.CheckResult]) -> dict[str, checks.CheckResult]:
    return {r.name: r for r in results if r.status == checks.FAIL}


def test_healthy_host_managed_node_passes() -> None:
    results = checks.run_checks(healthy())
    assert failed(results) == {}
    assert checks.exit_code(results) == 0
    assert {r.status for r in results} == {checks.PASS}


@pytest.mark.parametrize(
    ("change", "check", "fix_fragment"),
    [
        ({"channel_major": None}, "channel-major", "IMEX channel support"),
        ({"channel0": DeviceNodeFacts("/drv/dev/x/channel0", False)}, "channel-device", "mknod"),
        ({"channel0": DeviceNodeFacts("/drv/dev/x/channel0", True, True, 99, 0)}, "channel-device",
         "recreate it"),
        ({"channel0": DeviceNodeFacts("/drv/dev/x/channel0", True, False)}, "channel-device", "remove it"),
        ({"fabric": FabricFacts(error="GPU 0 fabric state IN_PROGRESS")}, "nvlink-fabric", "COMPLETED"),
        ({"fabric": FabricFacts(clique_id="")}, "nvlink-fabric", "Multi-Node NVLink"),
        ({"nvml_library": None}, "driver-root", "install the NVIDIA driver"),
        ({"probe": ProbeResult(ready=False, output="not ready", returncode=1)}, "imex-socket", "journalctl"),
        ({"probe": None}, "imex-socket", "socket path"),
    ],
)
def test_each_broken_precondition_fails_exactly_its_check(change: dict, check: str, fix_fragment: str) -> None:
    facts = dataclasses.replace(healthy(), **change)
    bad = failed(checks.run_checks(facts))
    assert list(bad) == [check]
    assert fix_fragment in bad[check].fix


def test_service_down_fails_service_and_skips_config() -> None:
    facts = dataclasses.replace(healthy(), processes=[])
    results = {r.name: r for r in checks.run_checks(facts)}
    assert results["imex-service"].status == checks.FAIL
    assert "systemctl enable --now nvidia-imex" in results["imex-service"].fix
    assert results["imex-config"].status == checks.SKIP
    assert results["imex-socket"].status == checks.PASS  # the socket still answers: reported as seen

    down = dataclasses.replace(facts, probe=None)
    results = {r.name: r for r in checks.run_checks(down)}
    assert list(failed(list(results.values()))) == ["imex-service"]
    assert results["imex-socket"].status == checks.SKIP
    assert "imex-service" in results["imex-socket"].evidence


def test_socket_path_mismatch_names_both_paths() -> None:
    cfg = ImexConfig.from_values({"IMEX_CMD_ENABLED": "1", "IMEX_CMD_UNIX_DOMAIN_PATH": "/other.sock"}, "cfg")
    facts = healthy()
    facts.processes[0].config = cfg
    bad = failed(checks.run_checks(facts))
    assert list(bad) == ["imex-config"]
    assert "/other.sock" in bad["imex-config"].evidence and SOCKET in bad["imex-config"].evidence

    facts.probe = None  # nothing listens where the driver looks: that follows from the config
    results = {r.name: r for r in checks.run_checks(facts)}
    assert list(failed(list(results.values()))) == ["imex-config"]
    assert results["imex-socket"].status == checks.SKIP


def test_cmd_disabled_fails_config() -> None:
    facts = healthy()
    facts.processes[0].config = ImexConfig.from_values({"IMEX_CMD_ENABLED": "0"}, "cfg")
    assert list(failed(checks.run_checks(facts))) == ["imex-config"]


def test_not_ready_socket_fails_only_the_socket_check() -> None:
    facts = dataclasses.replace(healthy(), probe=ProbeResult(ready=False, output="STARTING", returncode=1))
    bad = failed(checks.run_checks(facts))
    assert list(bad) == ["imex-socket"]
    assert "STARTING" in bad["imex-socket"].evidence


def test_driver_managed_service_evidence_names_its_ports() -> None:
    node = healthy("driverManaged")
    cfg = ImexConfig.from_values({"SERVER_PORT": "41000", "IMEX_CMD_PORT": "41005"}, "cfg")
    node.processes = [ImexProcessFacts(pid=7, cmdline=["nvidia-imex", "-c", "/drv/cfg"], config_path="/drv/cfg",
                                       config=cfg)]
    bad = failed(checks.run_checks(node))
    assert "ports 41000/41005" in bad["imex-service"].evidence


def test_pod_cgroups_are_recognised() -> None:
    assert in_pod_cgroup("0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-1.scope\n")
    assert in_pod_cgroup("12:memory:/kubepods/burstable/pod1234/abcd\n1:cpu:/\n")
    assert not in_pod_cgroup("0::/system.slice/nvidia-imex.service\n")
    assert not in_pod_cgroup("")


def test_driver_managed_inverts_service_check() -> None:
    node = healthy("driverManaged")
    results = {r.name: r for r in checks.run_checks(node)}
    assert results["imex-service"].status == checks.PASS
    assert results["imex-socket"].status == checks.SKIP
    node.processes = [ImexProcessFacts(pid=7, cmdline=["nvidia-imex"])]
    bad = failed(checks.run_checks(node))
    assert list(bad) == ["imex-service"]
    assert "disable --now" in bad["imex-service"].fix


def test_parse_channel_major_reads_character_section_only() -> None:
    text = "Character devices:\n  1 mem\n234 nvidia-caps-imex-channels\n\nBlock devices:\n 8 sd\n"
    assert parse_channel_major(text) == 234
    assert parse_channel_major("Block devices:\n234 nvidia-caps-imex-channels\n") is None
    assert parse_channel_major("garbage\x00\n") is None


def test_imex_process_detection_excludes_ctl() -> None:
    assert is_imex_process("nvidia-imex", ["python3", "-m", "x"])
    assert is_imex_process("python3", ["/usr/bin/nvidia-imex", "-c", "cfg"])
    assert not is_imex_process("nvidia-imex-ctl", ["nvidia-imex-ctl", "-q"])
