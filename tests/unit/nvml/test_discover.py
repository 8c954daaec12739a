"""Node discovery (cdriver.nvml.discover): majors, capability, clique ID rules, NVML via a driver root.

The NVML parts run in child processes against simulated driver roots (NVML is process-global).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdriver.nvml import discover
from cdriver.nvml.discover import (
    CapabilityError,
    FabricError,
    GpuFabric,
    NvmlError,
    ProcDevicesError,
    decide_clique_id,
    parse_capability,
    parse_device_major,
)
from cdriver.sim.gpu.driver_root import create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path

UUID_AB = "00000000-0000-0000-0000-0000000000ab"
UUID_CD = "00000000-0000-0000-0000-0000000000cd"
ZERO = "00000000-0000-0000-0000-000000000000"


# --------------------------------------------------------------------------------------
# proc/devices and the capability file
# --------------------------------------------------------------------------------------

PROC = "Character devices:\n  1 mem\n240 nvidia-caps-imex-channels\n241 nvidia-caps\n\nBlock devices:\n  7 loop\n"


def test_parse_device_major_exact_name_in_char_section_only() -> None:
    assert parse_device_major(PROC, "nvidia-caps-imex-channels") == 240
    assert parse_device_major(PROC, "nvidia-caps") == 241
    assert parse_device_major(PROC, "nvidia") is None  # no prefix match
    assert parse_device_major(PROC, "loop") is None  # block section ignored
    assert parse_device_major("Character devices:\n240 nvidia-caps", "nvidia-caps") is None  # no newline
    assert parse_device_major("240 nvidia-caps\n", "nvidia-caps") is None  # no header


def test_channel_major_reads_the_driver_root(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text(PROC)
    assert discover.channel_major(tmp_path) == 240
    assert discover.caps_major(tmp_path) == 241


def test_missing_channel_entry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text("Character devices:\n  1 mem\n\nBlock devices:\n")
    with pytest.raises(ProcDevicesError, match=rf"{tmp_path}/proc/devices: no character device "
                                               r"'nvidia-caps-imex-channels'; load the NVIDIA kernel driver"):
        discover.channel_major(tmp_path)


def test_driver_root_without_proc_devices_uses_the_kernels(tmp_path: Path) -> None:
    assert discover.proc_devices_path(tmp_path) == Path("/proc/devices")


def test_capability_parsing() -> None:
    assert parse_capability("DeviceFileMinor: 4\nDeviceFileMode: 256\nDeviceFileModify: 1\nOther: x\n") == (4, 256, 1)
    with pytest.raises(CapabilityError, match="missing DeviceFileMode"):
        parse_capability("DeviceFileMinor: 4\n")
    with pytest.raises(CapabilityError, match=r"DeviceFileMinor: 'x4' is not a decimal integer"):
        parse_capability("DeviceFileMinor: x4\nDeviceFileMode: 1\n")


def test_fabric_mgmt_capability_from_a_simulated_root(tmp_path: Path) -> None:
    dr = create_driver_root(tmp_path, "worker-1", demo_topology_path(), channel_count=1)
    cap = discover.fabric_mgmt_capability(tmp_path)
    assert (cap.major, cap.minor, cap.mode, cap.path) == (dr.caps_major, 512, 438, "/dev/nvidia-caps/nvidia-cap512")


def test_find_library_and_nvidia_smi(tmp_path: Path) -> None:
    with pytest.raises(NvmlError, match=r"libnvidia-ml.so.1 not found below driver root .* \(searched /, /usr/lib64"):
        discover.find_library(tmp_path)
    assert discover.find_nvidia_smi(tmp_path) is None
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").mkdir()  # a directory does not count
    lib = tmp_path / "lib64"
    lib.mkdir()
    (lib / "libnvidia-ml.so.580").write_bytes(b"")
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580")
    assert discover.find_library(tmp_path) == lib / "libnvidia-ml.so.580"  # symlinks resolved


def test_version_tuple() -> None:
    assert discover.version_tuple("570.158.01") == (570, 158, 1)
    assert discover.version_tuple("580.65.06") > discover.version_tuple("570.158.01")
    with pytest.raises(ValueError):
        discover.version_tuple("570.x")


# --------------------------------------------------------------------------------------
# Clique ID decision (pure)
# --------------------------------------------------------------------------------------

def gpu(index: int = 0, result: int = 0, cluster: str = UUID_AB, clique: int = 3, state: int = 3, status: int = 0,
        summary: int | None = 1) -> GpuFabric:
    return GpuFabric(index=index, uuid=f"GPU-{index}", name="NVIDIA GB200", result=result, cluster_uuid=cluster,
                     clique_id=clique, state=state, status=status, health_mask=0x1AA, health_summary=summary)


@pytest.mark.parametrize("strict", [True, False])
def test_agreeing_gpus_give_the_clique_label(strict: bool) -> None:
    assert decide_clique_id([gpu(0), gpu(1)], strict) == f"{UUID_AB}.3"


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "gpus",
    [
        [],
        [gpu(result=3)],  # fabric call not supported
        [gpu(state=0)],  # state NOT_SUPPORTED
        [gpu(cluster=ZERO)],  # NVLink but not multi-node capable
    ],
)
def test_no_fabric_gives_an_empty_clique_id(strict: bool, gpus: list[GpuFabric]) -> None:
    assert decide_clique_id(gpus, strict) == ""


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (gpu(1, state=2), r"GPU 1 \(GPU-1\): NVLink fabric registration is in_progress, not completed"),
        (gpu(1, state=1), r"registration is not_started"),
        (gpu(1, state=7), r"registration is unknown \(7\)"),
        (gpu(1, status=12), r"registration failed \(status 12\)"),
        (gpu(1, summary=2), r"NVLink fabric health is unhealthy \(mask 0x1AA\)"),
    ],
)
def test_strict_mode_refuses_fabric_errors(bad: GpuFabric, message: str, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(FabricError, match=message) as info:
        decide_clique_id([gpu(0), bad], strict=True)
    assert "CrashOnNVLinkFabricErrors=false" in str(info.value)


def test_lenient_mode_skips_unregistered_gpus_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert decide_clique_id([gpu(0, state=2), gpu(1, status=12)], strict=False) == ""
    assert "GPU 0 (GPU-0): NVLink fabric registration is in_progress" in caplog.text
    assert decide_clique_id([gpu(0, state=2), gpu(1)], strict=False) == f"{UUID_AB}.3"


def test_lenient_mode_keeps_an_unhealthy_but_registered_gpu(caplog: pytest.LogCaptureFixture) -> None:
    assert decide_clique_id([gpu(0, summary=2)], strict=False) == f"{UUID_AB}.3"
    assert "fabric health is unhealthy" in caplog.text


@pytest.mark.parametrize("strict", [True, False])
def test_disagreeing_gpus_are_an_error(strict: bool) -> None:
    with pytest.raises(FabricError, match=rf"different cluster UUIDs \({UUID_AB}, {UUID_CD}\)"):
        decide_clique_id([gpu(0), gpu(1, cluster=UUID_CD)], strict)
    with pytest.raises(FabricError, match=r"different clique IDs \(3, 4\)"):
        decide_clique_id([gpu(0), gpu(1, clique=4)], strict)


@pytest.mark.parametrize("strict", [True, False])
def test_other_nvml_failures_are_errors(strict: bool) -> None:
    with pytest.raises(NvmlError, match=r"GPU 0 \(GPU-0\): reading GPU fabric info failed with NVML error 15"):
        decide_clique_id([gpu(result=15)], strict)


def test_format_cluster_uuid() -> None:
    assert discover.format_cluster_uuid(bytes(15) + b"\xab") == UUID_AB
    assert discover.format_cluster_uuid(b"\xff" + bytes(15)) == "ff000000-0000-0000-0000-000000000000"


# --------------------------------------------------------------------------------------
# Through NVML, against simulated driver roots
# --------------------------------------------------------------------------------------

def discover_in_child(root: Path, call: str) -> dict:
    """Run `call` (an expression using `discover` = cdriver.nvml.discover and `root`) in a fresh process."""
    code = textwrap.dedent(f"""
        import json, logging, sys
        from pathlib import Path
        from cdriver.errors import CdriverError
        from cdriver.nvml import discover
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        root = Path({str(root)!r})
        try:
            print(json.dumps({{"value": {call}}}))
        except CdriverError as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CDRIVER_SIM_NVML_CONFIG", "LD_LIBRARY_PATH", "NVIDIA_DRIVER_ROOT")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    out["stderr"] = proc.stderr
    return out


