"""The simulated libnvidia-ml.so.1, exercised through stock pynvml in child processes.

NVML state is process-global, so every query runs in a fresh Python process that loads the
library the way a real program does: pynvml dlopens `libnvidia-ml.so.1` found through
LD_LIBRARY_PATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from cdriver.sim.gpu import nvml_build
from cdriver.sim.gpu.driver_root import DriverRoot, create_driver_root
from cdriver.sim.gpu.topology import demo_topology_path

DEMO_UUID = "00000000-0000-0000-0000-0000000000ab"
V2_TAG = 0x02000024
V3_TAG = 0x03000028

PRELUDE = """
import ctypes, json, sys
import pynvml
def err(fn, *args):
    try:
        fn(*args)
    except pynvml.NVMLError as exc:
        return [exc.value, str(exc)]
    return None
"""


def run_nvml(code: str, env: dict[str, str]) -> tuple[dict, str]:
    """Run `code` (which prints one JSON document) in a fresh interpreter; returns (doc, stderr)."""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def stock_env(dr: DriverRoot) -> dict[str, str]:
    """Environment of a program that finds NVML through the dynamic loader only."""
    env = {k: v for k, v in os.environ.items() if k != "CDRIVER_SIM_NVML_CONFIG"}
    env["LD_LIBRARY_PATH"] = str(dr.lib_dir)
    return env


def make_root(tmp_path: Path, node: str = "worker-1", **kwargs: object) -> DriverRoot:
    return create_driver_root(tmp_path / node, node, demo_topology_path(), channel_count=1, **kwargs)


def test_pynvml_reads_the_node_through_its_normal_path(tmp_path: Path) -> None:
    dr = make_root(tmp_path, "worker-3")
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(2)
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        v1 = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(v1))
        print(json.dumps({
            "lib": pynvml.nvmlLib._name,
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "nvml": pynvml.nvmlSystemGetNVMLVersion(),
            "cuda": [pynvml.nvmlSystemGetCudaDriverVersion(), pynvml.nvmlSystemGetCudaDriverVersion_v2()],
            "count": pynvml.nvmlDeviceGetCount(),
            "uuid": pynvml.nvmlDeviceGetUUID(h),
            "name": pynvml.nvmlDeviceGetName(h),
            "minor": pynvml.nvmlDeviceGetMinorNumber(h),
            "pci": [pci.busId, pci.busIdLegacy, pci.domain, pci.bus, pci.device,
                    pci.pciDeviceId],
            "by_uuid": pynvml.nvmlDeviceGetMinorNumber(
                pynvml.nvmlDeviceGetHandleByUUID("GPU-b200b200-0000-0000-0000-000000000005")),
            "unknown_uuid": err(pynvml.nvmlDeviceGetHandleByUUID, "GPU-nope"),
            "bad_index": err(pynvml.nvmlDeviceGetHandleByIndex, 8),
            "v1": [bytes(v1.clusterUuid).hex(), v1.status, v1.cliqueId, v1.state],
        }))
        pynvml.nvmlShutdown()
    """, stock_env(dr))
    assert doc["lib"] == "libnvidia-ml.so.1"  # loaded by soname through the dynamic loader
    assert doc["driver"] == "580.65.06" and doc["nvml"] == "13.580.65.06" and doc["cuda"] == [13000, 13000]
    assert doc["count"] == 8
    assert doc["uuid"] == "GPU-b200b200-0000-0000-0000-000000000002"
    assert doc["name"] == "NVIDIA GB200" and doc["minor"] == 2
    assert doc["pci"] == ["00000000:4A:00.0", "0000:4A:00.0", 0, 0x4A, 0, 0x294110DE]
    assert doc["by_uuid"] == 5
    assert doc["unknown_uuid"][0] == 6  # NVML_ERROR_NOT_FOUND
    assert doc["bad_index"][0] == 2  # NVML_ERROR_INVALID_ARGUMENT
    assert doc["v1"] == ["000000000000000000000000000000ab", 0, 1, 3]


