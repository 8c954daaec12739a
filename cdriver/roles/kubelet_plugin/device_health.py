"""The health of this node's devices, from what makes them usable (pure).

A channel is usable on a node while the node's NVLink fabric is (GPU fabric state completed,
no error), and, for the ComputeDomain whose claim holds it here, while that domain's IMEX daemon
on the node is Ready in its clique (driver-managed mode) or the host's `nvidia-imex` answers
READY (host-managed mode). A free channel is Healthy when the fabric is. The daemon slot is
usable while the fabric is. Each device's message says which of these decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdriver.api import constants
from cdriver.dra.resource_health import HEALTHY, UNHEALTHY, DeviceHealthReport
from cdriver.nvml.discover import (
    FABRIC_STATE_COMPLETED,
    FABRIC_STATE_NAMES,
    FABRIC_STATE_NOT_SUPPORTED,
    HEALTH_SUMMARY_UNHEALTHY,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
    GpuFabric,
)
from cdriver.roles.kubelet_plugin.devices import DeviceRef


@dataclass(frozen=True)
class HealthInputs:
    """What the plugin knows about this node now."""

    node_name: str
    devices: tuple[DeviceRef, ...]
    host_managed: bool
    clique_id: str
    #: why the fabric is not usable now ("" when it is), and the first problem's code
    fabric_problem: str = ""
    fabric_code: str = ""
    #: host-managed: why the host's nvidia-imex is not READY ("" when it is)
    host_problem: str = ""
    #: driver-managed: domains whose prepared channel claims hold the channel here, with
    #: (ready, why not) of their daemon on this node and a label naming the domain
    holders: dict[str, tuple[bool, str, str]] = field(default_factory=dict)


def channel_health(i: HealthInputs) -> tuple[str, str]:
    """(health, message) of the node's channel devices."""
    if not i.clique_id:
        return UNHEALTHY, (f"node {i.node_name} is not attached to a multi-node NVLink fabric: claims are "
                           "prepared without IMEX channels")
    if i.fabric_problem:
        return UNHEALTHY, f"NVLink fabric of node {i.node_name}: {i.fabric_problem}"
    if i.host_managed:
        if i.host_problem:
            return UNHEALTHY, i.host_problem
        return HEALTHY, f"the host's nvidia-imex on node {i.node_name} is READY"
    if not i.holders:
        return HEALTHY, f"node {i.node_name} is in clique {i.clique_id}; no ComputeDomain holds its channel"
    broken = [f"IMEX daemon of ComputeDomain {label} on node {i.node_name} is not Ready: {why}"
              for _, (ready, why, label) in sorted(i.holders.items()) if not ready]
    if broken:
        return UNHEALTHY, "; ".join(broken)
    labels = ", ".join(label for _, (_, _, label) in sorted(i.holders.items()))
    return HEALTHY, f"IMEX daemon of ComputeDomain {labels} on node {i.node_name} is Ready"


def daemon_slot_health(i: HealthInputs) -> tuple[str, str]:
    """(health, message) of the node's daemon slot (an IMEX daemon can run here)."""
    if not i.clique_id:
        return UNHEALTHY, f"node {i.node_name} is not attached to a multi-node NVLink fabric"
    if i.fabric_problem:
        return UNHEALTHY, f"NVLink fabric of node {i.node_name}: {i.fabric_problem}"
    return HEALTHY, f"node {i.node_name} is in clique {i.clique_id}"


def device_health(i: HealthInputs) -> list[DeviceHealthReport]:
    """The report of every published device of this node (pool: the node's name)."""
    out = []
    for ref in i.devices:
        health, message = channel_health(i) if ref.type == constants.DEVICE_TYPE_CHANNEL else daemon_slot_health(i)
        out.append(DeviceHealthReport(i.node_name, ref.name, health, message))
    return out


#: why a node's fabric is unusable, as the taint value on its channel devices says it
FABRIC_INCOMPLETE = "fabric-registration-incomplete"
FABRIC_FAILED = "fabric-registration-failed"
FABRIC_UNHEALTHY = "fabric-unhealthy"
FABRIC_UNREADABLE = "fabric-unreadable"
CLIQUE_CHANGED = "clique-changed"
NO_FABRIC_MGMT = "no-fabric-imex-mgmt"
HOST_IMEX_NOT_READY = "host-imex-not-ready"


def fabric_problems(gpus: list[GpuFabric], clique_id: str) -> list[tuple[str, str]]:
    """(code, what) for each fabric GPU that is not registered, healthy and still in clique `clique_id`."""
    problems = []
    for gpu in gpus:
        if gpu.result == NVML_ERROR_NOT_SUPPORTED or gpu.state == FABRIC_STATE_NOT_SUPPORTED:
            continue
        where = f"GPU {gpu.index}"
        if gpu.result != NVML_SUCCESS:
            problems.append((FABRIC_UNREADABLE, f"{where}: reading its fabric state failed (NVML error {gpu.result})"))
        elif gpu.state != FABRIC_STATE_COMPLETED:
            problems.append((FABRIC_INCOMPLETE,
                             f"{where}: fabric registration is {FABRIC_STATE_NAMES.get(gpu.state, gpu.state)}"))
        elif gpu.status != NVML_SUCCESS:
            problems.append((FABRIC_FAILED, f"{where}: fabric registration failed (status {gpu.status})"))
        elif gpu.health_summary == HEALTH_SUMMARY_UNHEALTHY:
            mask = gpu.health_mask or 0
            problems.append((FABRIC_UNHEALTHY, f"{where}: fabric health is unhealthy (mask 0x{mask:X})"))
        elif clique_id and gpu.cluster_uuid.strip("0-") and f"{gpu.cluster_uuid}.{gpu.clique_id}" != clique_id:
            now = f"{gpu.cluster_uuid}.{gpu.clique_id}"
            problems.append((CLIQUE_CHANGED, f"{where}: now in clique {now}, not {clique_id}"))
    return problems


def fabric_problem(gpus: list[GpuFabric], clique_id: str) -> str:
    """Why the node's NVLink fabric is not usable now ("" when it is)."""
    return "; ".join(what for _, what in fabric_problems(gpus, clique_id))


#: the taint a node's channel devices carry while they are unusable there
TAINT_KEY = "compute-domain.nvidia.com/unusable"
TAINT_EFFECT = "NoSchedule"


def channel_taints(i: HealthInputs) -> list[dict]:
    """The taints of the node's channel devices: one NoSchedule taint whose value says why no new claim
    should be allocated here (none on a node outside any fabric, whose claims get no channel anyway)."""
    if not i.clique_id:
        return []
    code = i.fabric_code or (HOST_IMEX_NOT_READY if i.host_managed and i.host_problem else "")
    return [{"key": TAINT_KEY, "value": code, "effect": TAINT_EFFECT}] if code else []
