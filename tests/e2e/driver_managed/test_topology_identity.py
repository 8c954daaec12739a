"""End to end, seed-003 scenarios 1 and 3: every node reports its topology identity from inside
a pod, and rewriting the topology rebinds every node without rebuilding anything."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cdriver.sim.gpu.driver_root import rerender_driver_root
from cdriver.sim.gpu.topology import demo_topology_path, load_topology
from cdriver.sim.world import scenario
from cdriver.sim.world.world import SIM_DRIVER_ROOT, SimWorld
from tests.support.world import start_world

REBOUND_UUID = "00000000-0000-0000-0000-0000000000ff"
REBOUND_CLIQUE = 99


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 4}, "ti")


def fabric_pod(name: str, node: str) -> dict:
    """A pod that prints its node's fabric identity through NVML, then exits."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                     "volumes": [{"name": "driver", "hostPath": {"path": SIM_DRIVER_ROOT, "type": "Directory"}}],
                     "containers": [{"name": "check", "image": "ubuntu:24.04",
                                     "command": ["cdriver", "sim", "check-fabric", "--driver-root", "/driver"],
                                     "volumeMounts": [{"name": "driver", "mountPath": "/driver",
                                                       "readOnly": True}]}]}}


def read_identities(world: SimWorld, ns: str, round_: str) -> dict[str, list[tuple[str, int]]]:
    """Run one fabric pod per node; return node -> [(clusterUuid, cliqueId)] per GPU."""
    names = {n.name: f"fabric-{round_}-{n.name}" for n in world.nodes}
    for node, pod in names.items():
        world.raw.create(scenario.PODS, fabric_pod(pod, node), ns)
    found: dict[str, list[tuple[str, int]]] = {}
    for node, pod in names.items():
        done = scenario.wait_for(f"pod {pod} to finish", lambda p=pod: scenario.Seen(
            scenario.pod_phase(obj := world.raw.get(scenario.PODS, p, ns)) in ("Succeeded", "Failed"), obj,
            scenario.pod_phase(obj)), 60)
        assert scenario.pod_phase(done) == "Succeeded", done.get("status")
        logs = world.kubectl_cmd("logs", "-n", ns, pod)
        assert logs.returncode == 0, logs.stderr
        text = logs.stdout
        assert re.search(r"Discovered (\d+) GPU\(s\)", text), text
        uuids = re.findall(r"clusterUuid : (\S+)", text)
        cliques = [int(x) for x in re.findall(r"cliqueId\s+: (\d+)", text)]
        count = int(re.search(r"Discovered (\d+) GPU", text).group(1))
        assert len(uuids) == len(cliques) == count > 0, text
        found[node] = list(zip(uuids, cliques, strict=True))
        world.raw.delete(scenario.PODS, pod, ns)
    return found


def test_every_node_reports_its_topology_identity_then_rebinds(world: SimWorld, e2e_namespace: str,
                                                                tmp_path: Path) -> None:
    ns = e2e_namespace
    scenario.ensure_namespace(world.raw, ns)
    topology = load_topology(demo_topology_path())
    identities = read_identities(world, ns, "a")
    for node, gpus in identities.items():
        ident = topology.identity(node)
        assert set(gpus) == {(ident.cluster_uuid, ident.clique_id)}, node

    # Scenario 3: one edit of the topology document, the driver roots re-rendered, the readers
    # restarted. The mock NVML library itself must not be rebuilt.
    doc = yaml.safe_load(demo_topology_path().read_text())
    doc["domains"][0]["uuid"] = REBOUND_UUID
    members = [n for q in doc["domains"][0]["cliques"] for n in q["nodes"]]
    doc["domains"][0]["cliques"] = [{"id": REBOUND_CLIQUE, "nodes": members}]
    rebound = tmp_path / "rebound.yaml"
    rebound.write_text(yaml.safe_dump(doc))
    libs = {n.name: n.agent.layout.driver_root for n in world.nodes}
    before = {name: _lib_digest(root) for name, root in libs.items()}
    for root in libs.values():
        rerender_driver_root(root, rebound)
    assert {name: _lib_digest(root) for name, root in libs.items()} == before
    try:
        rebound_ids = read_identities(world, ns, "b")
        for node, gpus in rebound_ids.items():
            assert set(gpus) == {(REBOUND_UUID, REBOUND_CLIQUE)}, node
    finally:
        for root in libs.values():
            rerender_driver_root(root, demo_topology_path())


def _lib_digest(driver_root: Path) -> tuple[str, float]:
    lib = next(Path(driver_root).rglob("libnvidia-ml.so.1"))
    real = lib.resolve()
    return hashlib.sha256(real.read_bytes()).hexdigest(), real.stat().st_mtime
