"""Pod volumes on a simulated node: where each volume's files live on this machine.

Supported: hostPath (a node path, i.e. below the node root, with kubelet's type checks),
emptyDir, configMap, secret, downwardAPI and projected (serviceAccountToken via the
TokenRequest API, configMap, secret, downwardAPI). Content volumes are written under
``<root>/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<name>`` and refreshed on demand
(`PodVolumes.refresh`): changed data is rewritten, tokens are renewed at 80 % of their life.
The file rendering functions are pure; `PodVolumes` does the I/O.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.atomic import atomic_write
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.env import expand, field_value, object_data, resource_value
from cdriver.sim.node.simulated.layout import NodeLayout, normalize_node_path

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600
#: Renew a projected token once this fraction of its lifetime has passed (kubelet: 80 %).
TOKEN_REFRESH_FRACTION = 0.8
MAX_TOKEN_AGE = 24 * 3600

PLUGIN_DIRS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
CONTENT_TYPES = ("configMap", "secret", "downwardAPI", "projected")

#: (namespace, service account, audience, expiration seconds, pod) -> (token, seconds valid)
TokenSource = Callable[[str, str, str, int, dict[str, Any]], tuple[str, float]]
Lookup = Callable[[str, str], "dict[str, Any] | None"]


class VolumeError(CdriverError):
    """A volume cannot be set up; the message names the volume and the fix."""


Files = dict[str, tuple[bytes, int]]


# --- pure: file sets ----------------------------------------------------------------------

def check_relative(path: str, where: str) -> str:
    """A volume item path: relative, no `..` element, not empty."""
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise VolumeError(f"{where}: path {path!r} must be relative and must not contain '..'")
    return path


def keyed_files(data: dict[str, bytes], items: list[dict[str, Any]] | None, default_mode: int,
                where: str, optional: bool) -> Files:
    """configMap/secret content: every key, or the listed items (key -> path, mode)."""
    if not items:
        return {check_relative(k, where): (v, default_mode) for k, v in data.items()}
    out: Files = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"{where}: configured key {key!r} not found; add it or mark the source optional")
        mode = item.get("mode")
        out[check_relative(item.get("path", ""), where)] = (data[key], default_mode if mode is None else int(mode))
    return out


def downward_files(pod: dict[str, Any], items: list[dict[str, Any]], default_mode: int, host_ip: str,
                   pod_ip: str, allocatable: dict[str, str], where: str) -> Files:
    """downwardAPI content (fieldRef / resourceFieldRef items)."""
    out: Files = {}
    containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    for item in items:
        path = check_relative(item.get("path", ""), where)
        mode = item.get("mode")
        if "fieldRef" in item:
            value = field_value(pod, item["fieldRef"].get("fieldPath", ""), host_ip, pod_ip)
        elif "resourceFieldRef" in item:
            ref = item["resourceFieldRef"]
            container = containers.get(ref.get("containerName"))
            if container is None:
                raise VolumeError(f"{where}: resourceFieldRef.containerName {ref.get('containerName')!r} "
                                  "is not a container of the pod")
            value = resource_value(container, ref.get("resource", ""), ref.get("divisor"), allocatable)
        else:
            raise VolumeError(f"{where}: item {path!r} needs fieldRef or resourceFieldRef")
        out[path] = (value.encode(), default_mode if mode is None else int(mode))
    return out


# --- effects: writing a file set ------------------------------------------------------------

def _write_file(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data, mode=mode)


def write_files(directory: Path, files: Files, previous: set[str]) -> set[str]:
    """Write `files` below `directory` (each file replaced atomically, unchanged ones left
    alone) and remove the files of `previous` no longer present. Returns the new name set."""
    directory.mkdir(parents=True, exist_ok=True)
    for rel, (data, mode) in files.items():
        target = directory / rel
        try:
            st = target.stat()
            same = stat.S_IMODE(st.st_mode) == mode and target.read_bytes() == data
        except OSError:
            same = False
        if not same:
            _write_file(target, data, mode)
    for rel in previous - set(files):
        (directory / rel).unlink(missing_ok=True)
    return set(files)


# --- hostPath -------------------------------------------------------------------------------

def host_path_volume(layout: NodeLayout, source: dict[str, Any], where: str) -> Path:
    """The machine path of a hostPath volume, checked / created per its `type`."""
    try:
        path = layout.host_path(normalize_node_path(source.get("path", "")))
    except CdriverError as exc:
        raise VolumeError(f"{where}: {exc}") from None
    kind = source.get("type") or ""
    exists = os.path.lexists(path)
    checks = {
        "Directory": stat.S_ISDIR, "File": stat.S_ISREG, "Socket": stat.S_ISSOCK,
        "CharDevice": stat.S_ISCHR, "BlockDevice": stat.S_ISBLK,
    }
    if kind in ("", "DirectoryOrCreate") and not exists:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    elif kind == "FileOrCreate" and not exists:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(0o644)
    elif kind in checks:
        if not exists or not checks[kind](path.stat().st_mode):
            raise VolumeError(f"{where}: hostPath {source.get('path')} (node path {path}) is not a "
                              f"{kind}; create it on the node or change the volume's type")
    elif kind not in ("", "DirectoryOrCreate", "FileOrCreate"):
        raise VolumeError(f"{where}: hostPath type {kind!r} is unknown")
    return path


# --- a pod's volumes ------------------------------------------------------------------------

@dataclass
class VolumeContext:
    """Lookups and identity the content volumes need."""

    host_ip: str
    pod_ip: str
    allocatable: dict[str, str]
    get_configmap: Lookup
    get_secret: Lookup
    request_token: TokenSource


@dataclass
class _TokenState:
    token: str
    expires: float
    refresh_at: float


@dataclass
class PodVolumes:
    """Sets up and refreshes the volumes of one pod."""

    layout: NodeLayout
    pod: dict[str, Any]
    ctx: VolumeContext
    paths: dict[str, Path] = field(default_factory=dict)
    _written: dict[str, set[str]] = field(default_factory=dict)
    _tokens: dict[tuple[str, str], _TokenState] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return self.pod["metadata"]["uid"]

    @property
    def namespace(self) -> str:
        return self.pod["metadata"].get("namespace", "default")

    def volume_dir(self, kind: str, name: str) -> Path:
        return self.layout.pod_volumes_dir(self.uid) / PLUGIN_DIRS[kind] / name

    def setup(self) -> dict[str, Path]:
        """Set up every volume of the pod; returns name -> machine path. Raises VolumeError."""
        for volume in (self.pod.get("spec") or {}).get("volumes") or []:
            name = volume.get("name", "")
            self.paths[name] = self._setup_one(volume)
        return dict(self.paths)

    def refresh(self) -> None:
        """Rewrite content volumes whose data changed and renew expiring tokens."""
        for volume in (self.pod.get("spec") or {}).get("volumes") or []:
            if any(k in volume for k in CONTENT_TYPES):
                self._setup_one(volume)

    def _setup_one(self, volume: dict[str, Any]) -> Path:
        name = volume.get("name", "")
        where = f"volume {name!r}"
        if "hostPath" in volume:
            return host_path_volume(self.layout, volume["hostPath"], where)
        if "emptyDir" in volume:
            path = self.volume_dir("emptyDir", name)
            if not path.exists():
                path.mkdir(parents=True)
                path.chmod(0o777)
            return path
        for kind in CONTENT_TYPES:
            if kind in volume:
                source = volume[kind] or {}
                path = self.volume_dir(kind, name)
                files = self._content(kind, source, name, where)
                self._written[name] = write_files(path, files, self._written.get(name, set()))
                return path
        kinds = sorted(k for k in volume if k != "name")
        raise VolumeError(f"{where}: volume type {', '.join(kinds) or '(none)'} is not supported on "
                          "simulated nodes; use hostPath, emptyDir, configMap, secret, downwardAPI or projected")

    def _content(self, kind: str, source: dict[str, Any], name: str, where: str) -> Files:
        mode = int(source.get("defaultMode", DEFAULT_MODE))
        if kind == "configMap":
            return self._keyed(source, "ConfigMap", mode, where)
        if kind == "secret":
            return self._keyed({**source, "name": source.get("secretName", "")}, "Secret", mode, where)
        if kind == "downwardAPI":
            return downward_files(self.pod, source.get("items") or [], mode, self.ctx.host_ip,
                                  self.ctx.pod_ip, self.ctx.allocatable, where)
        files: Files = {}
        for index, part in enumerate(source.get("sources") or []):
            part_where = f"{where} source {index}"
            if "serviceAccountToken" in part:
                files.update(self._token(name, part["serviceAccountToken"], mode, part_where))
            elif "configMap" in part:
                files.update(self._keyed(part["configMap"], "ConfigMap", mode, part_where))
            elif "secret" in part:
                files.update(self._keyed(part["secret"], "Secret", mode, part_where))
            elif "downwardAPI" in part:
                files.update(downward_files(self.pod, part["downwardAPI"].get("items") or [], mode,
                                            self.ctx.host_ip, self.ctx.pod_ip, self.ctx.allocatable,
                                            part_where))
            else:
                raise VolumeError(f"{part_where}: projected source {sorted(part)} is not supported on "
                                  "simulated nodes")
        return files

    def _keyed(self, source: dict[str, Any], kind: str, mode: int, where: str) -> Files:
        obj_name = source.get("name", "")
        optional = bool(source.get("optional"))
        lookup = self.ctx.get_secret if kind == "Secret" else self.ctx.get_configmap
        obj = lookup(self.namespace, obj_name)
        if obj is None:
            if optional:
                return {}
            raise VolumeError(f"{where}: {kind.lower()} \"{obj_name}\" not found in namespace "
                              f"{self.namespace}; create it (or mark the source optional)")
        data = object_data(obj, kind == "Secret")
        return keyed_files(data, source.get("items"), mode, where, optional)

    def _token(self, volume: str, source: dict[str, Any], mode: int, where: str) -> Files:
        path = check_relative(source.get("path", ""), where)
        audience = source.get("audience", "")
        seconds = int(source.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
        key = (volume, path)
        now = time.time()
        state = self._tokens.get(key)
        if state is None or now >= state.refresh_at:
            sa = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
            try:
                token, valid = self.ctx.request_token(self.namespace, sa, audience, seconds, self.pod)
            except CdriverError as exc:
                raise VolumeError(f"{where}: TokenRequest for serviceaccount {self.namespace}/{sa} "
                                  f"failed: {exc}") from None
            life = max(valid, 1.0)
            state = _TokenState(token, now + life, now + min(life * TOKEN_REFRESH_FRACTION, MAX_TOKEN_AGE))
            self._tokens[key] = state
        return {path: (state.token.encode(), mode)}


# --- volume mounts ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BindMount:
    """One bind mount of the container: machine `source` at container `target`."""

    source: str
    target: str
    read_only: bool = False
    recursive: bool = True
    #: further mount flags (nosuid, nodev, noexec) and propagation (private, rshared, ...)
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "readOnly": self.read_only,
                "recursive": self.recursive, "options": list(self.options)}


def container_mounts(container: dict[str, Any], volume_paths: dict[str, Path],
                     env: dict[str, str]) -> list[BindMount]:
    """The container's volumeMounts as bind mounts (subPath/subPathExpr resolved and created)."""
    out: list[BindMount] = []
    for mount in container.get("volumeMounts") or []:
        name = mount.get("name", "")
        where = f"container {container.get('name', '')!r} volumeMount {name!r}"
        if name not in volume_paths:
            raise VolumeError(f"{where}: no volume named {name!r} in the pod")
        source = volume_paths[name]
        sub = mount.get("subPath") or ""
        if mount.get("subPathExpr"):
            sub = expand(mount["subPathExpr"], env)
        if sub:
            check_relative(sub, where)
            source = source / sub
            if not os.path.lexists(source):
                source.mkdir(parents=True, exist_ok=True)
        target = mount.get("mountPath", "")
        if not target.startswith("/"):
            raise VolumeError(f"{where}: mountPath {target!r} must be absolute")
        out.append(BindMount(str(source), normalize_node_path(target), bool(mount.get("readOnly"))))
    return out
