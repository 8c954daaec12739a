"""cdriver side by side with the upstream Go ComputeDomain driver: same cluster, same workloads.

For each driver, one simulated cluster of 8 GB200 nodes in two cliques of four, with kubelet's
real retry and heartbeat timings (not the fast mode tests use), and that driver's own chart
installed (upstream's from `make peer`). On it, in order:

1. idle: RSS and CPU seconds of the controller and the kubelet plugins over a quiet window;
2. time to channel: a ComputeDomain + N workload pods spread over both cliques, from the first
   create to /dev/nvidia-caps-imex-channels/channel0 visible in every container (N = 2 and
   N = 8; rounds each, median), and everything deleted between rounds; the plugins' and
   daemons' CPU seconds and RSS under that load;
3. Prepare as the node sees it: the duration of every NodePrepareResources call the simulated
   kubelets made for the workloads' channel claims during (2) (p50/p99 over all calls, the
   calls per claim, and over the successful ones only);
4. daemons at idle: one 8-pod domain left Ready; their CPU over a quiet window and RSS;
5. controller: 500 ComputeDomains created at once; the time until each has its workload and
   daemon claim templates, its DaemonSet and the finalizer (and how many carry a status by
   then); the API server's write requests per domain (all clients; both drivers cause the same
   DaemonSet controller work), and the controller's CPU seconds and RSS.

Prints a table (cdriver, upstream, ratio cdriver/upstream; below 1.0 is better for cdriver
everywhere) and one JSON object; writes bench/results/versus.json and versus.png (the ratios).

    python bench/versus.py [--rounds 3] [--domains 500] [--drivers cdriver,upstream]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from cdriver.api import constants
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.node.simulated.pods import PREPARE_TIMING
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, DRIVERS, SimWorld, WorldSettings

RESULTS = Path(__file__).resolve().parent / "results"
NS = "versus"
IDLE_WINDOW = 20.0
SETTLE = 10.0
ROUND_TIMEOUT = 300.0
#: processes in a driver container that are not the role itself (shells, the IMEX stand-in)
NOT_ROLE = {"bash", "sh", "nvidia-imex", "nvidia-imex-ctl"}
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
NON_RESOURCE = re.compile(r'[{,]resource=""')  # /healthz, /metrics (not subresource="")
#: a node log line of one NodePrepareResources call for a pod (the logger names the pod)
TIMING = re.compile(r" pod-(\S+) " + re.escape(PREPARE_TIMING) + r" (\S+) claims=(\d+) errors=(\d+) took_ms=([\d.]+)")

TOPOLOGY = """version: 1
domains:
  - name: versus
    uuid: 00000000-0000-0000-0000-0000000000cd
    cliques:
      - id: 0
        nodes: [node-1, node-2, node-3, node-4]
      - id: 1
        nodes: [node-5, node-6, node-7, node-8]
