"""Plugin instances on one node: socket names per pod, and which sockets belong to whom.

During a rolling update of the plugin's DaemonSet (kubelet 1.33+) the old pod and the new one
run side by side on a node. Each serves its own sockets, named after its pod UID
(``dra-<uid>.sock`` and ``compute-domain.nvidia.com-<uid>-reg.sock``, the names kubelet's DRA
helper library uses); kubelet sends new calls to the newest registered instance. Both share the
plugin data directory, whose checkpoint lock serialises their writes. Without a UID the names
are the classic fixed ones (one instance per node).
"""

from __future__ import annotations

import errno
import logging
import re
import socket
from pathlib import Path

from cdriver.api import constants
from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

_UID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_REG_PREFIX = f"{constants.DRIVER_NAME}-"
_REG_SUFFIX = "-reg.sock"


class InstanceError(CdriverError):
    """The pod UID cannot name sockets."""


def check_pod_uid(uid: str) -> None:
    """A pod UID is lower-case letters, digits and dashes (what the API server gives out)."""
    if uid and not _UID.match(uid):
        raise InstanceError(f"--pod-uid {uid!r} is not a pod UID (lower-case letters, digits and dashes); "
                            "pass the pod's metadata.uid through the downward API")


def dra_socket_name(uid: str) -> str:
    return f"dra-{uid}.sock" if uid else "dra.sock"


def registration_socket_name(uid: str) -> str:
    return f"{_REG_PREFIX}{uid}{_REG_SUFFIX}" if uid else f"{_REG_PREFIX}reg.sock"


def instance_of_registration(name: str) -> str | None:
    """The pod UID a registration socket name carries ("" for the fixed name), or None when the
    name is not this driver's."""
    if name == registration_socket_name(""):
        return ""
    if name.startswith(_REG_PREFIX) and name.endswith(_REG_SUFFIX):
        uid = name[len(_REG_PREFIX):-len(_REG_SUFFIX)]
        return uid if _UID.match(uid) else None
    return None


def instance_of_dra(name: str) -> str | None:
    """The pod UID a DRA socket name carries ("" for ``dra.sock``), or None when it is not one."""
    if name == dra_socket_name(""):
        return ""
    if name.startswith("dra-") and name.endswith(".sock"):
        uid = name[len("dra-"):-len(".sock")]
        return uid if _UID.match(uid) else None
    return None


def listening(path: Path, timeout: float = 1.0) -> bool:
    """Whether a process accepts connections on the Unix socket `path` (a socket file whose
    server died refuses them)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        return True
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            log.debug("probing %s: %s", path, exc)
        return False
    finally:
        sock.close()


def other_sockets(registrar_dir: Path, plugin_dir: Path, own_uid: str) -> list[Path]:
    """This driver's sockets of other instances (registration and DRA), whatever their state."""
    found: list[Path] = []
    for directory, instance_of in ((registrar_dir, instance_of_registration), (plugin_dir, instance_of_dra)):
        try:
            names = sorted(p.name for p in directory.iterdir())
        except OSError:
            continue
        found += [directory / n for n in names if instance_of(n) not in (None, own_uid)]
    return found


def other_live_instances(registrar_dir: Path, own_uid: str) -> list[Path]:
    """Registration sockets of other instances that a process still serves."""
    return [p for p in other_sockets(registrar_dir, Path("/nonexistent"), own_uid)
            if p.parent == registrar_dir and listening(p)]


def remove_dead_instances(registrar_dir: Path, plugin_dir: Path, own_uid: str) -> list[Path]:
    """Remove the sockets of instances that ended without cleaning up (killed, node crash): kubelet
    would keep trying to register a dead registration socket. Sockets still served stay."""
    removed = []
    for path in other_sockets(registrar_dir, plugin_dir, own_uid):
        if listening(path):
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("could not remove the dead plugin socket %s: %s", path, exc)
            continue
        removed.append(path)
        log.info("removed the socket %s of a plugin instance that is gone", path)
    return removed
