"""Which CDI devices a container gets, and how their edits become launcher settings (pure).

Kubelet's rule: a container that lists a pod claim in ``resources.claims`` gets the CDI IDs
of every prepared device of that claim whose ``request_names`` is empty or contains the
entry's ``request`` (all devices when the entry names no request). Host paths in CDI specs
are node paths as the plugin wrote them; they are mapped through the node root
(`NodeLayout.resolve_external`).
"""

from __future__ import annotations

from typing import Any

from cdriver.cdi.model import ContainerEdits
from cdriver.dra.node_service import PreparedDevice
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.container import DeviceSpec
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.node.simulated.volumes import BindMount

DEFAULT_DEVICE_MODE = 0o666


class CDIApplyError(CdriverError):
    """CDI edits that a simulated container cannot apply."""


def container_cdi_ids(container: dict[str, Any], prepared: dict[str, list[PreparedDevice]]) -> list[str]:
    """CDI IDs for `container`; `prepared` maps pod claim names (spec.resourceClaims[].name)
    to the devices NodePrepareResources returned for that claim."""
    out: list[str] = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        devices = prepared.get(ref.get("name", ""), [])
        request = ref.get("request") or ""
        for device in devices:
            if request and device.request_names and request not in device.request_names:
                continue
            for cdi_id in device.cdi_device_ids:
                if cdi_id not in out:
                    out.append(cdi_id)
    return out


def launch_edits(edits: ContainerEdits, layout: NodeLayout) -> tuple[dict[str, str], list[DeviceSpec],
                                                                     list[BindMount]]:
    """(env, device nodes, bind mounts) that apply `edits` in a simulated container."""
    env: dict[str, str] = {}
    for entry in edits.env:
        key, _, value = entry.partition("=")
        env[key] = value
    devices = []
    for node in edits.device_nodes:
        source = layout.resolve_external(node.host_path or node.path)
        mode = node.file_mode if node.file_mode is not None else DEFAULT_DEVICE_MODE
        devices.append(DeviceSpec(path=node.path, source=str(source), type=node.type or "c",
                                  major=node.major, minor=node.minor, mode=mode & 0o7777))
    mounts = []
    for mount in edits.mounts:
        if mount.type not in (None, "", "bind", "rbind"):
            raise CDIApplyError(f"CDI mount of {mount.container_path}: mount type {mount.type!r} is not "
                                "supported on simulated nodes (only bind mounts)")
        read_only = "ro" in mount.options
        source = layout.resolve_external(mount.host_path)
        mounts.append(BindMount(str(source), mount.container_path, read_only))
    return env, devices, mounts
