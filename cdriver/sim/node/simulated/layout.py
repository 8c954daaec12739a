"""Directories and files of one simulated node, below its root directory.

A simulated node's root plays the node's host filesystem for everything kubelet-related::

    <root>/var/lib/kubelet/plugins              DRA plugin data dirs and sockets
    <root>/var/lib/kubelet/plugins_registry     plugin registration sockets (watched)
    <root>/var/lib/kubelet/pods/<uid>/          per-pod state, volumes, /etc/hosts
    <root>/var/lib/kubelet/dra_manager_state    the claims in use on the node (checkpoint)
    <root>/etc/cdi, <root>/var/run/cdi          CDI spec dirs (static, dynamic)
    <root>/dev                                  the node's device directory
    <root>/run/nvidia/driver                    the simulated driver root (optional)
    <root>/logs/node.log                        the node agent's own log
    <root>/logs/<ns>_<pod>_<uid>/<container>/<restart>.log   container output (CRI format)

Host paths named in pod specs (hostPath volumes), in CDI specs and in plugin endpoints are
node paths: `host_path` maps them below the root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cdriver.cdi.model import CDI_DYNAMIC_DIR, CDI_STATIC_DIR
from cdriver.dra.registration import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR
from cdriver.errors import CdriverError

KUBELET_DIR = "/var/lib/kubelet"
DRIVER_ROOT_DIR = "/run/nvidia/driver"
#: CDI dirs in priority order (later wins), as container runtimes scan them.
CDI_DIRS = (CDI_STATIC_DIR, CDI_DYNAMIC_DIR)


class LayoutError(CdriverError):
    """A path cannot be placed in the node's root."""


def normalize_node_path(path: str) -> str:
    """An absolute node path with `.`/`..` resolved lexically (never above `/`)."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise LayoutError(f"path {path!r} must be absolute (start with '/')")
    return os.path.normpath("/" + path.lstrip("/")).replace("//", "/")


def safe_component(value: str) -> str:
    """`value` usable as one path component (namespaces, names and UIDs already are)."""
    if not value or value in (".", "..") or "/" in value or "\0" in value:
        raise LayoutError(f"{value!r} cannot be used as a file name")
    return value


@dataclass(frozen=True)
class NodeLayout:
    """The paths of one node; `root` is absolute."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> NodeLayout:
        return cls(Path(os.path.abspath(root)))

    # -- kubelet dirs ------------------------------------------------------------------
    @property
    def kubelet_dir(self) -> Path:
        return self.host_path(KUBELET_DIR)

    @property
    def plugins_dir(self) -> Path:
        return self.host_path(KUBELET_PLUGINS_DIR)

    @property
    def registry_dir(self) -> Path:
        return self.host_path(KUBELET_REGISTRY_DIR)

    @property
    def pods_dir(self) -> Path:
        return self.kubelet_dir / "pods"

    @property
    def claim_checkpoint(self) -> Path:
        """The node's claim record (kubelet's DRA manager checkpoint)."""
        return self.kubelet_dir / "dra_manager_state"

    def pod_dir(self, uid: str) -> Path:
        return self.pods_dir / safe_component(uid)

    def pod_state_file(self, uid: str) -> Path:
        return self.pod_dir(uid) / "state.json"

    def pod_hosts_file(self, uid: str) -> Path:
        return self.pod_dir(uid) / "etc-hosts"

    def pod_volumes_dir(self, uid: str) -> Path:
        return self.pod_dir(uid) / "volumes"

    def pod_runtime_dir(self, uid: str) -> Path:
        """Launch specs of the pod's containers."""
        return self.pod_dir(uid) / "containers"

    # -- other node dirs ---------------------------------------------------------------
    @property
    def cdi_dirs(self) -> list[Path]:
        return [self.host_path(d) for d in CDI_DIRS]

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def driver_root(self) -> Path:
        return self.host_path(DRIVER_ROOT_DIR)

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def node_log(self) -> Path:
        return self.logs_dir / "node.log"

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    def pod_logs_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.logs_dir / f"{safe_component(namespace)}_{safe_component(name)}_{safe_component(uid)}"

    def container_log(self, namespace: str, name: str, uid: str, container: str, restart: int) -> Path:
        """Output of one run of a container: `<restart>.log` (earlier runs are kept)."""
        return self.pod_logs_dir(namespace, name, uid) / safe_component(container) / f"{int(restart)}.log"

    def ensure(self) -> NodeLayout:
        """Create the node's directories (idempotent)."""
        for d in (self.plugins_dir, self.registry_dir, self.pods_dir, self.dev_dir, self.logs_dir,
                  *self.cdi_dirs):
            d.mkdir(parents=True, exist_ok=True)
        return self

    # -- node paths --------------------------------------------------------------------
    def host_path(self, node_path: str) -> Path:
        """Where the node path `node_path` lives on this machine (`/` is the root itself)."""
        rel = normalize_node_path(node_path).lstrip("/")
        return self.root / rel if rel else self.root

    def resolve_external(self, path: str) -> Path:
        """A path written by a plugin (CDI host path, socket endpoint) as this machine sees it.

        Paths already inside the root are kept. Otherwise the node mapping is used when that
        exists, and the path as given when only that exists (a plugin running outside any
        simulated pod writes real paths); if neither exists the node mapping is returned.
        """
        given = Path(normalize_node_path(path))
        if given == self.root or self.root in given.parents:
            return given
        mapped = self.host_path(str(given))
        if os.path.lexists(mapped):
            return mapped
        if os.path.lexists(given):
            return given
        return mapped
