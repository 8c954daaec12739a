"""Gathering what host-check looks at: files, device nodes, NVML, processes, the IMEX socket.

Everything here touches the system; the verdicts are computed in `checks.py` from the
`NodeFacts` this module returns.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

import psutil

from cdriver.errors import CdriverError
from cdriver.imex import config as imex_config
from cdriver.imex import ctl as imex_ctl
from cdriver.imex.config import DEFAULT_IMEX_CONFIG, IMEX_DAEMON_BINARY
from cdriver.nvml.discover import (
    IMEX_CHANNELS_DEV_DIR,
    IMEX_CHANNELS_DEVICE_NAME,
    NVML_LIBRARY_NAME,
    NVML_LIBRARY_SEARCH_DIRS,
)


@dataclass
class DeviceNodeFacts:
    """What is at the channel device path."""

    path: str
    exists: bool = False
    is_char: bool = False
    major: int | None = None
    minor: int | None = None


@dataclass
class FabricFacts:
    """NVML fabric identity as the kubelet plugin would compute it."""

    clique_id: str | None = None  # "" = not fabric-attached
    error: str | None = None


@dataclass
class ImexProcessFacts:
    """A running nvidia-imex and the config it runs with."""

    pid: int
    cmdline: list[str]
    config_path: str | None = None
    config: imex_config.ImexConfig | None = None
    config_error: str | None = None


@dataclass
class NodeFacts:
    """Everything the checks decide on."""

    mode: str
    driver_root: str
    driver_root_exists: bool
    nvml_library: str | None
    proc_devices_path: str
    proc_devices_error: str | None
    channel_major: int | None
    channel0: DeviceNodeFacts
    fabric: FabricFacts
    expected_socket: str
    processes: list[ImexProcessFacts] = field(default_factory=list)
    ctl_path: str | None = None
    probe: imex_ctl.ProbeResult | None = None


def under_root(root: str, path: str) -> str:
    """`path` as seen through driver root `root` (an absolute path joined under it)."""
    return os.path.normpath(os.path.join(root, path.lstrip("/")))


def find_nvml_library(root: str) -> str | None:
    """Path of libnvidia-ml.so.1 in the dirs the kubelet plugin loads it from, or None."""
    for sub in NVML_LIBRARY_SEARCH_DIRS:
        candidate = os.path.join(root, sub.lstrip("/"), NVML_LIBRARY_NAME)
        if os.path.exists(candidate):
            return candidate
    return None


def parse_channel_major(text: str) -> int | None:
    """Major of `nvidia-caps-imex-channels` in a /proc/devices text (character devices only)."""
    in_char = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Character devices"):
            in_char = True
            continue
        if line.startswith("Block devices"):
            in_char = False
            continue
        parts = line.split()
        if in_char and len(parts) == 2 and parts[1] == IMEX_CHANNELS_DEVICE_NAME and parts[0].isdigit():
            return int(parts[0])
    return None


def device_node_facts(path: str) -> DeviceNodeFacts:
    """Stat a device path without following it anywhere surprising."""
    facts = DeviceNodeFacts(path=path)
    try:
        st = os.stat(path)
    except OSError:
        return facts
    facts.exists = True
    facts.is_char = stat.S_ISCHR(st.st_mode)
    if facts.is_char:
        facts.major, facts.minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return facts


def fabric_facts(root: str) -> FabricFacts:
    """Clique ID through the production discovery code (strict: fabric errors are reported)."""
    try:
        from cdriver.nvml import discover

        return FabricFacts(clique_id=discover.clique_id(root, strict=True))
    except CdriverError as e:
        return FabricFacts(error=str(e))
    except Exception as e:  # NVML failures of any kind are evidence, not crashes
        return FabricFacts(error=f"{type(e).__name__}: {e}")


def _config_arg(cmdline: list[str]) -> str | None:
    for i, arg in enumerate(cmdline):
        if arg in ("-c", "--config") and i + 1 < len(cmdline):
            return cmdline[i + 1]
        for prefix in ("-c=", "--config="):
            if arg.startswith(prefix):
                return arg[len(prefix):]
    return None


def is_imex_process(name: str, cmdline: list[str]) -> bool:
    """True for an nvidia-imex daemon (by process name or argv[0]); never for nvidia-imex-ctl."""
    argv0 = os.path.basename(cmdline[0]) if cmdline else ""
    return name == IMEX_DAEMON_BINARY or argv0 == IMEX_DAEMON_BINARY


def in_pod_cgroup(cgroup_text: str) -> bool:
    """True when a /proc/<pid>/cgroup text places the process in a Kubernetes pod (kubepods)."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" in path:
            return True
    return False


