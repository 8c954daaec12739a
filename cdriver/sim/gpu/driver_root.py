"""Lay out a simulated node's NVIDIA driver root.

The layout is what the kubelet plugin expects below NVIDIA_DRIVER_ROOT on a real host, but
holding the simulation's parts::

    <root>/usr/lib64/libnvidia-ml.so.1         simulated NVML (copy of the cached build)
    <root>/usr/lib64/libnvidia-ml.so           -> libnvidia-ml.so.1
    <root>/usr/lib64/nvml-sim.conf             this node's GPUs and fabric identity
    <root>/usr/lib64/libnvidia-ml.so.<version>  -> libnvidia-ml.so.1 (names a driver install has)
    <root>/usr/lib64/libcuda.so.<version>      empty placeholder (no CUDA), libcuda.so.1 -> it
    <root>/usr/bin/nvidia-imex, nvidia-imex-ctl  IMEX stand-ins (wrappers around `cdriver sim imex`)
    <root>/usr/bin/nvidia-smi, check-fabric    small NVML readers
    <root>/proc/devices                        with nvidia-caps-imex-channels / nvidia-caps majors
    <root>/proc/driver/nvidia/capabilities/fabric-imex-mgmt
    <root>/dev/nvidia-caps-imex-channels/channel<N>   real char devices (minor N)
    <root>/dev/nvidia-caps/nvidia-cap<minor>           the fabric-imex-mgmt capability device
    <root>/sim-node.json                       the parameters, for re-rendering

Rendering is idempotent: rendering again (e.g. after the topology changed) rewrites the
configuration atomically and keeps correct device nodes; readers pick up the new identity
when they restart. The C library is never rebuilt by a re-render.
"""

from __future__ import annotations

import filecmp
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdriver.api import constants
from cdriver.atomic import atomic_path, atomic_write
from cdriver.checkout import PACKAGE_PARENT
from cdriver.errors import CdriverError
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY
from cdriver.nvml.discover import FABRIC_MGMT_CAP_PATH
from cdriver.sim.gpu import devices
from cdriver.sim.gpu.nvml_build import LIBRARY_NAME, ensure_libnvml
from cdriver.sim.gpu.profiles import (
    FABRIC_STATE_COMPLETED,
    FABRIC_STATE_IN_PROGRESS,
    FABRIC_STATE_NOT_STARTED,
    HEALTH_CONDITIONS,
    MAX_GPUS,
    Profile,
    get_profile,
    health_summary,
)
from cdriver.sim.gpu.topology import NodeIdentity, Topology, load_topology

ENV_SIM_NVML_CONFIG = "CDRIVER_SIM_NVML_CONFIG"  # simulated NVML: path of its per-node config
SIM_NVML_CONFIG_NAME = "nvml-sim.conf"  # default config next to the simulated library

LIB_SUBDIR = "usr/lib64"
BIN_SUBDIR = "usr/bin"
CUDA_LIBRARY_NAME = "libcuda.so.1"
NODE_RECORD = "sim-node.json"
DEFAULT_CHANNEL_COUNT = 2048
NVIDIA_FRONTEND_MAJOR = 195

#: fabric_state values: what every GPU's fabric info reports.
FABRIC_STATES: dict[str, int | None] = {
    "completed": FABRIC_STATE_COMPLETED,
    "in_progress": FABRIC_STATE_IN_PROGRESS,
    "not_started": FABRIC_STATE_NOT_STARTED,
    "not_supported": None,  # no fabric: the calls return NVML_ERROR_NOT_SUPPORTED
}


class DriverRootError(CdriverError):
    """The driver root cannot be laid out with the given parameters."""


