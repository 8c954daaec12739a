"""How long a live domain takes to converge after `ComputeDomainCliques` is flipped by `helm upgrade`.

Brings up a simulated cluster of 4 GB200 nodes (two cliques) with the gate off, a domain with
numNodes 2 and a workload on each of its two nodes, then runs N rounds that flip the gate (off ->
on, on -> off, ...). Each round: `helm upgrade` with the other gate value until the new controller
and the new plugins (one per node) are Ready and registered ("driver rolled"); from that moment,
a new workload pod on a third node is created and polled every 50 ms for "daemons moved" (every
daemon pod of the domain runs with the new gate and is Ready; with the gate on, its clique
objects list each of them Ready), "domain Ready" (Ready, listing its nodes, all Ready) and
"channel" (the new pod Running with its channel device). The round ends by deleting the new pod
and waiting for its node to leave the domain. The workloads of the first two nodes must keep
running throughout. Prints JSON and a table; `--fast` uses the tests' short node timings
instead of kubelet's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from report import print_rows  # bench/report.py (scripts run from bench/)

from cdriver import featuregates
from cdriver.api import constants
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.nvml.discover import channel_device_path
from cdriver.roles.controller.daemon_gates import gate_values
from cdriver.sim.world import scenario
from cdriver.sim.world.world import COMPONENT_LABELS, DRIVER_CDRIVER, DRIVER_NAMESPACE, RELEASE, SimWorld, WorldSettings

POLL = 0.05
CLIQUES = featuregates.COMPUTE_DOMAIN_CLIQUES
MILESTONES = ["daemons moved", "domain Ready", "channel"]
NS = "bench"


def driver_pods(world: SimWorld) -> list[dict]:
    pods = world.raw.list(scenario.PODS, namespace=DRIVER_NAMESPACE)["items"]
    return [p for p in pods if any((p["metadata"].get("labels") or {}).get(k) in ("controller", "kubelet-plugin")
                                   for k in COMPONENT_LABELS)]


def upgrade(world: SimWorld, cliques: bool) -> float:
    """helm upgrade to `cliques`; seconds until the new controller and plugins are Ready and registered."""
    before = {p["metadata"]["uid"] for p in driver_pods(world)}
    t0 = time.monotonic()
    world.settings.feature_gates[CLIQUES] = cliques
    out = world.helm_cmd("upgrade", RELEASE, *world.chart_args(DRIVER_CDRIVER), "--namespace", DRIVER_NAMESPACE)
    if out.returncode != 0:
        raise SystemExit(f"helm upgrade failed: {out.stderr[-2000:]}")

    def rolled() -> bool:
        pods = driver_pods(world)
        fresh = len(pods) == 1 + len(world.nodes) and all(
            p["metadata"]["uid"] not in before and scenario.pod_ready(p) for p in pods)
        return fresh and all(n.agent.plugins.usable(constants.DRIVER_NAME) and max(
            (p.registered_at for p in n.agent.plugins.plugins() if p.driver == constants.DRIVER_NAME),
            default=0.0) >= t0 for n in world.nodes)

    scenario.wait_for("the new driver", rolled, 300, interval=POLL)
    return time.monotonic() - t0


def daemons_moved(world: SimWorld, uid: str, nodes: set[str], cliques: bool) -> bool:
    """Every daemon pod of the domain runs with the gate `cliques` and is Ready, on at least
    `nodes`; with the gate on, its clique objects list each of them Ready."""
    seen = {}
    for pod in scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, uid):
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
        seen[pod["spec"].get("nodeName", "")] = (gate_values(env.get(ENV_FEATURE_GATES, ""))[CLIQUES],
                                                 scenario.pod_ready(pod))
    if not nodes <= set(seen) or any(v != (cliques, True) for v in seen.values()):
        return False
    if not cliques:
        return True
    entries = {e.get("nodeName"): e.get("status")
               for daemons in scenario.clique_entries(world.raw, DRIVER_NAMESPACE, uid).values() for e in daemons}
    return all(entries.get(n) == constants.STATUS_READY for n in seen)


def domain_ready(world: SimWorld, nodes: set[str]) -> bool:
    """The domain is Ready, listing at least `nodes`, every listed node Ready."""
    status = world.raw.get(scenario.CDS, "cd", NS).get("status") or {}
    listed = {e.get("name"): e.get("status") for e in status.get("nodes") or []}
    return (status.get("status") == constants.STATUS_READY and nodes <= set(listed)
            and all(v == constants.STATUS_READY for v in listed.values()))


def has_channel(world: SimWorld, name: str) -> bool:
    pod = world.raw.get_or_none(scenario.PODS, name, NS)
    return bool(pod and scenario.pod_phase(pod) == "Running" and scenario.pod_ready(pod)
                and world.exec(NS, name, ["test", "-c", channel_device_path(0)]).returncode == 0)


def one_round(world: SimWorld, uid: str, i: int, base_nodes: set[str], spare: str) -> dict[str, float]:
    cliques = i % 2 == 0  # the world starts with the gate off
    rolled_s = upgrade(world, cliques)
    t0 = time.monotonic()
    name = f"new-{i}"
    world.raw.create(scenario.PODS, scenario.workload_pod(name, NS, "cd-channel", node=spare), NS)
    marks: dict[str, float] = {}

    def mark(milestone: str, cond: bool) -> None:
        if cond and milestone not in marks:
            marks[milestone] = time.monotonic() - t0

    while len(marks) < len(MILESTONES):
        if time.monotonic() - t0 > 300:
            raise SystemExit(f"round {i} ({CLIQUES} -> {cliques}) stuck after {marks}")
        mark("daemons moved", daemons_moved(world, uid, base_nodes, cliques))
        mark("domain Ready", "daemons moved" in marks and domain_ready(world, base_nodes))
        mark("channel", has_channel(world, name))
        time.sleep(POLL)
    for old in ("old-a", "old-b"):
        pod = world.raw.get(scenario.PODS, old, NS)
        restarts = [s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or []]
        if scenario.pod_phase(pod) != "Running" or restarts != [0] or not has_channel(world, old):
            raise SystemExit(f"round {i}: workload {old} did not keep running ({restarts})")
    world.raw.delete(scenario.PODS, name, NS)
    scenario.wait_for(f"{spare} out of the domain", lambda: not world.raw.get_or_none(scenario.PODS, name, NS)
                      and {p["spec"].get("nodeName") for p in scenario.daemon_pods(world.raw, DRIVER_NAMESPACE, uid)}
                      == base_nodes and domain_ready(world, base_nodes)
                      and len((world.raw.get(scenario.CDS, "cd", NS).get("status") or {}).get("nodes") or []) == 2, 180)
    return {"to": float(cliques), "driver rolled": rolled_s, **marks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4, help="flips (alternating off -> on, on -> off)")
    parser.add_argument("--fast", action="store_true", help="the tests' short node timings")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdf", dir="/tmp"))
    try:
        settings = WorldSettings(base_dir=base, nodes=4, feature_gates={CLIQUES: False}, fast=args.fast)
        with SimWorld(settings, progress=lambda m: None) as world:
            a, b, c, d = (n.name for n in world.nodes)
            scenario.ensure_namespace(world.raw, NS)
            cd = world.raw.create(scenario.CDS, scenario.compute_domain("cd", NS, "cd-channel", num_nodes=2), NS)
            uid = cd["metadata"]["uid"]
            for name, node in (("old-a", a), ("old-b", b)):
                world.raw.create(scenario.PODS, scenario.workload_pod(name, NS, "cd-channel", node=node), NS)
            scenario.wait_pods_running(world.raw, NS, ["old-a", "old-b"], 180)
            scenario.wait_for("the domain Ready", lambda: domain_ready(world, {a, b}), 120)
            rounds = [one_round(world, uid, i, {a, b}, (c, d)[i % 2]) for i in range(args.runs)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result: dict = {"runs": args.runs, "nodes": 4, "timings": "fast" if args.fast else "kubelet", "rounds": rounds}
    rows: list[tuple[str, str]] = []
    for direction, to in (("off -> on", 1.0), ("on -> off", 0.0)):
        mine = [r for r in rounds if r["to"] == to]
        if not mine:
            continue
        summary = {m: {"median": round(statistics.median(r[m] for r in mine), 2),
                       "max": round(max(r[m] for r in mine), 2)} for m in ["driver rolled", *MILESTONES]}
        result[direction] = summary
        rows += [(f"{direction}: {m} (s)", f"median {summary[m]['median']:.1f}, max {summary[m]['max']:.1f}, "
                  f"n={len(mine)}") for m in ["driver rolled", *MILESTONES]]
    print(json.dumps(result))
    print_rows(rows)


if __name__ == "__main__":
    main()