def test_clique_id_and_driver_version_from_a_driver_root(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-3", demo_topology_path(), "gb300", channel_count=1)
    out = discover_in_child(tmp_path, "[discover.clique_id(root), discover.driver_version(root),"
                                      " discover.clique_id(root, strict=False), discover.channel_major(root) > 0]")
    assert out["value"] == [f"{UUID_AB}.1", "570.124.06", f"{UUID_AB}.1", True]


def test_node_without_fabric_has_empty_clique_id(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "cpu-1", None, fabric_state="not_supported", channel_count=1)
    assert discover_in_child(tmp_path, "discover.clique_id(root)")["value"] == ""


def test_incomplete_fabric_strict_and_lenient(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-1", demo_topology_path(), fabric_state="not_started", channel_count=1)
    strict = discover_in_child(tmp_path, "discover.clique_id(root, strict=True)")
    assert strict["error"] == "FabricError"
    assert "GPU 0 (GPU-b200b200-0000-0000-0000-000000000000): NVLink fabric registration is not_started" in \
        strict["message"]
    lenient = discover_in_child(tmp_path, "discover.clique_id(root, strict=False)")
    assert lenient["value"] == ""
    assert "registration is not_started" in lenient["stderr"]


def test_unhealthy_fabric_strict_and_lenient(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-2", demo_topology_path(), fabric_health="no_partition", channel_count=1)
    strict = discover_in_child(tmp_path, "discover.clique_id(root)")
    assert strict["error"] == "FabricError" and "health is unhealthy (mask 0x4AA)" in strict["message"]
    assert discover_in_child(tmp_path, "discover.clique_id(root, strict=False)")["value"] == f"{UUID_AB}.0"


def test_read_fabric_reports_every_gpu(tmp_path: Path) -> None:
    create_driver_root(tmp_path, "worker-4", demo_topology_path(), gpu_count=3, channel_count=1)
    out = discover_in_child(tmp_path, "[g.__dict__ for g in discover.read_fabric(root)]")
    assert [g["uuid"] for g in out["value"]] == [f"GPU-b200b200-0000-0000-0000-00000000000{i}" for i in range(3)]
    assert out["value"][2] == {"index": 2, "uuid": "GPU-b200b200-0000-0000-0000-000000000002", "name": "NVIDIA GB200",
                               "result": 0, "cluster_uuid": UUID_AB, "clique_id": 1, "state": 3, "status": 0,
                               "health_mask": 0x1AA, "health_summary": 1}


def test_nvml_errors_are_clear(tmp_path: Path) -> None:
    out = discover_in_child(tmp_path, "discover.clique_id(root)")
    assert out["error"] == "NvmlError" and "libnvidia-ml.so.1 not found below driver root" in out["message"]
    dr = create_driver_root(tmp_path / "r", "worker-1", demo_topology_path(), channel_count=1)
    dr.nvml_config.write_text("format = 1\nbogus = 1\n")
    out = discover_in_child(tmp_path / "r", "discover.driver_version(root)")
    assert out["error"] == "NvmlError"
    assert out["message"] == f"{dr.nvml_library}: nvmlInit failed: Unknown Error; is the NVIDIA driver loaded on " \
                             "this node?"
    assert f"{dr.nvml_config}:2: bogus: unknown key" in out["stderr"]


def test_one_driver_root_per_process(tmp_path: Path) -> None:
    create_driver_root(tmp_path / "a", "worker-1", demo_topology_path(), channel_count=1)
    create_driver_root(tmp_path / "b", "worker-3", demo_topology_path(), channel_count=1)
    call = ("[discover.clique_id(root / 'a'), discover.clique_id(root / 'b')]")
    # sessions end with nvmlShutdown, so a later query may use another root (separate library copies)
    assert discover_in_child(tmp_path, call)["value"] == [f"{UUID_AB}.0", f"{UUID_AB}.1"]


@pytest.mark.parametrize("strict", [True, False])
def test_fabric_manager_partitioning_tolerates_pending_registration(strict: bool) -> None:
    # GPUs of a partition not yet activated are not registered: skipped, not fatal.
    assert decide_clique_id([gpu(0, state=2), gpu(1, state=1)], strict, tolerate_pending=True) == ""
    assert decide_clique_id([gpu(0, state=2), gpu(1)], strict, tolerate_pending=True) == f"{UUID_AB}.3"
    # A finished registration that failed is still an error in strict mode.
    if strict:
        with pytest.raises(FabricError):
            decide_clique_id([gpu(0, status=12)], strict, tolerate_pending=True)


def test_single_node_nvlink_system_is_recognised(tmp_path) -> None:
    from cdriver.nvml.fabric_manager import has_local_fabric

    assert not has_local_fabric(tmp_path)
    vpd = tmp_path / "sys/class/infiniband/mlx5_0/device/vpd"
    vpd.parent.mkdir(parents=True)
    vpd.write_bytes(b"\x82\x10 PN MCX75 V0 OTHER")
    assert not has_local_fabric(tmp_path)
    vpd.write_bytes(b"\x82\x10 PN N5 SW_MNG V0")
    assert has_local_fabric(tmp_path)
    switches = tmp_path / "other/proc/driver/nvidia-nvswitch/devices"
    switches.mkdir(parents=True)
    assert not has_local_fabric(tmp_path / "other")
    (switches / "0000:05:00.0").mkdir()
    assert has_local_fabric(tmp_path / "other")