@dataclass(frozen=True)
class DriverRoot:
    """A laid-out simulated driver root."""

    root: Path
    lib_dir: Path
    bin_dir: Path
    proc_devices: Path
    dev_dir: Path
    channel_major: int
    caps_major: int
    channel_count: int
    nvml_library: Path
    nvml_config: Path
    capability_file: Path
    node_name: str
    profile: str
    identity: NodeIdentity | None  # None on a node without NVLink fabric

    def process_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: os.environ) plus what a process on this node needs to see its NVML."""
        env = dict(os.environ if base is None else base)
        env[ENV_SIM_NVML_CONFIG] = str(self.nvml_config)
        env[constants.ENV_NODE_NAME] = self.node_name
        env[constants.ENV_DRIVER_ROOT] = str(self.root)
        previous = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = str(self.lib_dir) + (f":{previous}" if previous else "")
        return env


# --------------------------------------------------------------------------------------
# Pure rendering
# --------------------------------------------------------------------------------------

def render_nvml_config(node_name: str, identity: NodeIdentity | None, profile: Profile, *,
                       fabric_state: str = "completed", fabric_health: str = "healthy", fabric_status: int = 0,
                       gpu_count: int | None = None) -> str:
    """The simulated NVML library's configuration for one node (see nvml_sim.c for the format)."""
    if fabric_state not in FABRIC_STATES:
        raise DriverRootError(f"fabric state {fabric_state!r} is unknown; choose one of {', '.join(FABRIC_STATES)}")
    if fabric_health not in HEALTH_CONDITIONS:
        raise DriverRootError(f"fabric health {fabric_health!r} is unknown; "
                              f"choose one of {', '.join(HEALTH_CONDITIONS)}")
    count = profile.gpu_count if gpu_count is None else gpu_count
    if not 0 <= count <= MAX_GPUS:
        raise DriverRootError(f"GPU count {count} is out of range 0..{MAX_GPUS}")
    state = FABRIC_STATES[fabric_state]
    if state is not None and identity is None:
        raise DriverRootError(f"node {node_name!r} has fabric state {fabric_state} but no identity in the "
                              "topology; add the node to a clique or use fabric state not_supported")
    mask = HEALTH_CONDITIONS[fabric_health]
    lines = [
        f"# Simulated NVML configuration for node {node_name} (generated by cdriver sim; re-render to change).",
        "format = 1",
        f"node = {node_name}",
        f"driver_version = {profile.driver_version}",
        f"nvml_version = {profile.nvml_version}",
        f"cuda_driver_version = {profile.cuda_version}",
        f"gpu_count = {count}",
    ]
    for i in range(count):
        prefix = f"gpu.{i}."
        lines += [
            f"{prefix}uuid = {profile.gpu_uuid(i)}",
            f"{prefix}name = {profile.gpu_name}",
            f"{prefix}minor = {i}",
            f"{prefix}pci_bus_id = {profile.pci_bus_id(i)}",
            f"{prefix}pci_device_id = 0x{profile.pci_device_id:08X}",
            f"{prefix}pci_subsystem_id = 0x{profile.pci_subsystem_id:08X}",
        ]
        if state is None or identity is None:
            lines.append(f"{prefix}fabric = not_supported")
            continue
        lines += [
            f"{prefix}fabric = supported",
            f"{prefix}fabric.cluster_uuid = {identity.cluster_uuid}",
            f"{prefix}fabric.clique_id = {identity.clique_id}",
            f"{prefix}fabric.state = {state}",
            f"{prefix}fabric.status = {fabric_status}",
            f"{prefix}fabric.health_mask = 0x{mask:X}",
            f"{prefix}fabric.health_summary = {health_summary(mask)}",
        ]
    return "\n".join(lines) + "\n"


