"""End to end, `cdriver diagnose` in host-managed IMEX mode: no daemon objects are expected, and a
node whose host nvidia-imex service (its command socket) is missing is named at the host-socket link."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cdriver.diagnose import names
from cdriver.sim.imex.host_service import HostImexService
from cdriver.sim.world import scenario
from cdriver.sim.world.world import SimWorld
from tests.e2e.diagnose.test_diagnose import assert_text_leads_with, diagnose, first_broken, link_of, remove
from tests.support.waiting import wait_for
from tests.support.world import SHORT_HOST_WAIT, start_world


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 1, "imex_mode": names.IMEX_MODE_HOST_MANAGED, "extra_values": SHORT_HOST_WAIT},
                           "dghm")


def test_missing_host_socket_is_named_then_the_service_makes_every_link_hold(world: SimWorld,
                                                                             e2e_namespace: str) -> None:
    ns, raw = e2e_namespace, world.raw
    node = world.nodes[0]
    scenario.ensure_namespace(raw, ns)
    cd = raw.create(scenario.CDS, scenario.compute_domain("host", ns, "host-channel"), ns)
    raw.create(scenario.PODS, scenario.workload_pod("w", ns, "host-channel", node=node.name), ns)
    # the node's plugin finds no host nvidia-imex and taints its channel: the pod is not scheduled there
    chain, text = first_broken(world, ["pod", "w", "-n", ns], "allocation", timeout=120)
    assert chain["mode"] == names.IMEX_MODE_HOST_MANAGED
    verdicts = {lk["key"]: lk["verdict"] for lk in chain["links"]}
    assert (verdicts["node-label"], verdicts["daemon"]) == ("SKIP", "SKIP")
    assert f"channel-0 on node {node.name} is tainted compute-domain.nvidia.com/unusable=host-imex-not-ready:" \
           "NoSchedule" in link_of(chain, "allocation")["summary"]
    assert_text_leads_with(text, "allocation", "kubectl get resourceslices -o yaml")
    print("\n--- sample: host-managed service missing\n" + text)

    service = HostImexService(node.agent.driver_root, node.ip)
    service.start()
    try:
        scenario.wait_pods_running(raw, ns, ["w"], 120)
        out = wait_for("diagnose to pass once the host service runs",
                       lambda: (o := diagnose(world, "pod", "w", "-n", ns, "--exec", "-o", "json")).returncode == 0
                       and o, 60, interval=1.0)
        doc = json.loads(out.stdout)["chains"][0]
        assert link_of(doc, "host-socket")["verdict"] == "PASS"
        assert link_of(doc, "device")["verdict"] == "PASS"
        remove(world, ns, ["w"], "host", cd["metadata"]["uid"])
    finally:
        service.stop()
