"""A rolling update of the kubelet plugin under load (simulated nodes here, real ones in
`tests/e2e/real_nodes`; the real 1.37 control plane and DaemonSet controller, the chart's
default strategy): `helm upgrade` to a changed image while every node creates and deletes
workload pods one after another. The new plugin pod of a node starts beside the old one
(per-pod sockets), the node registers it before the old one goes, and no Prepare or Unprepare
call fails, no running workload loses its channel, and every claim is unprepared exactly once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdriver.api import constants
from cdriver.checkpoint import CheckpointStore
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME
from cdriver.sim.world import scenario
from cdriver.sim.world.plugin_rollout import (
    PLUGIN_LABELS,
    WorkloadStream,
    node_evidence,
    plugin_pods,
    upgrade_plugin,
)
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_NAMESPACE, RELEASE, SimWorld
from tests.support.world import clique_nodes, cliques, create_domain, start_world

FAILED_REASONS = ("FailedPrepareDynamicResources", "FailedUnprepareDynamicResources")


@pytest.fixture(scope="module")
def world() -> Iterator[SimWorld]:
    yield from start_world({"nodes": 2}, "pu")


def failed_events(world: SimWorld, namespace: str) -> list[str]:
    return [f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message', '')[:200]}"
            for e in world.raw.list(RESOURCES["events"], namespace=namespace)["items"]
            if e.get("reason") in FAILED_REASONS]


def checkpoint_claims(world: SimWorld, node: str) -> set[str]:
    """The claim UIDs in the plugin's checkpoint on `node`."""
    path = world.node(node).agent.plan.root / "var/lib/kubelet/plugins" / constants.DRIVER_NAME / CHECKPOINT_FILE_NAME
    return set(CheckpointStore(path).read().claims)


def check_rolling_update_under_load(world: SimWorld, namespace: str, image_tag: str) -> dict[str, float]:
    """The update (see the module's docstring) on `world`'s first clique; its figures."""
    nodes = clique_nodes(world, cliques(world)[0])
    create_domain(world, namespace, "cd")
    before = {p["metadata"]["uid"] for p in plugin_pods(world, DRIVER_NAMESPACE)}
    streams = [WorkloadStream(world, namespace, node, "cd-channel").start() for node in nodes]
    try:
        scenario.wait_for("a first workload running on every node", lambda: all(s.claims for s in streams), 120)
        rollout_s = upgrade_plugin(world, RELEASE, world.chart_args(DRIVER_CDRIVER), DRIVER_NAMESPACE, image_tag)
        (daemonset,) = world.raw.list(RESOURCES["daemonsets"], namespace=DRIVER_NAMESPACE,
                                      label_selector=PLUGIN_LABELS)["items"]
        assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        counts = [s.pods for s in streams]
        scenario.wait_for("one more workload on every node after the update",
                          lambda: all(s.pods > c + 1 for s, c in zip(streams, counts, strict=True))
                          or any(s.problems for s in streams), 120)
    finally:
        for s in streams:
            s.finish()
    problems = [p for s in streams for p in s.problems]
    assert not problems, problems
    assert not failed_events(world, namespace), failed_events(world, namespace)
    assert not before & {p["metadata"]["uid"] for p in plugin_pods(world, DRIVER_NAMESPACE)}, "an old plugin pod stayed"

    ours = {c for s in streams for c in s.claims}
    for node in nodes:
        if world.node(node).real:  # the real kubelet's verdicts are its events (above) and the checkpoint
            held = checkpoint_claims(world, node)
            assert not held & ours, f"{node}: claims still in the checkpoint: {held & ours}"
            continue
        seen = node_evidence(world.node(node).agent.layout.node_log.read_text(errors="replace"), ours)
        assert seen.calls and not seen.failed, seen.failed
        assert seen.unprepared_once(), f"{node}: a claim was not unprepared exactly once: {seen.calls}"
        assert not seen.gaps_s, f"{node}: the driver was not usable for {seen.gaps_s} s"
        # the node registered the new instance before the old one went
        registered = [e for kind, e in seen.registrations if kind == "registered"]
        old, new = registered[-2], registered[-1]
        assert seen.registrations.index(("registered", new)) < seen.registrations.index(("unregistered", old)), \
            seen.registrations
        assert {c.endpoint for c in seen.calls} <= {old, new}
    return {"rollout_s": round(rollout_s, 1), "workloads": float(sum(s.pods for s in streams))}


def test_a_rolling_plugin_update_fails_no_call_and_loses_no_channel(world: SimWorld, e2e_namespace: str) -> None:
    figures = check_rolling_update_under_load(world, e2e_namespace, "rolled")
    print(f"rolling update under load: {figures}")
