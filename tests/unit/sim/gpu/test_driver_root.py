"""Simulated driver roots: layout, and the demo's fabric-identity scenarios (1 and 3).

Scenario 1: the four nodes of the demo topology report their identities (two cliques, cluster
UUID ...00ab) through stock pynvml and check-fabric on every GPU. Scenario 3: rewriting the
topology and restarting the readers rebinds every node to clique 99 / UUID ...00ff without
rebuilding anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cdriver.nvml.discover import parse_device_major
from cdriver.sim.gpu import driver_root as dr_mod
from cdriver.sim.gpu import nvml_build
from cdriver.sim.gpu.driver_root import DriverRoot, DriverRootError, create_driver_root, rerender_driver_root
from cdriver.sim.gpu.topology import TopologyError, demo_topology_path, load_topology

DEMO_UUID = "00000000-0000-0000-0000-0000000000ab"
REBIND_UUID = "00000000-0000-0000-0000-0000000000ff"
DEMO_NODES = {"worker-1": 0, "worker-2": 0, "worker-3": 1, "worker-4": 1}

PYNVML_DUMP = """
import ctypes, json
import pynvml
pynvml.nvmlInit()
gpus = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    v1 = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(v1))
    v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3))
    gpus.append({"uuid": pynvml.nvmlDeviceGetUUID(h), "cluster": bytes(v1.clusterUuid).hex(),
                 "clique": v1.cliqueId, "state": v1.state, "v3": [bytes(v3.clusterUuid).hex(), v3.cliqueId,
                 v3.state, v3.healthSummary]})
print(json.dumps(gpus))
pynvml.nvmlShutdown()
"""


def pynvml_report(dr: DriverRoot) -> list[dict]:
    """What a stock pynvml program on the node sees (fresh process; NVML via the dynamic loader)."""
    env = {k: v for k, v in os.environ.items() if k != "CDRIVER_SIM_NVML_CONFIG"}
    env["LD_LIBRARY_PATH"] = str(dr.lib_dir)
    proc = subprocess.run([sys.executable, "-c", PYNVML_DUMP], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def parse_check_fabric(stdout: str) -> list[dict]:
    """Parse check-fabric output with the demo's strict rules; returns the GPU blocks."""
    discovered = re.findall(r"^Discovered (\d+) GPU\(s\)$", stdout, re.M)
    assert len(discovered) == 1, stdout
    count = int(discovered[0])
    assert count > 0
    blocks = re.split(r"^(?=GPU \d+ )", stdout, flags=re.M)[1:]
    assert len(blocks) == count, stdout
    out, seen = [], set()
    for block in blocks:
        index = int(re.match(r"GPU (\d+) \((GPU-[0-9a-f-]+)\)\n", block).group(1))
        assert index < count and index not in seen
        seen.add(index)
        fields = {}
        for key in ("clusterUuid", "cliqueId", "state"):
            values = re.findall(rf"^  {key} *: (.*)$", block, re.M)
            assert len(values) == 1, block
            fields[key] = values[0]
        out.append(fields)
    return out


