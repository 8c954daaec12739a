"""Host-check verdicts: pure functions from `NodeFacts` to PASS/FAIL/SKIP results.

Each result carries the evidence it was decided on and, when it fails, one line saying how
to fix it. The IMEX-service checks invert with the mode: a host-managed node needs the host
service; a driver-managed node must not run one (it would hold the IMEX ports).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED
from cdriver.imex.config import IMEX_CMD_PORT, IMEX_CTL_BINARY, IMEX_SERVER_PORT
from cdriver.nvml.discover import IMEX_CHANNELS_DEVICE_NAME
from cdriver.roles.host_check.facts import NodeFacts

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """One line of the report."""

    name: str
    status: str
    evidence: str
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def check_driver_root(f: NodeFacts) -> CheckResult:
    name = "driver-root"
    if not f.driver_root_exists:
        return CheckResult(name, FAIL, f"{f.driver_root} does not exist",
                           "pass --driver-root <directory of the NVIDIA driver install> (e.g. / or /run/nvidia/driver)")
    if not f.nvml_library:
        return CheckResult(name, FAIL, f"no libnvidia-ml.so.1 under {f.driver_root}",
                           "install the NVIDIA driver there, or point --driver-root at the driver install")
    return CheckResult(name, PASS, f"{f.driver_root} ({f.nvml_library})")


def check_channel_major(f: NodeFacts) -> CheckResult:
    name = "channel-major"
    if f.proc_devices_error:
        return CheckResult(name, FAIL, f.proc_devices_error, "make /proc/devices readable (run host-check as root)")
    if f.channel_major is None:
        return CheckResult(name, FAIL, f"no '{IMEX_CHANNELS_DEVICE_NAME}' character device in {f.proc_devices_path}",
                           "load an NVIDIA driver with IMEX channel support (>= 570) on this node")
    return CheckResult(name, PASS, f"{IMEX_CHANNELS_DEVICE_NAME} major {f.channel_major} ({f.proc_devices_path})")


def check_channel_device(f: NodeFacts) -> CheckResult:
    name = "channel-device"
    dev = f.channel0
    major = f.channel_major if f.channel_major is not None else "<major>"
    mknod = f"mknod -m 666 {dev.path} c {major} 0"
    if not dev.exists:
        return CheckResult(name, FAIL, f"{dev.path} does not exist", f"create it: {mknod}")
    if not dev.is_char:
        return CheckResult(name, FAIL, f"{dev.path} is not a character device",
                           f"remove it and create the device node: {mknod}")
    if f.channel_major is not None and dev.major != f.channel_major:
        return CheckResult(name, FAIL,
                           f"{dev.path} has major {dev.major}, /proc/devices says {f.channel_major}",
                           f"recreate it with the driver's major: rm {dev.path} && {mknod}")
    return CheckResult(name, PASS, f"{dev.path} is a character device {dev.major}:{dev.minor}")


def check_fabric(f: NodeFacts) -> CheckResult:
    name = "nvlink-fabric"
    if f.fabric.error:
        return CheckResult(name, FAIL, f.fabric.error,
                           "wait for the NVLink fabric to reach state COMPLETED and be healthy "
                           "(check nvidia-fabricmanager and `nvidia-smi -q` Fabric section)")
    if not f.fabric.clique_id:
        return CheckResult(name, FAIL, "GPUs report no NVLink fabric (not fabric-attached)",
                           "IMEX channels need a Multi-Node NVLink node; run ComputeDomain workloads on "
                           f"nodes labelled {constants.LABEL_NODE_CLIQUE}")
    return CheckResult(name, PASS, f"fabric state completed, clique {f.fabric.clique_id}")


def _pids(f: NodeFacts) -> str:
    return ", ".join(f"pid {p.pid}" for p in f.processes)


def _ports(f: NodeFacts) -> str:
    """The running service's ports (its config's, else IMEX's defaults)."""
    cfg = next((p.config for p in f.processes if p.config is not None), None)
    if cfg is None:
        return f"{IMEX_SERVER_PORT}/{IMEX_CMD_PORT}"
    return f"{cfg.server_port}/{cfg.cmd_port}"


