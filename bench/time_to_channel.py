"""Time from applying a ComputeDomain + workload to the IMEX channel inside the container.

Brings up a simulated cluster with 2 nodes of one clique and the chart installed, then runs N
rounds of: create CD and a two-pod workload → both containers see
/dev/nvidia-caps-imex-channels/channel0 → delete everything. Each round is split into phases
by when the cluster showed each transition (polled every 50 ms), so the table shows where the
time goes: the controller's template, the scheduler, the plugin's first Prepare attempt and
node label, the daemon pods starting, the daemons joining the clique and turning Ready, and
the workload start. Prints JSON and a table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cdriver.api import constants
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld, WorldSettings

POLL = 0.05
PHASES = ["template", "scheduled", "node labelled", "daemons running", "clique ready", "workload running",
          "channel visible"]


def one_round(world: SimWorld, ns: str, i: int) -> dict[str, float]:
    raw = world.raw
    clique = sorted({n.clique for n in world.nodes if n.clique})[0]
    t0 = time.monotonic()
    cd = raw.create(scenario.CDS, scenario.compute_domain(f"cd{i}", ns, f"t{i}"), ns)
    uid = cd["metadata"]["uid"]
    names = [f"r{i}-w0", f"r{i}-w1"]
    for name in names:
        raw.create(scenario.PODS, scenario.workload_pod(name, ns, f"t{i}", clique=clique, group=f"r{i}"), ns)
    marks: dict[str, float] = {}

    def mark(phase: str, cond: bool) -> None:
        if cond and phase not in marks:
            marks[phase] = time.monotonic() - t0

    while "channel visible" not in marks:
        if time.monotonic() - t0 > 180:
            raise SystemExit(f"round {i} stuck after {marks}")
        mark("template", raw.get_or_none(scenario.RCTS, f"t{i}", ns) is not None)
        pods = [raw.get_or_none(scenario.PODS, n, ns) for n in names]
        mark("scheduled", all(p and p["spec"].get("nodeName") for p in pods))
        mark("node labelled", len(scenario.nodes_labelled(raw, uid)) == 2)
        daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
        mark("daemons running", len(daemons) == 2 and all(scenario.pod_phase(p) == "Running" for p in daemons))
        entries = scenario.clique_entries(raw, DRIVER_NAMESPACE, uid).get(constants.clique_object_name(uid, clique), [])
        mark("clique ready", len(entries) == 2 and all(e.get("status") == constants.STATUS_READY for e in entries))
        running = all(p and scenario.pod_phase(p) == "Running" for p in pods)
        mark("workload running", running)
        if running and all(world.exec(ns, n, ["test", "-c", channel_device_path(0)]).returncode == 0
                           for n in names):
            mark("channel visible", True)
        time.sleep(POLL)
    for name in names:
        raw.delete(scenario.PODS, name, ns)
    raw.delete(scenario.CDS, f"cd{i}", ns)
    scenario.wait_for("cleanup", lambda: not any(scenario.generated_objects(raw, DRIVER_NAMESPACE, uid).values())
                      and raw.get_or_none(scenario.CDS, f"cd{i}", ns) is None, 120)
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdb", dir="/tmp"))
    try:
        with SimWorld(WorldSettings(base_dir=base, nodes=2), progress=lambda m: None) as world:
            scenario.ensure_namespace(world.raw, "bench")
            rounds = [one_round(world, "bench", i) for i in range(args.runs)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    p50 = {p: round(statistics.median(r[p] for r in rounds), 3) for p in PHASES}
    steps = {}
    for k, p in enumerate(PHASES):  # time spent in each phase (since the previous milestone), median
        steps[p] = round(statistics.median(r[p] - (r[PHASES[k - 1]] if k else 0.0) for r in rounds), 3)
    result = {"runs": args.runs, "nodes": 2, "p50_total_s": p50["channel visible"], "milestones_p50_s": p50,
              "phase_p50_s": steps}
    print(json.dumps(result))
    print(f"{'milestone':<18} {'at p50 s':>9} {'phase p50 s':>12}")
    for p in PHASES:
        print(f"{p:<18} {p50[p]:>9.2f} {steps[p]:>12.2f}")


if __name__ == "__main__":
    main()
