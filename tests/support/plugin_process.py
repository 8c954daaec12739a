"""`cdriver kubelet-plugin` as a process for one simulated node: a registered Node with a
simulated driver root (mock NVML, proc/devices, real channel character devices), private
kubelet and CDI directories, and the plugin's log."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cdriver.api.constants import CDI_VENDOR, DRIVER_NAME
from cdriver.checkpoint import CheckpointStore
from cdriver.kube.raw import RawClient
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from cdriver.roles.kubelet_plugin.instances import dra_socket_name, registration_socket_name
from tests.support.kubelet import Kubelet
from tests.support.waiting import wait_for

CLUSTER_UUID = "00000000-0000-0000-0000-00000000c0de"
PREPARE_TIMEOUT = 3.0
CHANNELS = 4  # channel nodes in the simulated driver root


@dataclass
class SimNode:
    """A registered Node with its simulated driver root."""

    name: str
    root: Any  # cdriver.sim.gpu.driver_root.DriverRoot
    registered: Any


def sim_node(raw: RawClient, base: Path, fabric: bool) -> SimNode:
    """Register a Node (in clique 3 of CLUSTER_UUID if on a fabric) with a driver root under `base`."""
    from cdriver.sim.gpu.driver_root import create_driver_root
    from cdriver.sim.node.registration import register_node

    name = f"kp-{'f' if fabric else 'n'}-{uuid.uuid4().hex[:6]}"
    topology = base / "topology.yaml"
    topology.write_text(yaml.safe_dump({"version": 1, "domains": [
        {"name": "test", "uuid": CLUSTER_UUID, "cliques": [{"id": 3, "nodes": [name]}]}]}))
    root = create_driver_root(base / "root", name, topology if fabric else None,
                              fabric_state="completed" if fabric else "not_supported", channel_count=CHANNELS)
    registered = register_node(raw, name, {"kubernetes.io/hostname": name})
    return SimNode(name, root, registered)


@dataclass
class PluginProcess:
    """`cdriver kubelet-plugin` for one simulated node, with its own kubelet and CDI dirs."""

    node: SimNode
    kubeconfig: Path
    namespace: str
    base: Path
    extra_args: list[str] = field(default_factory=list)
    gates: str = ""
    #: an instance of a rolling update: sockets (and this harness's log) named after it
    pod_uid: str = ""
    proc: subprocess.Popen | None = None
    health_port: int = 0

    @property
    def plugins_dir(self) -> Path:
        return self.base / "plugins"

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / DRIVER_NAME

    @property
    def registry_dir(self) -> Path:
        return self.base / "registry"

    @property
    def cdi_root(self) -> Path:
        return self.base / "cdi"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / dra_socket_name(self.pod_uid)

    @property
    def reg_socket(self) -> Path:
        return self.registry_dir / registration_socket_name(self.pod_uid)

    @property
    def log_path(self) -> Path:
        return self.base / (f"plugin-{self.pod_uid}.log" if self.pod_uid else "plugin.log")

    def start(self) -> PluginProcess:
        from cdriver.sim.controlplane.cluster import free_port

        self.health_port = free_port()
        argv = [sys.executable, "-m", "cdriver", "-v", "4"]
        if self.gates:
            argv += ["--feature-gates", self.gates]
        argv += [
            "kubelet-plugin", "--node-name", self.node.name, "--namespace", self.namespace,
            "--kubeconfig", str(self.kubeconfig), "--nvidia-driver-root", str(self.node.root.root),
            "--kubelet-plugins-directory-path", str(self.plugins_dir),
            "--kubelet-registrar-directory-path", str(self.registry_dir), "--cdi-root", str(self.cdi_root),
            "--prepare-timeout", f"{PREPARE_TIMEOUT}s", "--healthcheck-port", str(self.health_port),
            "--host-probe-interval", "0.2s", *(["--pod-uid", self.pod_uid] if self.pod_uid else []),
            *self.extra_args,
        ]
        env = self.node.root.process_env()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"plugin registration socket {self.reg_socket}\n{self.log_tail()}", self._registered, 60)
        return self

    def _registered(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"kubelet plugin exited with {self.proc.returncode}:\n{self.log_tail()}")
        if not self.reg_socket.exists():
            return False
        try:
            Kubelet(self).get_info(timeout=1)
            return True
        except grpc.RpcError:
            return False

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def checkpoint(self) -> dict:
        return CheckpointStore(self.plugin_dir / CHECKPOINT_FILE_NAME).read().claims

    def claim_specs(self) -> list[Path]:
        return sorted(self.cdi_root.glob(f"{CDI_VENDOR}-claim_*"))