def run_check_fabric(dr: DriverRoot) -> tuple[int, str, str]:
    """Run the driver root's check-fabric executable as a separate process."""
    proc = subprocess.run([str(dr.bin_dir / "check-fabric")], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def assert_identity(dr: DriverRoot, cluster_uuid: str, clique: int) -> None:
    gpus = pynvml_report(dr)
    assert len(gpus) == 8
    assert [g["uuid"] for g in gpus] == [f"GPU-b200b200-0000-0000-0000-00000000000{i}" for i in range(8)]
    for gpu in gpus:
        assert gpu["cluster"] == cluster_uuid.replace("-", "")
        assert (gpu["clique"], gpu["state"]) == (clique, 3)
        assert gpu["v3"] == [cluster_uuid.replace("-", ""), clique, 3, 1]
    code, stdout, stderr = run_check_fabric(dr)
    assert code == 0, stderr
    blocks = parse_check_fabric(stdout)
    assert len(blocks) == 8
    for block in blocks:
        assert block["clusterUuid"].lower() == cluster_uuid
        assert block["cliqueId"] == str(clique)
        assert re.fullmatch(r"completed\s+\(3\)", block["state"])


def test_scenario_1_demo_nodes_report_their_identity(tmp_path: Path) -> None:
    for node, clique in DEMO_NODES.items():
        dr = create_driver_root(tmp_path / node, node, demo_topology_path(), channel_count=4)
        assert dr.identity is not None and (dr.identity.cluster_uuid, dr.identity.clique_id) == (DEMO_UUID, clique)
        assert stat.S_ISCHR((dr.dev_dir / "nvidia-caps-imex-channels" / "channel0").lstat().st_mode)
        assert_identity(dr, DEMO_UUID, clique)


def _digest(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def test_scenario_3_rebinding_needs_no_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topology = tmp_path / "topology.yaml"
    topology.write_text(demo_topology_path().read_text())
    roots = {node: create_driver_root(tmp_path / node, node, topology, channel_count=2) for node in DEMO_NODES}
    built = nvml_build.library_path()
    before = {"cache": _digest(built), **{n: _digest(d.nvml_library) for n, d in roots.items()}}

    topology.write_text(f"""version: 1
domains:
  - name: rebinder
    uuid: "{REBIND_UUID}"
    cliques:
      - id: 99
        nodes: [worker-1, worker-2, worker-3, worker-4]
""")

    def no_build(*args: object) -> None:
        raise AssertionError("re-rendering must not rebuild the library")

    monkeypatch.setattr(nvml_build, "_build", no_build)
    for node in DEMO_NODES:
        rebound = rerender_driver_root(tmp_path / node)  # re-reads the (rewritten) recorded topology
        assert rebound.identity is not None and rebound.identity.clique_id == 99
    after = {"cache": _digest(built), **{n: _digest(d.nvml_library) for n, d in roots.items()}}
    assert after == before
    for dr in roots.values():  # restarted readers: fresh processes
        assert_identity(dr, REBIND_UUID, 99)


def test_layout(tmp_path: Path) -> None:
    dr = create_driver_root(tmp_path / "r", "worker-2", demo_topology_path(), "gb300", channel_count=3)
    root = tmp_path / "r"
    assert dr.lib_dir == root / "usr/lib64" and dr.bin_dir == root / "usr/bin"
    assert os.readlink(root / "usr/lib64/libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert dr.nvml_library.read_bytes() == nvml_build.ensure_libnvml().read_bytes()
    text = dr.proc_devices.read_text()
    assert parse_device_major(text, "nvidia-caps-imex-channels") == dr.channel_major
    assert parse_device_major(text, "nvidia-caps") == dr.caps_major
    real = Path("/proc/devices").read_text()
    assert dr.channel_major not in _majors(real) and dr.caps_major not in _majors(real)
    channels = sorted((root / "dev/nvidia-caps-imex-channels").iterdir())
    assert [p.name for p in channels] == ["channel0", "channel1", "channel2"]
    for p in channels:
        st = p.lstat()
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == dr.channel_major
        assert os.minor(st.st_rdev) == int(p.name[len("channel"):])
    cap = root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
    assert dr.capability_file == cap
    assert "DeviceFileMinor: 512\n" in cap.read_text()
    assert stat.S_ISCHR((root / "dev/nvidia-caps/nvidia-cap512").lstat().st_mode)
    for name in ("nvidia-imex", "nvidia-imex-ctl", "nvidia-smi", "check-fabric"):
        assert os.access(dr.bin_dir / name, os.X_OK)
    assert "-m cdriver sim imex daemon \"$@\"" in (dr.bin_dir / "nvidia-imex").read_text()
    # a SIGUSR1 (re-read peers) sent while the stand-in's Python starts must not kill it
    assert "trap '' USR1" in (dr.bin_dir / "nvidia-imex").read_text().splitlines()
    assert "-m cdriver sim imex ctl \"$@\"" in (dr.bin_dir / "nvidia-imex-ctl").read_text()
    env = dr.process_env({"LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"] == f"{dr.lib_dir}:/x" and env["CDRIVER_SIM_NVML_CONFIG"] == str(dr.nvml_config)
    assert env["NODE_NAME"] == "worker-2" and env["NVIDIA_DRIVER_ROOT"] == str(dr.root)
    # the nvidia-smi stand-in finds its own driver root
    smi = subprocess.run([str(dr.bin_dir / "nvidia-smi"), "-L"], capture_output=True, text=True, timeout=60)
    assert smi.returncode == 0, smi.stderr
    assert smi.stdout.splitlines()[0] == "GPU 0: NVIDIA GB300 NVL (UUID: GPU-b300b300-0000-0000-0000-000000000000)"
    # `nvidia-smi --version` with an empty environment is how installers check a driver root
    version = subprocess.run(["env", "-i", str(dr.bin_dir / "nvidia-smi"), "--version"], capture_output=True,
                             text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[2].startswith("DRIVER version      : ")


def _majors(text: str) -> set[int]:
    return {int(line.split()[0]) for line in text.splitlines() if line.split() and line.split()[0].isdigit()}


def test_wrappers_exec_the_frozen_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/cdriver/cdriver")
    text = dr_mod.render_wrapper("x", ["sim", "imex", "daemon"])
    assert text.splitlines()[-1] == 'exec /opt/cdriver/cdriver sim imex daemon "$@"'
    assert "PYTHONPATH" not in text


def test_rerender_is_idempotent_and_keeps_devices(tmp_path: Path) -> None:
    dr = create_driver_root(tmp_path / "r", "worker-1", load_topology(demo_topology_path()), channel_count=2)
    node = dr.dev_dir / "nvidia-caps-imex-channels/channel1"
    ino = node.lstat().st_ino
    again = rerender_driver_root(tmp_path / "r")
    assert again == dr
    assert node.lstat().st_ino == ino


def test_unknown_node_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"'worker-9' is not in any clique; known nodes: worker-1"):
        create_driver_root(tmp_path / "r", "worker-9", demo_topology_path(), channel_count=1)
    assert not (tmp_path / "r").exists()  # nothing laid out


def test_node_without_fabric_needs_no_topology(tmp_path: Path) -> None:
    dr = create_driver_root(tmp_path / "r", "cpu-1", None, fabric_state="not_supported", channel_count=1)
    assert dr.identity is None
    code, stdout, _ = run_check_fabric(dr)
    assert code == 2
    assert "GPU 0 (GPU-b200b200-0000-0000-0000-000000000000): fabric NOT SUPPORTED" in stdout
    with pytest.raises(DriverRootError, match="no topology given"):
        create_driver_root(tmp_path / "s", "cpu-1", None, channel_count=1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fabric_state": "broken"}, r"fabric state 'broken' is unknown; choose one of completed"),
        ({"fabric_health": "sad"}, r"fabric health 'sad' is unknown"),
        ({"gpu_count": 65}, r"GPU count 65 is out of range 0\.\.64"),
        ({"channel_count": 0}, r"channel count 0 must be at least 1"),
        ({"profile": "h100"}, r"unknown GPU profile 'h100'"),
        ({"majors": (250, 250)}, r"choose different majors"),
    ],
)
def test_bad_parameters_are_rejected(tmp_path: Path, kwargs: dict, message: str) -> None:
    from cdriver.errors import CdriverError

    with pytest.raises(CdriverError, match=message):
        create_driver_root(tmp_path / "r", "worker-1", demo_topology_path(), **kwargs)


def test_rerender_of_a_plain_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DriverRootError, match=r"not a simulated driver root"):
        rerender_driver_root(tmp_path)


def test_malformed_topology_stops_rerender(tmp_path: Path) -> None:
    topology = tmp_path / "t.yaml"
    topology.write_text(demo_topology_path().read_text())
    dr = create_driver_root(tmp_path / "r", "worker-1", topology, channel_count=1)
    config_before = dr.nvml_config.read_text()
    topology.write_text(topology.read_text().replace("id: 1", "id: one"))
    with pytest.raises(TopologyError, match=r"cliques\[1\]\.id: expected an integer clique ID"):
        rerender_driver_root(tmp_path / "r")
    assert dr.nvml_config.read_text() == config_before  # the node keeps its last good identity
    assert load_topology(demo_topology_path()).identity("worker-1").clique_id == 0


def test_a_rack_node_has_the_gpus_its_topology_domain_names(tmp_path: Path) -> None:
    """gb300-nvl72: a compute tray of 4 GB300 GPUs, unless the caller says otherwise."""
    from cdriver.sim.gpu.topology import resolve_topology

    topology = resolve_topology("gb300-nvl72")
    dr = create_driver_root(tmp_path / "a", "rack1-tray05", topology, channel_count=1)
    gpus = pynvml_report(dr)
    assert [g["uuid"][:13] for g in gpus] == ["GPU-b300b300-"] * 4
    assert {g["clique"] for g in gpus} == {1} and dr.profile == "gb300"
    assert len(pynvml_report(create_driver_root(tmp_path / "b", "rack1-tray06", topology, "gb200", gpu_count=2,
                                                channel_count=1))) == 2


def test_rerender_keeps_the_stand_ins_command_and_the_nvml_compiler(tmp_path: Path) -> None:
    """A driver root made for another platform's image stays one when it is rendered again."""
    cc = nvml_build.compiler()
    create_driver_root(tmp_path / "r", "worker-1", demo_topology_path(), wrapper_command=["/image/bin/cdriver"], cc=cc)
    again = rerender_driver_root(tmp_path / "r")
    assert "exec /image/bin/cdriver sim imex daemon" in (again.bin_dir / "nvidia-imex").read_text()
    record = json.loads((tmp_path / "r" / dr_mod.NODE_RECORD).read_text())
    assert (record["wrapperCommand"], record["cc"]) == (["/image/bin/cdriver"], cc)
