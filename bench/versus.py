"""cdriver side by side with the upstream Go ComputeDomain driver: same cluster, same workloads.

Each run brings up one simulated cluster for one driver with kubelet's real retry and heartbeat
timings (not the fast mode tests use) and that driver's own chart (upstream's from `make
peer`); the drivers take turns (cdriver, upstream, cdriver, ...) for `--rounds` rounds, so that
a change of the machine's load falls on both. The parts (`--parts`, each its own run):

- channel (8 GB200 nodes in two cliques of four): a ComputeDomain + N workload pods spread over
  both cliques, from the first create to /dev/nvidia-caps-imex-channels/channel0 visible in
  every container (N = 2, then N = 8), everything deleted in between; the plugins' CPU seconds
  and RSS under that load, the daemons' CPU seconds to Ready and RSS; every NodePrepareResources
  call the simulated kubelets made for the workloads' channel claims (failed and timed-out
  calls too, with their durations);
- idle (the same cluster): the controller's and the plugins' CPU and RSS over a quiet window;
  then one 8-pod domain left Ready and its daemons' CPU over a quiet window and RSS;
- controller-default (the same cluster, after idle), controller-high (a cluster of 2 nodes):
  ComputeDomains created at once (`--default-domains`, `--domains`); the time until each has
  its workload and daemon claim templates, its DaemonSet and the finalizer, with each driver's
  controller at its own default client rate limit (its chart untouched: cdriver 50/s burst 100,
  upstream client-go's 5/s burst 10), then both at HIGH_LIMIT; in the high run also how many
  carry a status by then, the API server's write requests per domain (all clients) and the
  controller's CPU seconds and RSS.

What each figure counts: a role's processes are its container's command and everything below
it (the IMEX stand-in and shells left out), plus the CPU time of the exec probes the node ran
for its containers (probes run from the node through nsenter, outside the container's tree;
the node agent counts each probe's reaped CPU time per container). The containers' launcher
processes (the shim and the init of each container) are node overhead: reported on a line of
their own, not in a role's RSS.

Writes bench/results/versus.json (every run's figures; `--merge` joins documents made in parts)
and versus.png (the ratios of the medians), and prints the markdown table; `--table FILE`
prints the table of a document without running anything.

    python bench/versus.py [--rounds 5] [--parts channel,idle,controller-default,controller-high]
                           [--domains 500] [--default-domains N] [--drivers cdriver,upstream]
                           [--json-out FILE]
    python bench/versus.py --merge A.json B.json [--json-out FILE]
    python bench/versus.py --table bench/results/versus.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import versus_figures as figures  # bench/versus_figures.py (scripts run from bench/)

from cdriver.api import constants
from cdriver.errors import CdriverError
from cdriver.nvml.discover import channel_device_path
from cdriver.sim.node.simulated.pods import PREPARE_TIMING
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, DRIVERS, SimWorld, WorldSettings, component_of

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
TIMING = re.compile(r" pod-(\S+) " + re.escape(PREPARE_TIMING)
                    + r" (\S+) claims=(\d+) errors=(\d+) took_ms=([\d.]+)(?: outcome=(\w+))?")

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


# -- role processes ----------------------------------------------------------------------------
def role_pods(world: SimWorld, component: str) -> list[dict]:
    return [p for p in world.raw.list(scenario.PODS, DRIVER_NAMESPACE)["items"] if component_of(p) == component]


def pod_containers(world: SimWorld, pods: Iterable[dict]) -> Iterator[tuple[Any, str, str]]:
    """(node agent, pod name, container name) of every container of the pods."""
    for pod in pods:
        agent = world.node(pod["spec"]["nodeName"]).agent
        for ctr in pod["spec"]["containers"]:
            yield agent, pod["metadata"]["name"], ctr["name"]


def live_processes(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes of `pids` that still exist."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return out


def role_processes(world: SimWorld, pods: Iterable[dict]) -> list[psutil.Process]:
    """The role's own processes in the pods' containers: each main process and what runs below it,
    less shells and the IMEX stand-in (not the containers' launchers)."""
    out = []
    for agent, pod, ctr in pod_containers(world, pods):
        for proc in live_processes(agent.container_tree_pids(DRIVER_NAMESPACE, pod, ctr)):
            try:
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


def probe_cpu_seconds(world: SimWorld, pods: Iterable[dict]) -> float:
    """CPU seconds of the exec probes the nodes ran for the pods' containers so far."""
    total = 0.0
    for agent, pod, ctr in pod_containers(world, pods):
        try:
            total += agent.container_probe_cpu_s(DRIVER_NAMESPACE, pod, ctr)
        except CdriverError:  # the pod is gone from its node
            continue
    return total


def launcher_rss_mb(world: SimWorld, pods: list[dict]) -> float:
    """RSS per pod of its containers' launcher processes (shim and init): node overhead."""
    procs = [proc for agent, pod, ctr in pod_containers(world, pods)
             for proc in live_processes(agent.container_launcher_pids(DRIVER_NAMESPACE, pod, ctr))]
    return rss_mb(procs) / max(1, len(pods))


def per_instance(world: SimWorld, component: str, pods: list[dict] | None = None) -> tuple[list[psutil.Process], int]:
    pods = role_pods(world, component) if pods is None else pods
    return role_processes(world, pods), max(1, len(pods))


def quiet_window(world: SimWorld, component: str, pods: list[dict] | None = None) -> dict[str, float]:
    """CPU a minute (the processes' and their exec probes') and RSS per pod over IDLE_WINDOW."""
    pods = role_pods(world, component) if pods is None else pods
    procs, count = per_instance(world, component, pods)
    before, probes_before = cpu_seconds(procs), probe_cpu_seconds(world, pods)
    time.sleep(IDLE_WINDOW)
    probes = probe_cpu_seconds(world, pods) - probes_before
    per_min = 60 / IDLE_WINDOW / count
    return {"cpu_s_per_min": round((cpu_seconds(procs) - before + probes) * per_min, 3),
            "probe_cpu_s_per_min": round(probes * per_min, 3), "rss_mb": round(rss_mb(procs) / count, 1)}


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


def prepare_timings(world: SimWorld) -> list[dict[str, Any]]:
    """Claims, errors, ms and outcome (ok, error, timeout, cancelled, failed) of every NodePrepareResources
    call for a workload pod's channel claim (the daemon pods' claims are left out)."""
    out = []
    for node in world.nodes:
        text = node.agent.layout.node_log.read_text(errors="replace")
        for m in TIMING.finditer(text):
            if m.group(1).startswith(f"{NS}-") and m.group(2) == constants.DRIVER_NAME:
                errors = int(m.group(4))
                out.append({"claims": int(m.group(3)), "errors": errors, "ms": float(m.group(5)),
                            "outcome": m.group(6) or ("error" if errors else "ok")})
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


def controller_load(world: SimWorld, n: int, ns: str = f"{NS}-many",
                    num_nodes: Callable[[int], int] = lambda i: 0) -> dict[str, float]:
    """`n` ComputeDomains created at once in namespace `ns` (the i-th asking for `num_nodes(i)`
    nodes): seconds until every one has its finalizer, templates and DaemonSet, the API writes
    per domain (every client, the creates left out), and the controller's CPU and RSS."""
    raw = world.raw
    scenario.ensure_namespace(raw, ns)
    pods = role_pods(world, "controller")
    procs, _ = per_instance(world, "controller", pods)
    cpu0, writes0 = cpu_seconds(procs) + probe_cpu_seconds(world, pods), apiserver_writes(raw)
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: raw.create(scenario.CDS, scenario.compute_domain(
            f"cd-{i}", ns, f"t-{i}", num_nodes=num_nodes(i)), ns),
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
            "controller_cpu_s": round(cpu_seconds(procs) + probe_cpu_seconds(world, pods) - cpu0, 2),
            "controller_rss_mb": round(rss_mb(procs), 1)}