"""


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


# -- role processes ----------------------------------------------------------------------------
def role_pods(world: SimWorld, component: str) -> list[dict]:
    from cdriver.sim.world.world import _component

    return [p for p in world.raw.list(scenario.PODS, DRIVER_NAMESPACE)["items"] if _component(p) == component]


def role_processes(world: SimWorld, pods: Iterable[dict]) -> list[psutil.Process]:
    """The role's own processes in the pods' containers: each main process and what runs below it,
    less shells and the IMEX stand-in (not the containers' launchers)."""
    out = []
    for pod in pods:
        node = world.node(pod["spec"]["nodeName"])
        for ctr in pod["spec"]["containers"]:
            for pid in node.agent.container_tree_pids(DRIVER_NAMESPACE, pod["metadata"]["name"], ctr["name"]):
                try:
                    proc = psutil.Process(pid)
                    if proc.name() not in NOT_ROLE:
                        out.append(proc)
                except psutil.NoSuchProcess:
                    continue
    return out


def total_of(procs: list[psutil.Process], figure: Callable[[psutil.Process], float]) -> float:
    """The sum of `figure` over the processes that still exist."""
    total = 0.0
    for p in procs:
        try:
            total += figure(p)
        except psutil.NoSuchProcess:
            pass
    return total


def cpu_seconds(procs: list[psutil.Process]) -> float:
    return total_of(procs, lambda p: p.cpu_times().user + p.cpu_times().system)


def rss_mb(procs: list[psutil.Process]) -> float:
    return total_of(procs, lambda p: p.memory_info().rss) / 2**20


def per_instance(world: SimWorld, component: str, pods: list[dict] | None = None) -> tuple[list[psutil.Process], int]:
    pods = role_pods(world, component) if pods is None else pods
    return role_processes(world, pods), max(1, len(pods))


def quiet_window(world: SimWorld, component: str, pods: list[dict] | None = None) -> dict[str, float]:
    procs, count = per_instance(world, component, pods)
    before = cpu_seconds(procs)
    time.sleep(IDLE_WINDOW)
    return {"cpu_s_per_min": round((cpu_seconds(procs) - before) / count * 60 / IDLE_WINDOW, 3),
            "rss_mb": round(rss_mb(procs) / count, 1)}


# -- time to channel ---------------------------------------------------------------------------
def spread_pod(name: str, template: str, cliques: list[str], group: str) -> dict:
    pod = scenario.workload_pod(name, NS, template, group=group)
    pod["spec"]["affinity"]["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": constants.LABEL_NODE_CLIQUE, "operator": "In", "values": cliques}]}]}}
    # N/2 pods per clique: spread evenly over the clique label
    pod["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 1, "topologyKey": constants.LABEL_NODE_CLIQUE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"demo.cdriver/group": group}}}]
    return pod


def channel_round(world: SimWorld, n: int, tag: str, on_ready: Callable[[str], None] | None = None) -> float:
    """Seconds from creating the domain to channel0 in all `n` containers; then delete all."""
    raw = world.raw
    cliques = sorted({node.clique for node in world.nodes if node.clique})
    names = [f"{tag}-w{i}" for i in range(n)]
    t0 = time.monotonic()
    cd = raw.create(scenario.CDS, scenario.compute_domain(tag, NS, f"{tag}-ch"), NS)
    uid = cd["metadata"]["uid"]
    for name in names:
        raw.create(scenario.PODS, spread_pod(name, f"{tag}-ch", cliques, tag), NS)
    seen: set[str] = set()
    while len(seen) < n:
        if time.monotonic() - t0 > ROUND_TIMEOUT:
            raise SystemExit(f"{tag}: channel not visible in {sorted(set(names) - seen)} after {ROUND_TIMEOUT:.0f} s"
                             f"\n{world.pod_log_tails()}")
        for name in names:
            if name in seen:
                continue
            pod = raw.get_or_none(scenario.PODS, name, NS)
            if pod and scenario.pod_phase(pod) == "Running" and \
                    world.exec(NS, name, ["test", "-c", channel_device_path(0)]).returncode == 0:
                seen.add(name)
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    if on_ready:
        on_ready(uid)
    for name in names:
        raw.delete(scenario.PODS, name, NS)
    raw.delete(scenario.CDS, tag, NS)

    def gone() -> bool:
        return (not any(scenario.generated_objects(raw, DRIVER_NAMESPACE, uid).values())
                and raw.get_or_none(scenario.CDS, tag, NS) is None
                and not any(raw.get_or_none(scenario.PODS, p, NS) for p in names))

    scenario.wait_for(f"{tag} cleaned up", gone, 300)
    return elapsed


def prepare_timings(world: SimWorld) -> list[tuple[int, int, float]]:
    """(claims, errors, ms) of every NodePrepareResources call for a workload pod's channel
    claim (the daemon pods' claims are left out)."""
    out = []
    for node in world.nodes:
        text = node.agent.layout.node_log.read_text(errors="replace")
        for m in TIMING.finditer(text):
            if m.group(1).startswith(f"{NS}-") and m.group(2) == constants.DRIVER_NAME:
                out.append((int(m.group(3)), int(m.group(4)), float(m.group(5))))
    return out


# -- controller --------------------------------------------------------------------------------
def apiserver_writes(raw: Any) -> float:
    """Write requests the API server has served to resources (all clients)."""
    total = 0.0
    for line in str(raw.request("GET", "/metrics")).splitlines():
        if line.startswith("apiserver_request_total{") and any(f'verb="{v}"' in line for v in WRITE_VERBS) \
                and not NON_RESOURCE.search(line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def controller_load(world: SimWorld, n: int) -> dict[str, float]:
    raw = world.raw
    ns = f"{NS}-many"
    scenario.ensure_namespace(raw, ns)
    procs, _ = per_instance(world, "controller")
    cpu0, writes0 = cpu_seconds(procs), apiserver_writes(raw)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: raw.create(scenario.CDS, scenario.compute_domain(f"cd-{i}", ns, f"t-{i}"), ns),
                      range(n)))
    sel = constants.LABEL_COMPUTE_DOMAIN
    while True:
        cds = raw.list(scenario.CDS, ns)["items"]
        done = {c["metadata"]["uid"] for c in cds if constants.FINALIZER in c["metadata"].get("finalizers", [])}
        workload = {t["metadata"]["name"] for t in raw.list(scenario.RCTS, ns)["items"]}
        daemon_sets = {d["metadata"]["labels"].get(sel) for d in raw.list(scenario.DAEMONSETS, DRIVER_NAMESPACE,
                                                                          label_selector=sel)["items"]}
        daemon_rcts = {t["metadata"]["labels"].get(sel) for t in raw.list(scenario.RCTS, DRIVER_NAMESPACE,
                                                                         label_selector=sel)["items"]}
        if len(done) == n and len(workload) >= n and done <= daemon_sets and done <= daemon_rcts:
            break
        if time.monotonic() - t0 > 900:
            raise SystemExit(f"controller: {len(done)}/{n} domains finished after 900 s")
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    writes = apiserver_writes(raw) - writes0 - n
    # the status is reported apart: upstream writes it from a periodic sync, not per object
    with_status = sum(1 for c in cds if (c.get("status") or {}).get("status"))
    return {"controller_s": round(elapsed, 2), "api_writes_per_cd": round(writes / n, 2),
            "status_written_pct": round(100 * with_status / n, 1),
            "controller_cpu_s": round(cpu_seconds(procs) - cpu0, 2), "controller_rss_mb": round(rss_mb(procs), 1)}


