"""One NVL72 rack end to end: the shipped `gb200-nvl72` topology (18 simulated compute trays of 4
GPUs in one clique, fast node timings), one ComputeDomain and one workload pod per tray.

Every container sees its channel; the clique holds 18 entries with the distinct indices 0..17,
given by the controller (no daemon wrote a conflicting update); the IMEX domain is UP across all
18 daemons, as each daemon's own `nvidia-imex-ctl -N` reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cdriver.api import constants
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.gpu.topology import resolve_topology
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.support.metrics import sample_value
from tests.support.world import create_domain, delete_all, domain_up, is_char_device, start_world

TRAYS = 18


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"topology": resolve_topology("gb200-nvl72"), "nodes": TRAYS}, "rack")


def test_one_rack_bootstraps_one_domain_across_all_18_trays(world: SimWorld, e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    assert [n.name for n in world.nodes][:: TRAYS - 1] == ["rack1-tray01", "rack1-tray18"]
    assert len({n.clique for n in world.nodes}) == 1
    uid = create_domain(world, ns, "rack", num_nodes=TRAYS)
    names = {n.name: f"w-{n.name}" for n in world.nodes}
    for node, pod in names.items():
        raw.create(scenario.PODS, scenario.workload_pod(pod, ns, "rack-channel", node=node), ns)
    pods = scenario.wait_pods_running(raw, ns, list(names.values()), 600)
    missing = [p["metadata"]["name"] for p in pods if not is_char_device(world, ns, p, channel_device_path(0))]
    assert missing == [], f"no channel0 inside {missing}"

    def clique_ready() -> scenario.Seen:
        entries = [e for found in scenario.clique_entries(raw, DRIVER_NAMESPACE, uid).values() for e in found]
        ready = len(entries) == TRAYS and all(e.get("status") == constants.STATUS_READY for e in entries)
        return scenario.Seen(ready, entries, json.dumps(entries))

    entries = scenario.wait_for("18 Ready entries in the rack's clique", clique_ready, 120)
    assert sorted(e["index"] for e in entries) == list(range(TRAYS))
    assert {e["nodeName"] for e in entries} == set(names)

    daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
    assert sorted(d["spec"]["nodeName"] for d in daemons) == sorted(names)

    for daemon in daemons:
        scenario.wait_for(f"the IMEX domain UP with 18 READY nodes, seen by {daemon['spec']['nodeName']}",
                          lambda d=daemon: domain_up(world, d, TRAYS), 90)
        url = f"http://{daemon['status']['podIP']}:8082/metrics"
        assert sample_value(url, "cdriver_imex_daemon_clique_update_conflicts_total") == 0, url
        assert (sample_value(url, "cdriver_imex_daemon_index") or 0) in range(TRAYS)
    delete_all(world, ns, list(names.values()), "rack", uid)