# -- one run -----------------------------------------------------------------------------------
PARTS = ("channel", "idle", "controller-default", "controller-high")
#: each driver's own default client rate limit (qps, burst): cdriver's chart, client-go's
DEFAULT_LIMITS = {"cdriver": (50, 100), "upstream": (5, 10)}
HIGH_LIMIT = (1000, 2000)
CONTROLLER_NODES = 2


def limit_values(driver: str, qps: float, burst: int) -> list[str]:
    """Chart values that set the controller's client rate limit: cdriver's own values, and for
    upstream the KUBE_API_QPS/KUBE_API_BURST environment its flags read (its chart has no
    value of its own for them, only the container's extra env)."""
    if driver == "cdriver":
        return ["--set", f"controller.kubeApiQps={qps:g}", "--set", f"controller.kubeApiBurst={burst}"]
    env = "controller.containers.computeDomain.env"
    return ["--set", f"{env}[0].name=KUBE_API_QPS", "--set-string", f"{env}[0].value={qps:g}",
            "--set", f"{env}[1].name=KUBE_API_BURST", "--set-string", f"{env}[1].value={burst}"]


def commit() -> str:
    """The checkout's commit (`+dirty` when it has uncommitted changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def channel_part(world: SimWorld, driver: str) -> dict[str, Any]:
    raw = world.raw
    plugins, plugin_count = per_instance(world, "kubelet-plugin")
    plugin_cpu0 = cpu_seconds(plugins)
    daemon_load: list[tuple[float, float, float]] = []

    def sample_daemons(uid: str) -> None:
        pods = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
        procs = role_processes(world, pods)
        probes = probe_cpu_seconds(world, pods)
        count = max(1, len(pods))
        daemon_load.append(((cpu_seconds(procs) + probes) / count, probes / count, rss_mb(procs) / count))

    out: dict[str, Any] = {}
    for n in (2, 8):
        out[f"time_to_channel_n{n}_s"] = round(channel_round(world, n, f"n{n}", sample_daemons), 2)
        print(f"[{driver}] N={n}: {out[f'time_to_channel_n{n}_s']} s", file=sys.stderr)
    out["plugin_load_cpu_s"] = round((cpu_seconds(plugins) - plugin_cpu0) / plugin_count, 2)
    out["plugin_load_rss_mb"] = round(rss_mb(plugins) / plugin_count, 1)
    out["daemon_bootstrap_cpu_s"] = round(statistics.median(c for c, _, _ in daemon_load), 2)
    out["daemon_bootstrap_probe_cpu_s"] = round(statistics.median(p for _, p, _ in daemon_load), 2)
    out["daemon_load_rss_mb"] = round(statistics.median(r for _, _, r in daemon_load), 1)
    return out


def idle_part(world: SimWorld) -> dict[str, Any]:
    raw = world.raw
    idle_ctrl = quiet_window(world, "controller")
    idle_plugin = quiet_window(world, "kubelet-plugin")
    out: dict[str, Any] = {
        "controller_idle_cpu_s_per_min": idle_ctrl["cpu_s_per_min"], "controller_idle_rss_mb": idle_ctrl["rss_mb"],
        "plugin_idle_cpu_s_per_min": idle_plugin["cpu_s_per_min"], "plugin_idle_rss_mb": idle_plugin["rss_mb"],
        "launcher_rss_mb_per_pod": round(launcher_rss_mb(world, role_pods(world, "kubelet-plugin")), 1)}
    # a domain left Ready: its daemons at idle
    cliques = sorted({node.clique for node in world.nodes if node.clique})
    cd = raw.create(scenario.CDS, scenario.compute_domain("steady", NS, "steady-ch"), NS)
    names = [f"steady-w{i}" for i in range(8)]
    for name in names:
        raw.create(scenario.PODS, spread_pod(name, "steady-ch", cliques, "steady"), NS)
    scenario.wait_pods_running(raw, NS, names, ROUND_TIMEOUT)
    time.sleep(SETTLE)
    idle_daemon = quiet_window(world, "", scenario.daemon_pods(raw, DRIVER_NAMESPACE, cd["metadata"]["uid"]))
    return out | {"daemon_idle_cpu_s_per_min": idle_daemon["cpu_s_per_min"],
                  "daemon_idle_probe_cpu_s_per_min": idle_daemon["probe_cpu_s_per_min"],
                  "daemon_idle_rss_mb": idle_daemon["rss_mb"]}


def run_once(driver: str, parts: list[str], domains: int, default_domains: int, base: Path,
             round_: int) -> list[dict[str, Any]]:
    """One cluster of `driver`; the `parts` that share it, one record each."""
    controller = parts == ["controller-high"]  # a small cluster of its own, the limit raised
    topology = base / "topology.yaml"
    topology.write_text(TOPOLOGY)
    extra = limit_values(driver, *HIGH_LIMIT) if controller else []  # else the chart's defaults
    settings = WorldSettings(base_dir=base / f"{driver}-{parts[0]}-{round_}",
                             nodes=CONTROLLER_NODES if controller else 8,
                             topology=None if controller else topology, driver=driver, fast=False,
                             extra_values=extra)
    records = []
    began = time.monotonic()
    with SimWorld(settings, progress=lambda m: print(f"[{driver}] {m}", file=sys.stderr)) as world:
        scenario.ensure_namespace(world.raw, NS)
        time.sleep(SETTLE)
        for part in parts:
            load0 = os.getloadavg()[0]
            record: dict[str, Any] = {"driver": driver, "part": part, "round": round_, "commit": COMMIT}
            if part == "channel":
                record["figures"] = channel_part(world, driver)
                record["prepare_calls"] = prepare_timings(world)
                record["channel_claims"] = 2 + 8
            elif part == "idle":
                record["figures"] = idle_part(world)
            else:
                count = domains if part == "controller-high" else default_domains
                load = controller_load(world, count)
                key = "controller_high_s" if part == "controller-high" else "controller_default_s"
                record["figures"] = {key: load.pop("controller_s")} | (load if part == "controller-high" else {})
                record["client_limit"] = list(HIGH_LIMIT if part == "controller-high" else DEFAULT_LIMITS[driver])
                record["domains"] = count
            record["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
            records.append(record)
            print(f"[{driver}] {json.dumps(record)}", file=sys.stderr, flush=True)
    print(f"[{driver}] {'+'.join(parts)} round {round_}: {time.monotonic() - began:.0f} s", file=sys.stderr)
    return records


def groups(parts: list[str]) -> list[list[str]]:
    """The parts that share a cluster: channel, idle and controller-default (the chart's
    defaults) one, in that order; controller-high its own."""
    shared = [p for p in PARTS if p in parts and p != "controller-high"]
    return ([shared] if shared else []) + ([["controller-high"]] if "controller-high" in parts else [])


def chart(ratio: dict[str, float], names: dict[str, str], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (make bench installs it; pip install matplotlib)"
    labels = [names[key] for key, _ in figures.FIGURES if key in ratio]
    values = [ratio[key] for key, _ in figures.FIGURES if key in ratio]
    fig, ax = plt.subplots(figsize=(14, 0.35 * len(values) + 1.2))  # long labels
    ax.barh(labels[::-1], values[::-1], color=["tab:green" if v <= 1.0 else "tab:red" for v in values[::-1]])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor labels overlap
    ax.set_xlabel("cdriver / upstream, medians (below 1: cdriver better)")
    ax.set_title("cdriver / upstream driver: simulated nodes, kubelet timings")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"chart written to {path}"


def write(doc: dict[str, Any], json_out: Path, chart_out: Path) -> None:
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=2) + "\n")
    print(figures.table(doc))
    print()
    print(figures.caption(doc))
    print(chart(figures.ratios(doc), figures.labels(doc), chart_out))


COMMIT = commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--domains", type=int, default=500, help="ComputeDomains of controller-high")
    parser.add_argument("--default-domains", type=int, help="ComputeDomains of controller-default (default: "
                        "--domains; upstream at its 5/s takes about 0.6 s a domain)")
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--json-out", type=Path, default=RESULTS / "versus.json")
    parser.add_argument("--chart-out", type=Path, default=RESULTS / "versus.png")
    parser.add_argument("--budget-s", type=float, default=0,
                        help="start no round that would end later than this after the start (0: no limit)")
    parser.add_argument("--table", type=Path, help="print the table of this document and exit")
    parser.add_argument("--merge", type=Path, nargs="+", help="join these documents (made in parts) into --json-out")
    args = parser.parse_args()
    if args.table:
        doc = json.loads(args.table.read_text())
        print(figures.table(doc))
        print()
        print(figures.caption(doc))
        return
    if args.merge:
        write(figures.merge([json.loads(p.read_text()) for p in args.merge]), args.json_out, args.chart_out)
        return
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}: use {','.join(PARTS)}")
    doc: dict[str, Any] = {"settings": {"domains": args.domains, "nodes": 8, "controller_nodes": CONTROLLER_NODES,
                                        "default_limits": DEFAULT_LIMITS, "high_limit": HIGH_LIMIT,
                                        "idle_window_s": IDLE_WINDOW},
                           "runs": []}
    base = Path(tempfile.mkdtemp(prefix="cdv", dir="/tmp"))
    # a stop (timeout, kill) ends the clusters through their context managers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began, longest = time.monotonic(), 0.0
    try:
        for round_ in range(args.rounds):
            if args.budget_s and time.monotonic() - began + longest > args.budget_s:
                print(f"stopping after {round_} rounds: another would end past --budget-s {args.budget_s:g}",
                      file=sys.stderr)
                break
            round_began = time.monotonic()
            for group in groups(parts):
                for driver in args.drivers.split(","):
                    doc["runs"] += run_once(driver, group, args.domains, args.default_domains or args.domains,
                                            base, round_)
                    args.json_out.parent.mkdir(parents=True, exist_ok=True)
                    args.json_out.write_text(json.dumps(doc, indent=2) + "\n")  # what is done so far
            longest = max(longest, time.monotonic() - round_began)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    write(doc, args.json_out, args.chart_out)


if __name__ == "__main__":
    main()
