"""CPU an IMEX daemon pod costs while it starts and while it idles, its probes included.

One simulated cluster (two GB200 nodes in one clique, kubelet's real timings, the chart's
defaults), one ComputeDomain with a workload pod on each node. Per daemon pod:

- starting: CPU seconds from its container's start until the domain's workloads run (shortly
  after the daemon pods turned Ready);
- idle: CPU seconds a minute over a quiet window (`--window`) after the domain settled.

Each figure counts the daemon container's own processes with every descendant they reaped (the
`nvidia-imex-ctl` the daemon runs, say), less the nvidia-imex stand-in and shells, plus the CPU
of the exec probes the node ran for the container (`container_probe_cpu_s`: the probe command and
what it started, e.g. `cdriver imex-daemon check` and its `nvidia-imex-ctl`). HTTP probes cost
the daemon's own threads, which its processes' times hold.

    python bench/daemon_probe_cpu.py [--window 60] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from report import print_rows  # bench/report.py (scripts run from bench/)
from versus import commit  # bench/versus.py

from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld, WorldSettings

NS = "probe-cpu"
SETTLE = 10.0
TIMEOUT = 300.0
NOT_ROLE = {"bash", "sh", "nvidia-imex"}
TOPOLOGY = """version: 1
domains:
  - name: probe-cpu
    uuid: 00000000-0000-0000-0000-0000000000cf
    cliques:
      - id: 0
        nodes: [node-1, node-2]
"""


def container_of(world: SimWorld, pod: dict) -> tuple[Any, str, str]:
    return world.node(pod["spec"]["nodeName"]).agent, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]


def daemon_cpu_s(world: SimWorld, pod: dict) -> float:
    """The daemon container's processes (with what they reaped) and its exec probes, so far."""
    agent, name, ctr = container_of(world, pod)
    total = agent.container_probe_cpu_s(DRIVER_NAMESPACE, name, ctr)
    for pid in agent.container_tree_pids(DRIVER_NAMESPACE, name, ctr):
        try:
            proc = psutil.Process(pid)
            if proc.name() in NOT_ROLE:
                continue
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def probe_cpu_s(world: SimWorld, pod: dict) -> float:
    agent, name, ctr = container_of(world, pod)
    return agent.container_probe_cpu_s(DRIVER_NAMESPACE, name, ctr)


def measure(window: float, base: Path) -> dict[str, float]:
    topology = base / "topology.yaml"
    topology.write_text(TOPOLOGY)
    settings = WorldSettings(base_dir=base / "world", nodes=2, topology=topology, driver="cdriver", fast=False)
    with SimWorld(settings, progress=lambda m: print(m, file=sys.stderr)) as world:
        raw = world.raw
        scenario.ensure_namespace(raw, NS)
        cd = raw.create(scenario.CDS, scenario.compute_domain("cpu", NS, "cpu-ch"), NS)
        uid = cd["metadata"]["uid"]
        names = []
        for node in ("node-1", "node-2"):
            name = f"w-{node}"
            raw.create(scenario.PODS, scenario.workload_pod(name, NS, "cpu-ch", node=node), NS)
            names.append(name)
        scenario.wait_pods_running(raw, NS, names, TIMEOUT)
        daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
        assert daemons and all(scenario.pod_ready(p) for p in daemons), "daemon pods not Ready"
        # the daemons turned Ready before their workloads ran: what they used so far is their start
        starting = [daemon_cpu_s(world, p) for p in daemons]
        starting_probes = [probe_cpu_s(world, p) for p in daemons]
        time.sleep(SETTLE)
        before = [daemon_cpu_s(world, p) for p in daemons]
        probes_before = [probe_cpu_s(world, p) for p in daemons]
        time.sleep(window)
        after = [daemon_cpu_s(world, p) for p in daemons]
        probes_after = [probe_cpu_s(world, p) for p in daemons]
        per_min = 60 / window / len(daemons)
        probe = daemons[0]["spec"]["containers"][0]["readinessProbe"]
        return {
            "daemons": len(daemons),
            "readiness_probe": "httpGet" if "httpGet" in probe else "exec",
            "starting_cpu_s_per_daemon": round(sum(starting) / len(daemons), 3),
            "starting_probe_cpu_s_per_daemon": round(sum(starting_probes) / len(daemons), 3),
            "idle_cpu_s_per_min_per_daemon": round((sum(after) - sum(before)) * per_min, 3),
            "idle_probe_cpu_s_per_min_per_daemon": round((sum(probes_after) - sum(probes_before)) * per_min, 3),
            "idle_window_s": window,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdp", dir="/tmp") as base:
        figures = {"commit": commit(), **measure(args.window, Path(base))}
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print_rows([(name, str(value)) for name, value in figures.items()],
               str(args.json_out) if args.json_out else None)


if __name__ == "__main__":
    main()