# -- one driver --------------------------------------------------------------------------------
def run_driver(driver: str, rounds: int, domains: int, base: Path) -> dict[str, Any]:
    topology = base / "topology.yaml"
    topology.write_text(TOPOLOGY)
    settings = WorldSettings(base_dir=base / driver, nodes=8, topology=topology, driver=driver, fast=False)
    out: dict[str, Any] = {"node_kind": "simulated", "kubelet_timings": "kubelet (fast mode off)"}
    with SimWorld(settings, progress=lambda m: print(f"[{driver}] {m}", file=sys.stderr)) as world:
        raw = world.raw
        scenario.ensure_namespace(raw, NS)
        time.sleep(SETTLE)
        idle_ctrl = quiet_window(world, "controller")
        idle_plugin = quiet_window(world, "kubelet-plugin")
        out |= {"controller_idle_cpu_s_per_min": idle_ctrl["cpu_s_per_min"],
                "controller_idle_rss_mb": idle_ctrl["rss_mb"],
                "plugin_idle_cpu_s_per_min": idle_plugin["cpu_s_per_min"], "plugin_idle_rss_mb": idle_plugin["rss_mb"]}
        plugins, plugin_count = per_instance(world, "kubelet-plugin")
        plugin_cpu0 = cpu_seconds(plugins)
        daemon_load: list[tuple[float, float]] = []

        def sample_daemons(uid: str) -> None:
            pods = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
            procs = role_processes(world, pods)
            daemon_load.append((cpu_seconds(procs) / max(1, len(pods)), rss_mb(procs) / max(1, len(pods))))

        for n in (2, 8):
            times = [channel_round(world, n, f"n{n}r{r}", sample_daemons) for r in range(rounds)]
            out[f"time_to_channel_n{n}_s"] = round(statistics.median(times), 2)
            print(f"[{driver}] N={n}: {[round(t, 2) for t in times]}", file=sys.stderr)
        out["plugin_load_cpu_s"] = round((cpu_seconds(plugins) - plugin_cpu0) / plugin_count, 2)
        out["plugin_load_rss_mb"] = round(rss_mb(plugins) / plugin_count, 1)
        out["daemon_bootstrap_cpu_s"] = round(statistics.median(c for c, _ in daemon_load), 2)
        out["daemon_load_rss_mb"] = round(statistics.median(r for _, r in daemon_load), 1)
        calls = prepare_timings(world)
        ok = [ms for _, errors, ms in calls if not errors]
        every = [ms for _, _, ms in calls]
        claims = 2 * rounds + 8 * rounds
        out |= {"prepare_p50_ms": round(percentile(every, 50), 1), "prepare_p99_ms": round(percentile(every, 99), 1),
                "prepare_ok_p50_ms": round(percentile(ok, 50), 1), "prepare_ok_p99_ms": round(percentile(ok, 99), 1),
                "prepare_calls_per_claim": round(len(calls) / claims, 2)}

        # a domain left Ready: its daemons at idle
        cliques = sorted({node.clique for node in world.nodes if node.clique})
        cd = raw.create(scenario.CDS, scenario.compute_domain("steady", NS, "steady-ch"), NS)
        names = [f"steady-w{i}" for i in range(8)]
        for name in names:
            raw.create(scenario.PODS, spread_pod(name, "steady-ch", cliques, "steady"), NS)
        scenario.wait_pods_running(raw, NS, names, ROUND_TIMEOUT)
        time.sleep(SETTLE)
        idle_daemon = quiet_window(world, "", scenario.daemon_pods(raw, DRIVER_NAMESPACE, cd["metadata"]["uid"]))
        out |= {"daemon_idle_cpu_s_per_min": idle_daemon["cpu_s_per_min"], "daemon_idle_rss_mb": idle_daemon["rss_mb"]}
        out |= controller_load(world, domains)
    return out


