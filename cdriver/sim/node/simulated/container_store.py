"""What the container runtime keeps while the node agent restarts, as containerd does for kubelet.

A node agent stopped for a restart hands each pod's running containers and its container
records (exited init containers included) to the store; the pod worker of the restarted
agent takes them back and carries on: same processes, same container IDs, same counts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from cdriver.sim.node.simulated.container import ContainerProcess


@dataclass
class KeptContainer:
    """A running container kept across the restart."""

    name: str
    proc: ContainerProcess
    env: dict[str, str]
    working_dir: str


@dataclass
class KeptPod:
    """A pod's running containers and its container records (name -> ContainerRecord)."""

    containers: list[KeptContainer] = field(default_factory=list)
    records: dict[str, Any] = field(default_factory=dict)


class ContainerStore:
    """Kept pods by pod UID (thread-safe)."""

    def __init__(self) -> None:
        self._pods: dict[str, KeptPod] = {}
        self._lock = threading.Lock()

    def keep(self, uid: str, pod: KeptPod) -> None:
        with self._lock:
            self._pods[uid] = pod

    def take(self, uid: str) -> KeptPod | None:
        """The pod's kept containers, removed from the store."""
        with self._lock:
            return self._pods.pop(uid, None)

    def take_all(self) -> dict[str, KeptPod]:
        with self._lock:
            pods, self._pods = self._pods, {}
            return pods

    def mount_namespaces(self) -> set[str]:
        """The mount namespaces of the kept containers (what a node start must not end)."""
        with self._lock:
            pids = [c.proc.pid for pod in self._pods.values() for c in pod.containers]
        out = set()
        for pid in pids:
            try:
                out.add(os.readlink(f"/proc/{pid}/ns/mnt"))
            except OSError:
                pass
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
