"""The real nodes of one cluster: their network and their nodes, started and stopped together.

Use: `fleet = RealFleet(base_dir)`; `fleet.egress_socket` goes to the control plane
(`LocalCluster(egress_proxy=...)`) and `fleet.start_proxy()` runs before it starts; then
`fleet.start(cluster, specs, images)` brings the nodes up in parallel and `fleet.stop()`
removes everything (processes, mounts, cgroups, namespaces).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.sim.node.real import plan
from cdriver.sim.node.real.images import NodeImages
from cdriver.sim.node.real.network import RealNetwork
from cdriver.sim.node.real.node import RealNode, RealNodeError, node_binaries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RealNodeSpec:
    """What the cluster wants of one real node."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    topology: str | None = None
    fabric_state: str = "completed"


class RealFleet:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.tag = plan.world_tag(base_dir)
        self.egress_socket = base_dir / "egress.sock"
        self.network = RealNetwork(self.tag, self.egress_socket)
        self.nodes: list[RealNode] = []

    def start_proxy(self) -> None:
        self.network.start_proxy()

    def start(self, cluster: Any, specs: list[RealNodeSpec], images: NodeImages, nodes_dir: Path) -> list[RealNode]:
        binaries = node_binaries()
        plans = [plan.NodePlan(s.name, i, nodes_dir / s.name, self.tag) for i, s in enumerate(specs, start=1)]
        self.network.create(plans, ("127.0.0.1", cluster.ports.apiserver))
        self.nodes = [RealNode(p, binaries, cluster.pki, images, labels=s.labels, topology=s.topology,
                               fabric_state=s.fabric_state) for p, s in zip(plans, specs, strict=True)]
        # Node processes get a parent-death signal tied to the thread that starts them: start
        # them from this (long-lived) thread; only the image imports (ctr clients) run in parallel.
        for node in self.nodes:
            node.launch_runtime()
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(RealNode.import_images, self.nodes))
        for node in self.nodes:
            node.launch_kubelet()
        for node in self.nodes:
            node.wait_ready(cluster.raw)
        return self.nodes

    def node(self, name: str) -> RealNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise RealNodeError(f"no real node {name!r}")

    def stop(self) -> list[str]:
        problems: list[str] = []
        for node in self.nodes:
            problems += [f"{node.name}: {p}" for p in node.stop()]
        self.nodes = []
        self.network.remove()
        for p in problems:
            log.warning("real node teardown: %s", p)
        return problems
