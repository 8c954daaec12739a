"""Time to channel with and without binding conditions (gate ComputeDomainBindingConditions).

The world and the round are `scale.py`'s: the first N nodes of the shipped `gb200-nvl72x4`
topology (N = 2 and 8 within one rack, 18 a whole rack), simulated with kubelet's own timings
(Prepare retry back-off, heartbeats, probes), the chart's defaults, the API server with its
default fairness limits; one ComputeDomain (numNodes N) and one workload pod per node; time from
the first create to /dev/nvidia-caps-imex-channels/channel0 visible inside each container. The
two settings take turns (gate off, gate on, off, ...), each round on a fresh cluster. Also
counted per round: kubelet's failed Prepare calls (FailedPrepareDynamicResources events, summed
over their counts) and the daemons' start to index.

    python bench/binding_conditions.py [--sizes 2,8,18] [--rounds 2] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import scale  # bench/scale.py (scripts run from bench/)
import versus as vs  # bench/versus.py

from cdriver.kube.resources import RESOURCES
from cdriver.sim.gpu.topology import resolve_topology
from cdriver.sim.world import scenario
from cdriver.sim.world.world import SimWorld, WorldSettings

GATE = "ComputeDomainBindingConditions"
SETTINGS = {"off": {}, "on": {GATE: True}}
FIGURES = [("time_to_channel_p50_s", "time to channel, p50 (s)"),
           ("time_to_channel_max_s", "time to channel, max (s)"),
           ("failed_prepares", "failed Prepare calls (kubelet events)"),
           ("daemon_index_max_s", "daemon start to index, max (s)")]


def failed_prepares(world: SimWorld) -> int:
    events = world.raw.list(RESOURCES["events"], scale.NS)["items"]
    return sum(int(e.get("count") or 1) for e in events if e.get("reason") == "FailedPrepareDynamicResources")


def run_once(setting: str, n: int, base: Path, round_: int) -> dict[str, Any]:
    settings = WorldSettings(base_dir=base / f"{setting}-{n}-{round_}", nodes=n,
                             topology=resolve_topology(scale.TOPOLOGY), fast=False, api_fairness=True,
                             feature_gates=dict(SETTINGS[setting]))
    with SimWorld(settings, progress=lambda m: print(f"[{setting}] {m}", file=sys.stderr)) as world:
        scenario.ensure_namespace(world.raw, scale.NS)
        time.sleep(scale.SETTLE)
        load0 = os.getloadavg()[0]
        result = scale.bootstrap(world, n, "cdriver")
        figures = {k: v for k, v in result["figures"].items() if k in dict(FIGURES)}
        figures["failed_prepares"] = failed_prepares(world)
        record = {"gate": setting, "nodes": n, "round": round_, "commit": vs.COMMIT, "figures": figures,
                  "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    print(json.dumps(record), file=sys.stderr, flush=True)
    return record


def table(doc: dict[str, Any]) -> str:
    lines = [f"commit {doc['commit']}; median (min-max) over {doc['rounds']} round(s) per cell", "",
             "| N | figure | gate off | gate on |", "|---:|---|---:|---:|"]
    for n in doc["sizes"]:
        for key, label in FIGURES:
            cells = []
            for setting in SETTINGS:
                values = [r["figures"][key] for r in doc["runs"]
                          if r["nodes"] == n and r["gate"] == setting and key in r["figures"]]
                cells.append(f"{statistics.median(values):g} ({min(values):g}-{max(values):g})" if values else "-")
            lines.append(f"| {n} | {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2,8,18")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json-out", type=Path, default=scale.RESULTS / "binding_conditions.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="cdb", dir="/tmp"))  # short: the worlds' socket paths live under it
    doc: dict[str, Any] = {"commit": vs.COMMIT, "sizes": sizes, "rounds": args.rounds, "runs": []}
    try:
        for n in sizes:
            for round_ in range(args.rounds):
                for setting in SETTINGS:
                    doc["runs"].append(run_once(setting, n, base, round_))
                    args.json_out.parent.mkdir(parents=True, exist_ok=True)
                    args.json_out.write_text(json.dumps(doc, indent=2) + "\n")  # what is done so far
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(doc, indent=2))
    print(table(doc))


if __name__ == "__main__":
    main()