def cdriver_command() -> list[str]:
    """argv prefix that runs this cdriver: the frozen executable, or `<python> -m cdriver`."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "cdriver"]


def render_wrapper(description: str, args: list[str], root_relative_args: list[str] | None = None,
                   command: list[str] | None = None, ignore_signals: tuple[str, ...] = ()) -> str:
    """A /bin/sh script that execs `cdriver <args> [<root-relative args>] "$@"`.

    In `root_relative_args` an argument "{root}" becomes the driver root the script sits in
    (two levels above its bin directory), so a relocated driver root keeps working. `command`
    replaces this process's own cdriver (e.g. ["cdriver"]: the one on PATH inside the driver image).
    `ignore_signals` are ignored from the start (inherited across exec) until the program
    installs its own handlers, so a signal sent while Python starts does not kill it.
    """
    lines = ["#!/bin/sh", f"# {description} (cdriver simulation kit; generated)."]
    if ignore_signals:
        lines.append(f"trap '' {' '.join(ignore_signals)}")
    if command is None and not getattr(sys, "frozen", False):
        package_parent = str(PACKAGE_PARENT)
        lines.append(f"PYTHONPATH={shlex.quote(package_parent)}${{PYTHONPATH:+:$PYTHONPATH}}")
        lines.append("export PYTHONPATH")
    command = command or cdriver_command()
    tail = ""
    if root_relative_args:
        lines.append('root=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)')
        tail = "".join(" " + ('"$root"' if a == "{root}" else shlex.quote(a)) for a in root_relative_args)
    argv = " ".join(shlex.quote(part) for part in command + args)
    lines.append(f'exec {argv}{tail} "$@"')
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# Effects
# --------------------------------------------------------------------------------------

def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, mode=mode)


def _install_library(built: Path, lib_dir: Path) -> Path:
    """Copy the cached library into the driver root (a copy, not a link: see module notes)."""
    target = lib_dir / LIBRARY_NAME
    if not (target.is_file() and not target.is_symlink() and filecmp.cmp(built, target, shallow=False)):
        with atomic_path(target, mode=0o755) as tmp:
            shutil.copy2(built, tmp)
    link = lib_dir / "libnvidia-ml.so"
    if not (link.is_symlink() and os.readlink(link) == LIBRARY_NAME):
        link.unlink(missing_ok=True)
        link.symlink_to(LIBRARY_NAME)
    return target


def _install_versioned_names(lib_dir: Path, driver_version: str) -> None:
    """The file names a driver install carries next to libnvidia-ml.so.1, for tools that look
    libraries up by the driver version (the container toolkit's CDI generation):
    libnvidia-ml.so.<version> (a link to the simulated NVML) and libcuda.so.<version> (an
    empty placeholder: the simulation has no CUDA; libcuda.so.1 links to it)."""
    names = {f"libnvidia-ml.so.{driver_version}", f"libcuda.so.{driver_version}", CUDA_LIBRARY_NAME}
    for stale in [*lib_dir.glob("libnvidia-ml.so.*.*"), *lib_dir.glob("libcuda.so*")]:
        if stale.name not in names:
            stale.unlink()
    links = {f"libnvidia-ml.so.{driver_version}": LIBRARY_NAME, CUDA_LIBRARY_NAME: f"libcuda.so.{driver_version}"}
    placeholder = lib_dir / f"libcuda.so.{driver_version}"
    if not placeholder.is_file() or placeholder.is_symlink():
        placeholder.unlink(missing_ok=True)
        _write_atomic(placeholder, "", 0o755)
    for name, target in links.items():
        link = lib_dir / name
        if not (link.is_symlink() and os.readlink(link) == target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)


def default_majors() -> tuple[int, int]:
    """(channel major, caps major): the lowest two majors >= 240 unused on this machine."""
    channel, caps = devices.choose_majors(devices.host_proc_devices(), 2)
    return channel, caps


def _resolve_identity(node_name: str, topology: Topology | str | Path | None,
                      fabric_state: str) -> NodeIdentity | None:
    if topology is None:
        if fabric_state != "not_supported":
            raise DriverRootError(f"node {node_name!r}: no topology given; pass a topology file "
                                  "or use fabric state not_supported for a node without NVLink fabric")
        return None
    topo = topology if isinstance(topology, Topology) else load_topology(topology)
    found = topo.find(node_name)
    if found is None and fabric_state != "not_supported":
        topo.identity(node_name)  # raises the descriptive error
    return found


def _topology_source(topology: Topology | str | Path | None) -> str | None:
    """Path to record for re-rendering (None for an in-memory topology)."""
    if isinstance(topology, Topology):
        return str(Path(topology.source).resolve()) if Path(topology.source).is_file() else None
    return str(Path(topology).resolve()) if topology is not None else None


def create_driver_root(root: str | Path, node_name: str, topology_path: Topology | str | Path | None,
                       profile: str | None = None, *, fabric_state: str = "completed", fabric_health: str = "healthy",
                       fabric_status: int = 0, gpu_count: int | None = None,
                       channel_count: int = DEFAULT_CHANNEL_COUNT, majors: tuple[int, int] | None = None,
                       cache_dir: Path | None = None, wrapper_command: list[str] | None = None,
                       cc: str | None = None) -> DriverRoot:
    """Lay out (or refresh) the simulated driver root of `node_name` under `root`.

    The node's identity comes from the topology (a path or a loaded Topology). Raises a
    CdriverError subclass (TopologyError, ProfileError, DeviceError, DriverRootError,
    NvmlBuildError) with an actionable message; nothing is left half-written. `wrapper_command`:
    what the stand-in executables run (default: this cdriver; ["cdriver"] for containers of the
    driver image on a real node); `cc`: the compiler of the NVML stand-in (another architecture's
    for a driver run under emulation, see `nvml_build.cross_compiler`).
    """
    root = Path(root).resolve()
    identity = _resolve_identity(node_name, topology_path, fabric_state)
    # unless given, the GPUs are those the node's topology domain names (else gb200's)
    prof = get_profile(profile or (identity.profile if identity is not None else "") or "gb200")
    given_gpu_count = gpu_count  # recorded as given: a re-render with another topology follows it
    if gpu_count is None and identity is not None:
        gpu_count = identity.gpus_per_node
    config_text = render_nvml_config(node_name, identity, prof, fabric_state=fabric_state,
                                     fabric_health=fabric_health, fabric_status=fabric_status, gpu_count=gpu_count)
    channel_major, caps_major = majors if majors is not None else default_majors()
    host_text = devices.host_proc_devices()
    extra = {}
    if NVIDIA_FRONTEND_MAJOR not in devices.parse_proc_devices(host_text).used_majors():
        extra[NVIDIA_FRONTEND_MAJOR] = "nvidia-frontend"
    proc_text = devices.render_proc_devices(host_text, channel_major, caps_major, extra=extra)
    if channel_count < 1:
        raise DriverRootError(f"channel count {channel_count} must be at least 1")
    built = ensure_libnvml(cache_dir, cc)

    lib_dir = root / LIB_SUBDIR
    bin_dir = root / BIN_SUBDIR
    dev_dir = root / "dev"
    for d in (lib_dir, bin_dir, dev_dir, root / "proc"):
        d.mkdir(parents=True, exist_ok=True)
    library = _install_library(built, lib_dir)
    _install_versioned_names(lib_dir, prof.driver_version)
    nvml_config = lib_dir / SIM_NVML_CONFIG_NAME
    _write_atomic(nvml_config, config_text)

    cmd = wrapper_command
    wrappers = {
        # the real daemon handles SIGUSR1 (re-read the nodes config) from its first instant
        IMEX_DAEMON_BINARY: render_wrapper("Simulated nvidia-imex", ["sim", "imex", "daemon"], command=cmd,
                                           ignore_signals=("USR1",)),
        IMEX_CTL_BINARY: render_wrapper("Simulated nvidia-imex-ctl", ["sim", "imex", "ctl"], command=cmd),
        "nvidia-smi": render_wrapper("Simulated nvidia-smi", ["sim", "nvidia-smi"], ["--driver-root", "{root}"],
                                     command=cmd),
        "check-fabric": render_wrapper("Fabric identity check", ["sim", "check-fabric"],
                                       ["--driver-root", "{root}"], command=cmd),
    }
    for name, text in wrappers.items():
        _write_atomic(bin_dir / name, text, 0o755)

    proc_devices = root / "proc" / "devices"
    _write_atomic(proc_devices, proc_text)
    capability_file = root / FABRIC_MGMT_CAP_PATH.lstrip("/")
    _write_atomic(capability_file, devices.render_capability())
    devices.create_channel_nodes(dev_dir, channel_major, channel_count)
    devices.create_caps_node(dev_dir, caps_major)

    record: dict[str, Any] = {
        "node": node_name,
        "topology": _topology_source(topology_path),
        "profile": profile,
        "fabricState": fabric_state,
        "fabricHealth": fabric_health,
        "fabricStatus": fabric_status,
        "gpuCount": given_gpu_count,
        "channelCount": channel_count,
        "majors": [channel_major, caps_major],
        # what a re-render keeps: the stand-ins' command and the NVML stand-in's compiler
        "wrapperCommand": wrapper_command,
        "cc": cc,
    }
    _write_atomic(root / NODE_RECORD, json.dumps(record, indent=2) + "\n")
    return DriverRoot(root=root, lib_dir=lib_dir, bin_dir=bin_dir, proc_devices=proc_devices, dev_dir=dev_dir,
                      channel_major=channel_major, caps_major=caps_major, channel_count=channel_count,
                      nvml_library=library, nvml_config=nvml_config, capability_file=capability_file,
                      node_name=node_name, profile=prof.name, identity=identity)


def rerender_driver_root(root: str | Path, topology_path: str | Path | None = None,
                         cache_dir: Path | None = None, fabric_state: str | None = None,
                         fabric_health: str | None = None) -> DriverRoot:
    """Render an existing driver root again with its recorded parameters (and optionally a new topology,
    or a new fabric state or health: the mock NVML reports it from the next nvmlInit on)."""
    record_path = Path(root) / NODE_RECORD
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        raise DriverRootError(f"{record_path}: not found; {root} is not a simulated driver root "
                              "(create it with `cdriver sim driver-root`)") from None
    except (OSError, ValueError) as exc:
        raise DriverRootError(f"{record_path}: unreadable ({exc}); create the driver root again") from None
    try:
        topology = topology_path if topology_path is not None else record["topology"]
        return create_driver_root(root, record["node"], topology, record["profile"],
                                  fabric_state=fabric_state or record["fabricState"],
                                  fabric_health=fabric_health or record["fabricHealth"],
                                  fabric_status=record["fabricStatus"], gpu_count=record["gpuCount"],
                                  channel_count=record["channelCount"], majors=tuple(record["majors"]),
                                  cache_dir=cache_dir, wrapper_command=record.get("wrapperCommand"),
                                  cc=record.get("cc"))
    except (KeyError, TypeError, ValueError) as exc:
        raise DriverRootError(f"{record_path}: missing or bad field ({exc}); create the driver root again") from None

