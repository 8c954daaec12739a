"""The real nodes' network: namespaces, the hub bridge, routes and the API bridges.

`RealNetwork` creates the hub namespace, one namespace per real node (see `plan` for the
addresses), a `Forwarder` per node from the `kubernetes` Service address to the API server,
and the API server's egress `ConnectProxy`. `remove()` deletes every namespace of the world
(also ones a killed run left behind), which removes their links and addresses.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from cdriver.errors import CdriverError
from cdriver.sim.node.real import plan
from cdriver.sim.node.real.plan import NodePlan
from cdriver.sim.node.real.relay import ConnectProxy, Forwarder

log = logging.getLogger(__name__)


class NetworkError(CdriverError):
    """A namespace, link or address of the real nodes could not be set up."""


def run_ip(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise NetworkError(f"`{' '.join(cmd)}` failed: {out.stderr.strip()} (real nodes need root and "
                           "the `ip` tool from iproute2)")


def world_namespaces(tag: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(f"cdr{tag}-")]


def remove_namespaces(tag: str) -> None:
    for ns in world_namespaces(tag):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True, timeout=30)


class RealNetwork:
    """Namespaces and bridges of the real nodes of one world (tag)."""

    def __init__(self, tag: str, proxy_socket: Path) -> None:
        self.tag = tag
        self.proxy_socket = proxy_socket
        self.proxy: ConnectProxy | None = None
        self.forwarders: list[Forwarder] = []

    def start_proxy(self) -> None:
        """The API server's egress proxy (start it before the API server's first kubelet call)."""
        self.proxy_socket.parent.mkdir(parents=True, exist_ok=True)  # a fresh world's directory
        self.proxy = ConnectProxy(self.proxy_socket)
        self.proxy.start()

    def create(self, nodes: list[NodePlan], apiserver: tuple[str, int]) -> None:
        """Namespaces, links, routes and forwarders for `nodes` (leftovers of the tag go first)."""
        remove_namespaces(self.tag)
        for cmd in plan.hub_commands(self.tag):
            run_ip(cmd)
        for node in nodes:
            for cmd in plan.network_commands(node, nodes):
                run_ip(cmd)
            fwd = Forwarder(node.netns_path, plan.API_SERVICE_IP, plan.API_SERVICE_PORT, apiserver)
            fwd.start()
            self.forwarders.append(fwd)
            if self.proxy is not None:
                self.proxy.routes[node.ip] = node.netns_path

    def remove(self) -> None:
        for fwd in self.forwarders:
            fwd.stop()
        self.forwarders = []
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        remove_namespaces(self.tag)