def test_versioned_fabric_info_tags_and_version_mismatch(tmp_path: Path) -> None:
    dr = make_root(tmp_path)
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3))
        # a v2 caller: same buffer, v2 tag; the byte after healthMask must stay untouched
        v2 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        v2.version = pynvml.nvmlGpuFabricInfo_v2
        v2.healthSummary = 0x77
        pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v2))
        bad = {}
        for tag in (0, 0x01000024, 0x02000028, 0x04000028):
            s = pynvml.c_nvmlGpuFabricInfo_v3_t()
            s.version = tag
            bad[hex(tag)] = err(pynvml.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(s))
        print(json.dumps({
            "v3": [v3.version, bytes(v3.clusterUuid).hex(), v3.status, v3.cliqueId, v3.state, v3.healthMask,
                   v3.healthSummary],
            "v2": [v2.version, v2.cliqueId, v2.state, v2.healthMask, v2.healthSummary],
            "bad": bad,
            "null": err(pynvml.nvmlDeviceGetGpuFabricInfo, h, None),
        }))
    """, stock_env(dr))
    assert doc["v3"] == [V3_TAG, "000000000000000000000000000000ab", 0, 0, 3, 0x1AA, 1]
    assert doc["v2"] == [V2_TAG, 0, 3, 0x1AA, 0x77]
    for tag, result in doc["bad"].items():
        assert result is not None and result[0] == 25, tag  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert doc["bad"]["0x0"][1] == "Argument version mismatch"  # pynvml asks nvmlErrorString
    assert doc["null"][0] == 2


@pytest.mark.parametrize(("fabric_state", "state"), [("in_progress", 2), ("not_started", 1), ("completed", 3)])
def test_fabric_state_switch(tmp_path: Path, fabric_state: str, state: int) -> None:
    dr = make_root(tmp_path, fabric_state=fabric_state)
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            v1 = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(pynvml.nvmlDeviceGetHandleByIndex(i), ctypes.byref(v1))
            out.append(v1.state)
        print(json.dumps(out))
    """, stock_env(dr))
    assert doc == [state] * 8


def test_unhealthy_fabric(tmp_path: Path) -> None:
    dr = make_root(tmp_path, fabric_health="route_unhealthy")
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(v3))
        print(json.dumps([v3.state, v3.healthMask, v3.healthSummary]))
    """, stock_env(dr))
    assert doc == [3, 0x19A, 2]


def test_node_without_fabric_reports_not_supported(tmp_path: Path) -> None:
    dr = make_root(tmp_path, "cpu-node", fabric_state="not_supported")
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps([err(pynvml.nvmlDeviceGetGpuFabricInfo, h, ctypes.byref(pynvml.c_nvmlGpuFabricInfo_t())),
                          err(pynvml.nvmlDeviceGetGpuFabricInfoV, h,
                              ctypes.byref(pynvml.c_nvmlGpuFabricInfo_v3_t()))]))
    """, stock_env(dr))
    assert [d[0] for d in doc] == [3, 3]  # NVML_ERROR_NOT_SUPPORTED


def test_env_var_selects_the_config_and_reinit_rereads_it(tmp_path: Path) -> None:
    one = make_root(tmp_path, "worker-1")
    four = make_root(tmp_path, "worker-4", profile="gb300")
    env = stock_env(one)
    env["CDRIVER_SIM_NVML_CONFIG"] = str(four.nvml_config)
    doc, _ = run_nvml(f"""
        import os
        def clique():
            v1 = pynvml.c_nvmlGpuFabricInfo_t()
            pynvml.nvmlDeviceGetGpuFabricInfo(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(v1))
            return [v1.cliqueId, pynvml.nvmlSystemGetDriverVersion()]
        pynvml.nvmlInit()
        first = clique()
        pynvml.nvmlShutdown()
        after_shutdown = err(pynvml.nvmlDeviceGetCount)
        os.environ["CDRIVER_SIM_NVML_CONFIG"] = {str(one.nvml_config)!r}
        pynvml.nvmlInit()
        second = clique()
        print(json.dumps([first, after_shutdown, second]))
    """, env)
    assert doc[0] == [1, "570.124.06"]  # worker-4 (clique 1, gb300) via the env var
    assert doc[1][0] == 1  # NVML_ERROR_UNINITIALIZED
    assert doc[2] == [0, "580.65.06"]  # re-read on the next init