def check_imex_service(f: NodeFacts) -> CheckResult:
    name = "imex-service"
    if f.mode == IMEX_MODE_DRIVER_MANAGED:
        if f.processes:
            return CheckResult(name, FAIL,
                               f"a host nvidia-imex is running ({_pids(f)}, ports {_ports(f)}); in driver-managed "
                               "mode the per-domain daemons run IMEX on this node and need ports "
                               f"{IMEX_SERVER_PORT}/{IMEX_CMD_PORT}",
                               "stop and disable it: systemctl disable --now nvidia-imex")
        return CheckResult(name, PASS, "no host nvidia-imex running (driver-managed mode runs its own daemons)")
    if not f.processes:
        return CheckResult(name, FAIL, "no nvidia-imex process is running",
                           "start the host service: systemctl enable --now nvidia-imex")
    return CheckResult(name, PASS, f"nvidia-imex running ({_pids(f)})")


def check_imex_config(f: NodeFacts) -> CheckResult:
    name = "imex-config"
    if f.mode == IMEX_MODE_DRIVER_MANAGED:
        return CheckResult(name, SKIP, "driver-managed mode: the driver writes each daemon's config")
    if not f.processes:
        return CheckResult(name, SKIP, "no nvidia-imex process to inspect")
    proc = f.processes[0]
    if proc.config_path is None:
        return CheckResult(name, FAIL, f"pid {proc.pid} runs without -c <config>: {' '.join(proc.cmdline)}",
                           "run nvidia-imex with -c /etc/nvidia-imex/config.cfg")
    if proc.config is None:
        return CheckResult(name, FAIL, proc.config_error or f"cannot read {proc.config_path}",
                           f"fix {proc.config_path} and restart nvidia-imex")
    cfg = proc.config
    ports = f"ports {cfg.server_port}/{cfg.cmd_port}"
    if not cfg.cmd_enabled:
        return CheckResult(name, FAIL, f"{proc.config_path}: IMEX_CMD_ENABLED is not 1",
                           f"set IMEX_CMD_ENABLED=1 in {proc.config_path} and restart nvidia-imex")
    actual = cfg.cmd_unix_path
    if not actual:
        return CheckResult(name, FAIL, f"{proc.config_path}: IMEX_CMD_UNIX_DOMAIN_PATH is not set",
                           f"set IMEX_CMD_UNIX_DOMAIN_PATH={f.expected_socket} and restart nvidia-imex")
    if os.path.realpath(actual) != f.expected_socket:
        return CheckResult(name, FAIL,
                           f"{proc.config_path}: IMEX_CMD_UNIX_DOMAIN_PATH={actual}, "
                           f"the driver uses {f.expected_socket}",
                           f"set IMEX_CMD_UNIX_DOMAIN_PATH={f.expected_socket}, or install the driver with "
                           f"imex.hostSocketPath={actual}")
    return CheckResult(name, PASS, f"{proc.config_path}: command socket {actual}, {ports}")


def check_imex_socket(f: NodeFacts) -> CheckResult:
    name = "imex-socket"
    if f.mode == IMEX_MODE_DRIVER_MANAGED:
        return CheckResult(name, SKIP, "driver-managed mode: readiness is probed inside each daemon pod")
    if not f.ctl_path:
        return CheckResult(name, FAIL, f"no {IMEX_CTL_BINARY} under {f.driver_root}",
                           "install the nvidia-imex package (it ships nvidia-imex-ctl)")
    if f.probe is not None and f.probe.ready:
        return CheckResult(name, PASS, f"{f.expected_socket} answers READY")
    evidence = f"socket {f.expected_socket} does not exist" if f.probe is None else f.probe.describe()
    cause = _service_problem(f)
    if cause:  # one broken precondition, one FAIL: the cause is reported by its own check
        return CheckResult(name, SKIP, f"{evidence} (follows from the {cause} failure)")
    if f.probe is None:
        return CheckResult(name, FAIL, evidence,
                           "start nvidia-imex with IMEX_CMD_ENABLED=1 and the socket path the driver uses")
    return CheckResult(name, FAIL, evidence,
                       "check `journalctl -u nvidia-imex`; the daemon must answer READY before workloads start")


def _service_problem(f: NodeFacts) -> str:
    """Name of the failed service or config check that explains a silent socket, or ""."""
    for check in (check_imex_service, check_imex_config):
        result = check(f)
        if result.status == FAIL:
            return result.name
    return ""


ALL_CHECKS = (check_driver_root, check_channel_major, check_channel_device, check_fabric, check_imex_service,
              check_imex_config, check_imex_socket)


def run_checks(facts: NodeFacts) -> list[CheckResult]:
    """Every check, in report order."""
    return [check(facts) for check in ALL_CHECKS]


def exit_code(results: list[CheckResult]) -> int:
    """0 when nothing failed, 1 when any check failed."""
    return 1 if any(r.status == FAIL for r in results) else 0
