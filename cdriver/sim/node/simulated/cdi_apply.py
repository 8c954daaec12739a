"""Which CDI devices a container gets, and how their edits become launcher settings (pure).

Kubelet's rule: a container that lists a pod claim in ``resources.claims`` gets the CDI IDs
of every prepared device of that claim whose ``request_names`` is empty or contains the
entry's ``request`` (all devices when the entry names no request). Host paths in CDI specs
are node paths as the plugin wrote them; they are mapped through the node root
(`NodeLayout.resolve_external`). CDI hooks are not run: simulated nodes have no hook
programs, and those drivers' specs carry (the container toolkit's library links and ld-cache
refresh) change nothing a simulated container reads.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from cdriver.cdi.model import ContainerEdits, DeviceNode, Mount
from cdriver.dra.node_service import PreparedDevice
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.container import DeviceSpec
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.node.simulated.volumes import BindMount

#: runc's mode for a device node whose spec and host give none.
DEFAULT_DEVICE_MODE = 0o666
DEVICE_TYPES = ("c", "u", "b", "p")
REMOUNT_FLAGS = ("nosuid", "nodev", "noexec")
PROPAGATION = ("private", "rprivate", "shared", "rshared", "slave", "rslave")
MOUNT_OPTIONS = frozenset({"bind", "rbind", "ro", "rw", "suid", "dev", "exec", *REMOUNT_FLAGS, *PROPAGATION})


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


def device_spec(node: DeviceNode, layout: NodeLayout) -> DeviceSpec:
    """The node to create for a CDI device node. As CDI runtimes do, type/major/minor (and a
    missing fileMode) come from the host device when the spec leaves them out."""
    host = layout.resolve_external(node.host_path or node.path)
    kind, major, minor, mode = node.type, node.major, node.minor, node.file_mode
    if not (kind and (major is not None or kind == "p")):
        try:
            st = os.stat(host)
        except OSError as exc:
            raise CDIApplyError(f"CDI device {node.path}: host device {host} cannot be read ({exc.strerror}) and "
                                "the spec gives no type/major/minor to create it") from None
        found = "b" if stat.S_ISBLK(st.st_mode) else "c" if stat.S_ISCHR(st.st_mode) else \
            "p" if stat.S_ISFIFO(st.st_mode) else ""
        if not found:
            raise CDIApplyError(f"CDI device {node.path}: host path {host} is not a device node")
        if kind and kind != found and not (kind == "u" and found == "c"):
            raise CDIApplyError(f"CDI device {node.path}: the spec says type {kind!r} but {host} is {found!r}")
        kind = kind or found
        if major is None:
            major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if mode is None:
            mode = stat.S_IMODE(st.st_mode)
    if kind not in DEVICE_TYPES:
        raise CDIApplyError(f"CDI device {node.path}: type {kind!r} is not one of {', '.join(DEVICE_TYPES)}")
    return DeviceSpec(path=node.path, type=kind, major=major or 0, minor=minor or 0,
                      mode=(DEFAULT_DEVICE_MODE if mode is None else mode) & 0o7777,
                      uid=node.uid or 0, gid=node.gid or 0)


def bind_mount(mount: Mount, layout: NodeLayout) -> BindMount:
    """A CDI mount as a bind mount honouring its options."""
    if mount.type not in (None, "", "bind", "rbind"):
        raise CDIApplyError(f"CDI mount of {mount.container_path}: mount type {mount.type!r} is not "
                            "supported on simulated nodes (only bind mounts)")
    unknown = [o for o in mount.options if o not in MOUNT_OPTIONS]
    if unknown:
        raise CDIApplyError(f"CDI mount of {mount.container_path}: options {unknown} are not supported on "
                            f"simulated nodes (supported: {', '.join(sorted(MOUNT_OPTIONS))})")
    recursive = "rbind" in mount.options or mount.type == "rbind" or "bind" not in mount.options
    access = [o for o in mount.options if o in ("ro", "rw")]
    flags = tuple(o for o in mount.options if o in REMOUNT_FLAGS or o in PROPAGATION)
    return BindMount(str(layout.resolve_external(mount.host_path)), mount.container_path,
                     read_only=bool(access) and access[-1] == "ro", recursive=recursive, options=flags)


def launch_edits(edits: ContainerEdits, layout: NodeLayout) -> tuple[dict[str, str], list[DeviceSpec],
                                                                     list[BindMount]]:
    """(env, device nodes, bind mounts) that apply `edits` in a simulated container."""
    env: dict[str, str] = {}
    for entry in edits.env:
        key, _, value = entry.partition("=")
        env[key] = value
    devices = [device_spec(node, layout) for node in edits.device_nodes]
    mounts = [bind_mount(mount, layout) for mount in edits.mounts]
    return env, devices, mounts