#: (key, label) in table order
FIGURES = [
    ("time_to_channel_n2_s", "time to channel, N=2 (s)"),
    ("time_to_channel_n8_s", "time to channel, N=8 (s)"),
    ("prepare_p50_ms", "Prepare p50, all calls (ms)"),
    ("prepare_p99_ms", "Prepare p99, all calls (ms)"),
    ("prepare_ok_p50_ms", "Prepare p50, successful (ms)"),
    ("prepare_ok_p99_ms", "Prepare p99, successful (ms)"),
    ("prepare_calls_per_claim", "Prepare calls per claim"),
    ("controller_s", "controller, 500 CDs (s)"),
    ("api_writes_per_cd", "API writes per CD (all clients)"),
    ("status_written_pct", "CDs with a status by then (%)"),
    ("controller_cpu_s", "controller CPU under load (s)"),
    ("controller_rss_mb", "controller RSS under load (MB)"),
    ("controller_idle_cpu_s_per_min", "controller idle CPU (s/min)"),
    ("controller_idle_rss_mb", "controller idle RSS (MB)"),
    ("plugin_idle_cpu_s_per_min", "plugin idle CPU (s/min)"),
    ("plugin_idle_rss_mb", "plugin idle RSS (MB)"),
    ("plugin_load_cpu_s", "plugin CPU under load (s)"),
    ("plugin_load_rss_mb", "plugin RSS under load (MB)"),
    ("daemon_bootstrap_cpu_s", "daemon CPU to Ready (s)"),
    ("daemon_load_rss_mb", "daemon RSS at Ready (MB)"),
    ("daemon_idle_cpu_s_per_min", "daemon idle CPU (s/min)"),
    ("daemon_idle_rss_mb", "daemon idle RSS (MB)"),
]


#: figures shown side by side without a ratio (higher is not worse)
NO_RATIO = {"status_written_pct"}


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    a, b = results.get("cdriver", {}), results.get("upstream", {})
    return {k: round(a[k] / b[k], 2) for k, _ in FIGURES if k in a and k in b and b[k] and k not in NO_RATIO}


def table(results: dict[str, dict[str, Any]], ratio: dict[str, float]) -> str:
    lines = [f"{'figure':<34} {'cdriver':>10} {'upstream':>10} {'ratio':>7}"]
    for key, label in FIGURES:
        cells = [results.get(d, {}).get(key, "") for d in ("cdriver", "upstream")]
        lines.append(f"{label:<34} {cells[0]!s:>10} {cells[1]!s:>10} {ratio.get(key, '')!s:>7}")
    return "\n".join(lines)


def chart(ratio: dict[str, float], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (make bench installs it; pip install matplotlib)"
    labels = [label for key, label in FIGURES if key in ratio]
    values = [ratio[key] for key, _ in FIGURES if key in ratio]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(values) + 1.2))
    ax.barh(labels[::-1], values[::-1], color=["tab:green" if v <= 1.0 else "tab:red" for v in values[::-1]])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor labels overlap
    ax.set_xlabel("cdriver / upstream (below 1: cdriver better)")
    ax.set_title("cdriver / upstream driver: simulated nodes, kubelet timings")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"chart written to {path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--domains", type=int, default=500)
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--json-out", type=Path, default=RESULTS / "versus.json")
    parser.add_argument("--chart-out", type=Path, default=RESULTS / "versus.png")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdv", dir="/tmp"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for driver in args.drivers.split(","):
            results[driver] = run_driver(driver, args.rounds, args.domains, base)
            print(f"[{driver}] {json.dumps(results[driver])}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratio = ratios(results)
    doc = {"rounds": args.rounds, "domains": args.domains, "nodes": 8, "results": results,
           "ratio_cdriver_to_upstream": ratio}
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results, ratio))
    print(json.dumps(doc))
    print(chart(ratio, args.chart_out))


if __name__ == "__main__":
    main()