def test_nested_init_is_reference_counted(tmp_path: Path) -> None:
    dr = make_root(tmp_path)
    doc, _ = run_nvml("""
        pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        still = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        print(json.dumps([still, err(pynvml.nvmlDeviceGetCount), err(pynvml.nvmlShutdown)]))
    """, stock_env(dr))
    assert doc[0] == 8 and doc[1][0] == 1 and doc[2][0] == 1


def test_small_buffers_get_insufficient_size(tmp_path: Path) -> None:
    dr = make_root(tmp_path)
    doc, _ = run_nvml("""
        pynvml.nvmlInit()
        lib = pynvml.nvmlLib
        buf = ctypes.create_string_buffer(4)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps([lib.nvmlSystemGetDriverVersion(buf, 4), lib.nvmlDeviceGetUUID(h, buf, 4),
                          lib.nvmlDeviceGetName(h, buf, 4)]))
    """, stock_env(dr))
    assert doc == [7, 7, 7]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("format = 1\ndriver_version = 1.2\ngpu_count = 1\ngpu.0.uuid = GPU-x\ngpu.0.colour = red\n",
         r":5: gpu\.0\.colour: unknown GPU field"),
        ("format = 1\ndriver_version = 1.2\ngpu_count = 1\ngpu.0.uuid = GPU-x\ngpu.0.fabric.state = 7\n",
         r":5: gpu\.0\.fabric\.state: fabric\.state must be 0"),
        ("format = 1\ndriver_version = 1.2\ngpu_count = 1\ngpu.1.uuid = GPU-x\n",
         r":4: gpu\.1\.uuid: GPU index not below gpu_count"),
        ("format = 1\ndriver_version = 1.2\ngpu_count = 1\n", r"gpu\.0\.uuid is missing"),
        ("format = 2\n", r":1: format: unsupported format"),
        ("driver_version 1.2\n", r":1: expected `key = value`"),
        ("format = 1\ngpu_count = 1\ngpu.0.uuid = GPU-x\ngpu.0.fabric.cluster_uuid = xyz\n",
         r"fabric\.cluster_uuid must be 32 hex digits"),
        ("format = 1\ngpu_count = 0\n", r"missing driver_version"),
    ],
)
def test_malformed_config_fails_init_naming_file_and_line(tmp_path: Path, config: str, message: str) -> None:
    dr = make_root(tmp_path)
    dr.nvml_config.write_text(config)
    doc, stderr = run_nvml("print(json.dumps(err(pynvml.nvmlInit)))", stock_env(dr))
    assert doc[0] == 999  # NVML_ERROR_UNKNOWN
    assert str(dr.nvml_config) in stderr
    assert re.search(message, stderr), stderr


def test_missing_config_is_driver_not_loaded(tmp_path: Path) -> None:
    dr = make_root(tmp_path)
    dr.nvml_config.unlink()
    doc, stderr = run_nvml("print(json.dumps(err(pynvml.nvmlInit)))", stock_env(dr))
    assert doc == [9, "Driver Not Loaded"]
    assert "cdriver sim driver-root" in stderr and str(dr.nvml_config) in stderr


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------

def test_first_use_builds_once_into_the_cache(tmp_path: Path) -> None:
    lib = nvml_build.ensure_libnvml(tmp_path)
    assert lib == nvml_build.library_path(tmp_path)
    assert lib.name == "libnvidia-ml.so.1" and lib.parent.name == f"nvml-{nvml_build.source_hash()}"
    stamp = lib.stat().st_mtime_ns
    assert nvml_build.ensure_libnvml(tmp_path) == lib
    assert lib.stat().st_mtime_ns == stamp
    assert [p.name for p in lib.parent.iterdir()] == ["libnvidia-ml.so.1"]  # no temp files left
    soname = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in soname


def test_concurrent_first_use_builds_one_library(tmp_path: Path) -> None:
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(nvml_build.ensure_libnvml(tmp_path)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 3
    assert [p.name for p in results[0].parent.iterdir()] == ["libnvidia-ml.so.1"]


def test_missing_compiler_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(nvml_build.NvmlBuildError, match=r"C compiler 'no-such-cc' not found.*set CC"):
        nvml_build.ensure_libnvml(tmp_path)
    assert not list(tmp_path.glob("nvml-*/libnvidia-ml.so.1"))