def _pod_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return in_pod_cgroup(f.read())
    except OSError:
        return False


def is_under(path: str, root: str) -> bool:
    """True when the resolved `path` lies below the resolved directory `root`."""
    return root == "/" or path.startswith(root.rstrip(os.sep) + os.sep)


def counts_as_host_service(in_pod: bool, config_path: str, config_root: str | None) -> bool:
    """Whether a running nvidia-imex is this node's host service.

    A daemon in a Kubernetes pod (a per-domain daemon of driver-managed mode) never is. Every
    other one is: a node has one host, whatever its driver root (`/`, or e.g.
    `/run/nvidia/driver` for a containerized driver, whose IMEX config still lives on the
    host). Only when `config_root` is given, for several simulated nodes sharing one machine,
    one mount namespace and one root, does a daemon count solely if its config lies below it.
    """
    if in_pod:
        return False
    return config_root is None or is_under(config_path, config_root)


def _config_path(cmdline: list[str], cwd: str | None) -> str:
    cfg = _config_arg(cmdline) or DEFAULT_IMEX_CONFIG  # what nvidia-imex reads without -c
    if not os.path.isabs(cfg) and cwd:
        cfg = os.path.join(cwd, cfg)
    return os.path.realpath(cfg)


def imex_processes(config_root: str | None = None) -> list[ImexProcessFacts]:
    """Running nvidia-imex processes that are this node's host service (`counts_as_host_service`)."""
    found = []
    root_real = os.path.realpath(config_root) if config_root is not None else None
    for proc in psutil.process_iter(["pid", "name", "cmdline", "cwd"]):
        info = proc.info
        cmdline = info.get("cmdline") or []
        if not is_imex_process(info.get("name") or "", cmdline):
            continue
        config_path = _config_path(cmdline, info.get("cwd"))
        if not counts_as_host_service(_pod_process(info["pid"]), config_path, root_real):
            continue
        facts = ImexProcessFacts(pid=info["pid"], cmdline=cmdline, config_path=config_path)
        try:
            facts.config = imex_config.read_config(config_path)
        except CdriverError as e:
            facts.config_error = str(e)
        found.append(facts)
    return found


def gather(mode: str, driver_root: str, socket: str, probe_timeout: float = 5.0,
           only_config_under_driver_root: bool = False) -> NodeFacts:
    """Collect the facts for one node.

    With `only_config_under_driver_root`, only nvidia-imex daemons whose config lies below the
    driver root count (simulated nodes sharing one machine); by default every host daemon does.
    """
    root = os.path.abspath(driver_root)
    root_exists = os.path.isdir(root)
    proc_devices = under_root(root, "/proc/devices")
    if not os.path.exists(proc_devices):
        proc_devices = "/proc/devices"
    major: int | None = None
    proc_error: str | None = None
    try:
        with open(proc_devices, encoding="utf-8") as f:
            major = parse_channel_major(f.read())
    except OSError as e:
        proc_error = f"cannot read {proc_devices}: {e.strerror}"
    dev_dir = under_root(root, IMEX_CHANNELS_DEV_DIR)
    if not os.path.exists(under_root(root, "/dev")):
        dev_dir = IMEX_CHANNELS_DEV_DIR
    channel0 = device_node_facts(os.path.join(dev_dir, "channel0"))
    expected_socket = os.path.realpath(under_root(root, socket))
    facts = NodeFacts(
        mode=mode,
        driver_root=root,
        driver_root_exists=root_exists,
        nvml_library=find_nvml_library(root) if root_exists else None,
        proc_devices_path=proc_devices,
        proc_devices_error=proc_error,
        channel_major=major,
        channel0=channel0,
        fabric=fabric_facts(root) if root_exists else FabricFacts(error="driver root missing"),
        expected_socket=expected_socket,
        processes=imex_processes(root if only_config_under_driver_root else None),
        ctl_path=imex_ctl.find_ctl(root) if root_exists else None,
    )
    if facts.ctl_path and os.path.exists(expected_socket):
        facts.probe = imex_ctl.probe_ready(facts.ctl_path, unix_socket=expected_socket, timeout=probe_timeout)
    return facts
