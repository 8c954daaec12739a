"""What a plugin update costs the workloads: the chart's surge update against replacing every
plugin pod at once.

One simulated cluster (4 GB200 nodes, kubelet's real retry and heartbeat timings, the chart's
defaults), one ComputeDomain; on every node workload pods are created and deleted one after
another (each checks its channel inside the container) while `helm upgrade` changes the plugin's
image tag. The strategies take turns, round after round, on the same cluster:

- `surge` (the chart's default from Kubernetes 1.33): per-pod sockets, `maxSurge: 1,
  maxUnavailable: 0`: a node's new plugin pod starts beside the old one, which stops (its calls
  in flight finished) once kubelet registered the new one;
- `whole` (`maxUnavailable: 100%`, upstream's chart and cdriver's before): every plugin pod is
  deleted at once and its replacement started after.

Per round, from the nodes' logs (every DRA call the simulated kubelets made for the workloads'
claims, with its outcome, and each time a node had no usable plugin instance): the failed
Prepare/Unprepare calls, the longest time a node had no plugin, the claims not unprepared exactly
once, the workloads that lost their channel; and the rollout's seconds (helm upgrade until every
node runs a Ready new plugin pod).

    python bench/plugin_update.py [--rounds 3] [--nodes 4] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from report import print_rows  # bench/report.py (scripts run from bench/)
from versus import commit  # bench/versus.py

from cdriver.sim.world import scenario
from cdriver.sim.world.plugin_rollout import WorkloadStream, node_evidence, upgrade_plugin
from cdriver.sim.world.world import DRIVER_CDRIVER, DRIVER_NAMESPACE, RELEASE, SimWorld, WorldSettings

NS = "plugin-update"
STRATEGIES = {
    "surge": (),
    "whole": ("--set", "kubeletPlugin.updateStrategy.type=RollingUpdate",
              "--set-string", "kubeletPlugin.updateStrategy.rollingUpdate.maxUnavailable=100%"),
}


def one_round(world: SimWorld, strategy: str, tag: str) -> dict[str, Any]:
    offsets = {n.name: n.agent.layout.node_log.stat().st_size for n in world.nodes}
    streams = [WorkloadStream(world, NS, n.name, "cd-channel").start() for n in world.nodes]
    try:
        scenario.wait_for("a workload running on every node", lambda: all(s.claims for s in streams), 300)
        rollout_s = upgrade_plugin(world, RELEASE, world.chart_args(DRIVER_CDRIVER), DRIVER_NAMESPACE, tag,
                                   STRATEGIES[strategy], timeout=600)
        counts = [s.pods for s in streams]
        scenario.wait_for("one more workload on every node after the update",
                          lambda: all(s.pods > c + 1 for s, c in zip(streams, counts, strict=True)), 600)
    finally:
        for s in streams:
            s.finish(600)
    claims = {c for s in streams for c in s.claims}
    failed: Counter[str] = Counter()
    gaps, not_once = [], 0
    for node in world.nodes:
        with node.agent.layout.node_log.open(errors="replace") as f:
            f.seek(offsets[node.name])
            seen = node_evidence(f.read(), claims)
        failed.update(f"{c.method.removeprefix('Node').removesuffix('Resources')} {c.outcome}" for c in seen.failed)
        gaps += seen.gaps_s
        not_once += 0 if seen.unprepared_once() else 1
    return {"strategy": strategy, "rollout_s": round(rollout_s, 1), "workloads": sum(s.pods for s in streams),
            "failed_calls": sum(failed.values()), "failed_by_outcome": dict(failed),
            "longest_no_plugin_s": max(gaps, default=0.0), "nodes_with_a_claim_not_unprepared_once": not_once,
            "workload_problems": [p for s in streams for p in s.problems]}


def measure(rounds: int, nodes: int, base: Path) -> list[dict[str, Any]]:
    settings = WorldSettings(base_dir=base / "world", nodes=nodes, driver=DRIVER_CDRIVER, fast=False)
    out = []
    with SimWorld(settings, progress=lambda m: print(m, file=sys.stderr)) as world:
        scenario.ensure_namespace(world.raw, NS)
        world.raw.create(scenario.CDS, scenario.compute_domain("cd", NS, "cd-channel"), NS)
        scenario.wait_for("the workload template", lambda: world.raw.get_or_none(scenario.RCTS, "cd-channel", NS))
        for r in range(rounds):
            for strategy in STRATEGIES:
                result = one_round(world, strategy, f"r{r}-{strategy}")
                print(json.dumps(result), file=sys.stderr)
                out.append(result)
    return out


def summary(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    rows = []
    for strategy in STRATEGIES:
        mine = [r for r in results if r["strategy"] == strategy]
        for key in ("failed_calls", "longest_no_plugin_s", "rollout_s", "workloads",
                    "nodes_with_a_claim_not_unprepared_once"):
            values = [r[key] for r in mine]
            rows.append((f"{strategy}: {key}", f"{statistics.median(values):g} (min {min(values):g}, "
                         f"max {max(values):g}, n={len(values)})"))
        rows.append((f"{strategy}: workloads that lost a channel", str(sum(len(r["workload_problems"]) for r in mine))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpu", dir="/tmp") as base:
        results = measure(args.rounds, args.nodes, Path(base))
    document = {"commit": commit(), "nodes": args.nodes, "timings": "kubelet", "rounds": results}
    text = json.dumps(document, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print_rows(summary(results), str(args.json_out) if args.json_out else None)


if __name__ == "__main__":
    main()
