"""Rack scale: one ComputeDomain bootstrapped across worlds shaped like GB200 NVL72 racks, cdriver
and the upstream Go driver side by side.

The world is the shipped `gb200-nvl72x4` topology (four racks of 18 compute trays, one clique per
rack), its first N nodes simulated with kubelet's own timings (retry back-offs, heartbeats,
probes): N = 4 and 18 are one rack, 36 two, 72 all four. For each N and round the drivers take
turns (cdriver, upstream, ...), each on a cluster of its own with its own chart, both controllers
at the same client rate limit (`--limits matched`: 1000/s, burst 2000) or each at its own default
(`--limits default`). A round creates one ComputeDomain (numNodes N) and one workload pod per node,
then measures:

- time from the first create to /dev/nvidia-caps-imex-channels/channel0 visible inside each
  container (`kubectl exec test -c`): p50, p90 and max over the N pods;
- what the API server served meanwhile (its own `apiserver_request_total`, every client): requests
  per node, watch events it sent per node (`apiserver_watch_events_total`, every watcher), objects
  it holds more per node (pods, claims, templates, DaemonSets, Events, ComputeDomains, cliques:
  by resource in the JSON), 409
  conflicts on ComputeDomainCliques and ComputeDomain status per daemon, any 429, and the peak of
  seats executing (`apiserver_flowcontrol_current_executing_seats`, sampled every
  0.25 s); the API server runs API Priority and Fairness with its default limits, as clusters do
  (the test suite's runs it unlimited);
- CPU seconds and RSS per role: the controller, the kubelet plugins and the IMEX daemons (their
  container's processes, the IMEX stand-in left out, and the exec probes the nodes ran for them),
  per node for plugins and daemons;
- cdriver only: each daemon's seconds from start to its index, and the API requests of the
  controller, each plugin and each daemon (the roles' own `cdriver_api_client_requests_total`);
- the test world's own cost beside it: the RSS of this process, which hosts every simulated node's
  agent, per node, and the container launchers per driver pod.

Two more scenarios, on worlds of their own, the drivers interleaved the same way:

- burst (upstream #1107): BURST_NODES daemons join one clique at the same moment while the
  scheduler works through a backlog of other pods (`--backlog` pods that fit no node, created
  from a few seconds before the domain until the round ends): 409s per daemon, any 429, and the
  seconds from the domain's create until every daemon of the clique holds an index;
- many domains: ComputeDomains of one and two nodes created at once on the `--many-nodes` world,
  in batches up to each count of `--domains` (500, then 500 more: 1,000): seconds until every
  domain has its finalizer, templates and DaemonSet, API writes per domain, the controller's CPU
  and its RSS with that many domains.

Writes bench/results/scale.json, a plot of time to channel over N (scale.png and scale.svg) and
prints a table; `--table FILE` prints the table of a document without running anything.

    python bench/scale.py [--sizes 4,18,36] [--rounds 2] [--drivers cdriver,upstream] [--limits matched]
                          [--backlog 1500] [--domains 500,1000] [--many-nodes 72]
    python bench/scale.py --table bench/results/scale.json

An empty `--sizes`, `--backlog 0` or an empty `--domains` leaves that scenario out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import versus as vs  # bench/versus.py (scripts run from bench/)

from cdriver.nvml.discover import channel_device_path
from cdriver.sim.gpu.topology import resolve_topology
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, DRIVERS, SimWorld, WorldSettings

RESULTS = Path(__file__).resolve().parent / "results"
TOPOLOGY = "gb200-nvl72x4"
NS = "scale"
SIZES = (4, 18, 36)
BURST_NODES = 18  # one rack: the most daemons that join one clique
BACKLOG = 1500
BACKLOG_NS = "backlog"
DOMAINS = (500, 1000)
MANY_NODES = 72
SETTLE = 5.0
ROUND_TIMEOUT = 900.0
DAEMON_METRICS_PORT = 8082
PLUGIN_METRICS_PORT = 8081  # the chart's kubeletPlugin.metrics.port, on the pod IP
_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')
#: the resources whose 409s are daemons contending on membership (cliques; the legacy CD status)
MEMBERSHIP = {("computedomaincliques", ""), ("computedomains", "status")}


# -- the API server's own counts ------------------------------------------------------------------
def metrics_text(raw: Any) -> str:
    """The API server's /metrics, once per snapshot (every figure of it is read from this text)."""
    return str(raw.request("GET", "/metrics"))


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in a /metrics text: (labels, value)."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            out.append((dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def request_counts(text: str) -> dict[tuple[str, str, str, str], float]:
    """apiserver_request_total by (resource, subresource, verb, code)."""
    return {(lb.get("resource", ""), lb.get("subresource", ""), lb.get("verb", ""), lb.get("code", "")): v
            for lb, v in samples(text, "apiserver_request_total")}


#: what a domain adds to etcd: counted by listing (the API server's own object counts lag a minute)
COUNTED = ("pods", "resourceclaims", "resourceclaimtemplates", "daemonsets", "events")


def object_counts(raw: Any) -> dict[str, float]:
    """Objects of the resources a domain adds, in every namespace, and its ComputeDomains and cliques."""
    from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
    from cdriver.kube.resources import RESOURCES

    out = {name: float(len(raw.list(RESOURCES[name])["items"])) for name in COUNTED}
    for res in (COMPUTE_DOMAINS, COMPUTE_DOMAIN_CLIQUES):
        out[res.plural] = float(len(raw.list(res)["items"]))
    return out


def totals_by(text: str, name: str, label: str) -> dict[str, float]:
    """Metric `name` summed by one of its labels."""
    out: dict[str, float] = {}
    for labels, value in samples(text, name):
        out[labels.get(label, "")] = out.get(labels.get(label, ""), 0.0) + value
    return out


def delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


class InflightPeak:
    """Samples the API server's in-flight requests (read-only + mutating) until stopped."""

    def __init__(self, raw: Any, every: float = 0.25) -> None:
        self.raw, self.every, self.peak = raw, every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                # seats executing in every priority level, less the one of this sampling request
                seats = sum(v for _, v in samples(metrics_text(self.raw),
                                                  "apiserver_flowcontrol_current_executing_seats"))
                self.peak = max(self.peak, seats - 1)
            except Exception:  # noqa: BLE001 - a missed sample is not a failed run
                continue

    def __enter__(self) -> InflightPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# -- one bootstrap ---------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    """The nearest-rank percentile: the smallest value with at least p % of the values at or below it."""
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 2)


def scrape_sum(url: str, name: str) -> float:
    """The sum of every sample of `name` at a metrics endpoint (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def role_requests(pods: list[dict], port: int) -> float:
    """API requests cdriver's role pods made, by their own counter (every pod's, summed)."""
    return sum(scrape_sum(f"http://{(p.get('status') or {}).get('podIP')}:{port}/metrics",
                          "cdriver_api_client_requests_total") for p in pods)


def daemon_index_seconds(daemons: list[dict]) -> list[float]:
    """Each cdriver daemon's seconds from start to its index (its metric on the pod IP; 0 or no
    answer: left out)."""
    found = [scrape_sum(f"http://{(p.get('status') or {}).get('podIP')}:{DAEMON_METRICS_PORT}/metrics",
                        "cdriver_imex_daemon_index_assignment_seconds") for p in daemons]
    return [v for v in found if v > 0]


def backlog_pod(name: str) -> dict:
    """A pod no node can hold (it asks for more CPU than a node has): the scheduler tries it,
    finds no fit and queues it again, as with a queue of training pods."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BACKLOG_NS},
            "spec": {"containers": [{"name": "train", "image": "registry.local/train:none",
                                     "resources": {"requests": {"cpu": "1000"}}}]}}


class Backlog:
    """Creates `count` pending pods from a few threads while a round runs."""

    def __init__(self, raw: Any, count: int, threads: int = 4) -> None:
        self.raw, self.count, self.created = raw, count, 0
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k, threads), daemon=True) for k in range(threads)]

    def _run(self, k: int, step: int) -> None:
        for i in range(k, self.count, step):
            if self._stop.is_set():
                return
            try:
                self.raw.create(scenario.PODS, backlog_pod(f"train-{i:05d}"), BACKLOG_NS)
            except Exception:  # noqa: BLE001 - a pod refused is one pod less in the backlog
                continue
            with self._lock:
                self.created += 1

    def start(self, head: float = 0.25, timeout: float = 120.0) -> Backlog:
        """Start, and return once `head` of the pods exist (the scheduler is then busy)."""
        scenario.ensure_namespace(self.raw, BACKLOG_NS)
        for t in self._threads:
            t.start()
        scenario.wait_for("the backlog's head", lambda: self.created >= head * self.count, timeout, 0.2)
        return self

    def stop(self) -> int:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return self.created


class IndexWatch:
    """Polls a domain's clique entries: the seconds from `t0` until `n` of them hold distinct
    indices (None until then)."""

    def __init__(self, raw: Any, uid: str, n: int, t0: float, every: float = 0.25) -> None:
        self.raw, self.uid, self.n, self.t0, self.every = raw, uid, n, t0, every
        self.seconds: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.seconds is None and not self._stop.wait(self.every):
            try:
                found = scenario.clique_entries(self.raw, DRIVER_NAMESPACE, self.uid).values()
            except Exception:  # noqa: BLE001 - a missed poll is not a failed run
                continue
            indices = {(e.get("cliqueID"), e.get("index")) for entries in found for e in entries
                       if e.get("index") is not None}
            if len(indices) >= self.n:
                self.seconds = round(time.monotonic() - self.t0, 2)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(5)
        return self.seconds


def bootstrap(world: SimWorld, n: int, driver: str, backlog: int = 0) -> dict[str, Any]:
    """One domain over the world's first `n` nodes, one workload pod each (with `backlog` other
    pods pending meanwhile): the round's figures."""
    raw = world.raw
    nodes = [node.name for node in world.nodes][:n]
    ctrl_pods, plugin_pods = vs.role_pods(world, "controller"), vs.role_pods(world, "kubelet-plugin")
    ctrl, plugins = vs.role_processes(world, ctrl_pods), vs.role_processes(world, plugin_pods)
    ctrl_cpu0 = vs.cpu_seconds(ctrl) + vs.probe_cpu_seconds(world, ctrl_pods)
    plugin_cpu0 = vs.cpu_seconds(plugins) + vs.probe_cpu_seconds(world, plugin_pods)
    text0 = metrics_text(raw)
    before = request_counts(text0)
    ctrl_port, plugin_port = world.settings.controller_metrics_port, PLUGIN_METRICS_PORT
    own0 = (role_requests(ctrl_pods, ctrl_port), role_requests(plugin_pods, plugin_port))
    objects0 = object_counts(raw)
    watch0 = totals_by(text0, "apiserver_watch_events_total", "resource")
    names = [f"w{i:02d}" for i in range(n)]
    seen: dict[str, float] = {}
    pending = Backlog(raw, backlog).start() if backlog else None
    with InflightPeak(raw) as inflight:
        t0 = time.monotonic()
        cd = raw.create(scenario.CDS, scenario.compute_domain("rack", NS, "rack-ch", num_nodes=n), NS)
        indices_watch = IndexWatch(raw, cd["metadata"]["uid"], n, t0)
        for name, node in zip(names, nodes, strict=True):
            raw.create(scenario.PODS, scenario.workload_pod(name, NS, "rack-ch", node=node), NS)
        while len(seen) < n:
            if time.monotonic() - t0 > ROUND_TIMEOUT:
                raise SystemExit(f"[{driver}] N={n}: no channel in {sorted(set(names) - set(seen))} after "
                                 f"{ROUND_TIMEOUT:.0f} s\n{world.pod_log_tails()}")
            running = [p["metadata"]["name"] for p in raw.list(scenario.PODS, NS)["items"]
                       if scenario.pod_phase(p) == "Running" and p["metadata"]["name"] not in seen]
            for name in running:
                if world.exec(NS, name, ["test", "-c", channel_device_path(0)]).returncode == 0:
                    seen[name] = time.monotonic() - t0
            time.sleep(0.1)
        scenario.wait_for("every daemon's index", lambda: indices_watch.seconds is not None, 120, 0.25)
    all_indices_s = indices_watch.stop()
    backlog_created = pending.stop() if pending else 0
    text1 = metrics_text(raw)
    after = request_counts(text1)
    objects = delta(object_counts(raw), objects0)
    watch = delta(totals_by(text1, "apiserver_watch_events_total", "resource"), watch0)
    uid = cd["metadata"]["uid"]
    daemons = scenario.daemon_pods(raw, DRIVER_NAMESPACE, uid)
    daemon_procs = vs.role_processes(world, daemons)
    served = delta(after, before)
    conflicts = sum(v for (res, sub, _, code), v in served.items() if code == "409" and (res, sub) in MEMBERSHIP)
    entries = [e for found in scenario.clique_entries(raw, DRIVER_NAMESPACE, uid).values() for e in found]
    times = list(seen.values())
    figures: dict[str, Any] = {
        "time_to_channel_p50_s": pct(times, 50), "time_to_channel_p90_s": pct(times, 90),
        "time_to_channel_max_s": round(max(times), 2),
        "api_requests_per_node": round(sum(served.values()) / n, 1),
        "membership_conflicts_per_daemon": round(conflicts / max(1, len(daemons)), 2),
        "api_429": int(sum(v for (_, _, _, code), v in served.items() if code == "429")),
        "all_indices_s": all_indices_s,
        "api_inflight_peak": int(inflight.peak),
        "watch_events_per_node": round(sum(watch.values()) / n, 1),
        "objects_per_node": round(sum(objects.values()) / n, 2),
        "controller_cpu_s": round(vs.cpu_seconds(ctrl) + vs.probe_cpu_seconds(world, ctrl_pods) - ctrl_cpu0, 2),
        "controller_rss_mb": round(vs.rss_mb(ctrl), 1),
        "plugin_cpu_s_per_node": round((vs.cpu_seconds(plugins) + vs.probe_cpu_seconds(world, plugin_pods)
                                        - plugin_cpu0) / max(1, len(plugin_pods)), 2),
        "plugin_rss_mb": round(vs.rss_mb(plugins) / max(1, len(plugin_pods)), 1),
        "daemon_cpu_s_per_node": round((vs.cpu_seconds(daemon_procs) + vs.probe_cpu_seconds(world, daemons))
                                       / max(1, len(daemons)), 2),
        "daemon_rss_mb": round(vs.rss_mb(daemon_procs) / max(1, len(daemons)), 1),
        "world_agent_rss_mb_per_node": round(psutil.Process().memory_info().rss / 2**20 / len(world.nodes), 1),
        "launcher_rss_mb_per_driver_pod": round(vs.launcher_rss_mb(world, [*plugin_pods, *daemons]), 1),
    }
    if driver == "cdriver":
        figures["api_requests_controller"] = round(role_requests(ctrl_pods, ctrl_port) - own0[0], 1)
        figures["api_requests_plugin_per_node"] = round(
            (role_requests(plugin_pods, plugin_port) - own0[1]) / max(1, len(plugin_pods)), 1)
        figures["api_requests_daemon_per_node"] = round(
            role_requests(daemons, DAEMON_METRICS_PORT) / max(1, len(daemons)), 1)
        index_s = daemon_index_seconds(daemons)
        if index_s:
            figures["daemon_index_p50_s"] = pct(index_s, 50)
            figures["daemon_index_max_s"] = round(max(index_s), 2)
    indices = [e.get("index") for e in entries]
    checks = {"daemons": len(daemons), "clique_entries": len(entries),
              "distinct_indices": len({(e.get("cliqueID"), e.get("index")) for e in entries}) == len(entries)
              and None not in indices,
              "requests_by_verb": _by_verb(served),
              "objects_by_resource": {k: int(v) for k, v in sorted(objects.items())},
              "watch_events_by_resource": {k: int(v) for k, v in sorted(watch.items())}}
    if backlog:
        figures["backlog_pods"] = backlog_created
    for name in names:
        raw.delete(scenario.PODS, name, NS)
    raw.delete(scenario.CDS, "rack", NS)
    scenario.wait_for("the domain cleaned up", lambda: not any(scenario.generated_objects(
        raw, DRIVER_NAMESPACE, uid).values()) and raw.get_or_none(scenario.CDS, "rack", NS) is None, 300)
    return {"figures": figures, "checks": checks}


def _by_verb(served: dict[tuple[str, str, str, str], float]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, _, verb, _), v in served.items():
        out[verb] = out.get(verb, 0) + int(v)
    return dict(sorted(out.items()))


def world_settings(driver: str, n: int, limits: str, base: Path, tag: str) -> tuple[WorldSettings, list[float]]:
    """A world of the topology's first `n` nodes for `driver` (kubelet timings, APF on) and its
    controller's client limit."""
    qps, burst = vs.HIGH_LIMIT if limits == "matched" else vs.DEFAULT_LIMITS[driver]
    extra = vs.limit_values(driver, qps, burst) if limits == "matched" else []
    return WorldSettings(base_dir=base / f"{driver}-{tag}", nodes=n, topology=resolve_topology(TOPOLOGY),
                         driver=driver, fast=False, extra_values=extra, api_fairness=True), [qps, burst]


def run_once(driver: str, n: int, limits: str, base: Path, round_: int, backlog: int = 0) -> dict[str, Any]:
    """One bootstrap on a fresh world: scenario "rack" (no backlog) or "burst"."""
    settings, client_limit = world_settings(driver, n, limits, base, f"{n}-{backlog}-{round_}")
    began = time.monotonic()
    with SimWorld(settings, progress=lambda m: print(f"[{driver}] {m}", file=sys.stderr)) as world:
        started = time.monotonic() - began
        scenario.ensure_namespace(world.raw, NS)
        time.sleep(SETTLE)
        load0 = os.getloadavg()[0]
        record = {"scenario": "burst" if backlog else "rack", "driver": driver, "nodes": n, "round": round_,
                  "commit": vs.COMMIT, "limits": limits, "client_limit": client_limit,
                  "world_start_s": round(started, 1), **bootstrap(world, n, driver, backlog),
                  "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    print(f"[{driver}] {json.dumps(record)}", file=sys.stderr, flush=True)
    return record


def run_many(driver: str, n: int, counts: list[int], limits: str, base: Path, round_: int) -> list[dict[str, Any]]:
    """Scenario "many": on one world of `n` nodes, domains of one and two nodes created in
    batches until each of `counts` exist; one record per count."""
    settings, client_limit = world_settings(driver, n, limits, base, f"many-{round_}")
    records, total = [], 0
    with SimWorld(settings, progress=lambda m: print(f"[{driver}] {m}", file=sys.stderr)) as world:
        time.sleep(SETTLE)
        for batch, count in enumerate(counts):
            load0 = os.getloadavg()[0]
            figures = vs.controller_load(world, count - total, ns=f"many-{batch}", num_nodes=lambda i: 1 + i % 2)
            record = {"scenario": "many", "driver": driver, "nodes": n, "domains": count, "batch": count - total,
                      "round": round_, "commit": vs.COMMIT, "limits": limits, "client_limit": client_limit,
                      "figures": figures, "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}
            total = count
            records.append(record)
            print(f"[{driver}] {json.dumps(record)}", file=sys.stderr, flush=True)
    return records


# -- the report ------------------------------------------------------------------------------------
ROWS = [
    ("time_to_channel_p50_s", "time to channel, p50 (s)"),
    ("time_to_channel_p90_s", "time to channel, p90 (s)"),
    ("time_to_channel_max_s", "time to channel, max (s)"),
    ("daemon_index_p50_s", "daemon start to index, p50 (s)"),
    ("daemon_index_max_s", "daemon start to index, max (s)"),
    ("membership_conflicts_per_daemon", "409 conflicts on membership per daemon"),
    ("api_429", "429 responses"),
    ("all_indices_s", "domain created to every daemon's index (s)"),
    ("backlog_pods", "backlog: pods pending beside the domain"),
    ("api_requests_per_node", "API requests per node (all clients)"),
    ("api_requests_controller", "the controller's requests, in all (its own count)"),
    ("api_requests_plugin_per_node", "a plugin's requests (its own count)"),
    ("api_requests_daemon_per_node", "a daemon's requests (its own count)"),
    ("api_inflight_peak", "API server seats executing, peak (APF)"),
    ("watch_events_per_node", "watch events sent per node (all watchers)"),
    ("objects_per_node", "objects added to etcd per node"),
    ("controller_cpu_s", "controller CPU (s)"),
    ("controller_rss_mb", "controller RSS (MB)"),
    ("plugin_cpu_s_per_node", "plugin CPU per node (s)"),
    ("plugin_rss_mb", "plugin RSS (MB)"),
    ("daemon_cpu_s_per_node", "daemon CPU per node, probes included (s)"),
    ("daemon_rss_mb", "daemon RSS (MB)"),
    ("world_agent_rss_mb_per_node", "test world: node agents' RSS per node (MB)"),
    ("launcher_rss_mb_per_driver_pod", "test world: launchers per driver pod (MB)"),
]


MANY_ROWS = [
    ("controller_s", "created to every template and DaemonSet (s)"),
    ("api_writes_per_cd", "API writes per domain (all clients)"),
    ("status_written_pct", "domains with a status written (%)"),
    ("controller_cpu_s", "controller CPU (s)"),
    ("controller_rss_mb", "controller RSS with that many domains (MB)"),
]


def medians(doc: dict[str, Any], kind: str = "rack", by: str = "nodes") -> dict[tuple[str, int], dict[str, float]]:
    """(driver, runs[by]) -> figure -> median over the rounds of scenario `kind` (records
    without a scenario are "rack")."""
    grouped: dict[tuple[str, int], dict[str, list[float]]] = {}
    for run in doc["runs"]:
        if run.get("scenario", "rack") != kind:
            continue
        into = grouped.setdefault((run["driver"], run[by]), {})
        for key, value in run["figures"].items():
            if value is not None:
                into.setdefault(key, []).append(value)
    return {k: {f: statistics.median(v) for f, v in figs.items()} for k, figs in grouped.items()}


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _section(title: str, ours: dict[str, float], theirs: dict[str, float], rows: list[tuple[str, str]]) -> list[str]:
    lines = [title, "", "| figure | cdriver | upstream | ratio |", "|---|---:|---:|---:|"]
    for key, label in rows:
        a, b = ours.get(key), theirs.get(key)
        if a is None and b is None:
            continue
        ratio = f"{a / b:.2f}" if a is not None and b else ""
        lines.append(f"| {label} | {_fmt(a)} | {_fmt(b)} | {ratio} |")
    return [*lines, ""]


def _runs(doc: dict[str, Any], kind: str, by: str, value: int) -> list[dict[str, Any]]:
    return [r for r in doc["runs"] if r.get("scenario", "rack") == kind and r[by] == value]


def table(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for kind, by, rows, title in (
            ("rack", "nodes", ROWS, "**N = {v} nodes** ({r} round(s) per driver)"),
            ("burst", "nodes", ROWS, "**Burst: {v} daemons join one clique beside a scheduling backlog** "
                                     "({r} round(s) per driver)"),
            ("many", "domains", MANY_ROWS, "**{v} ComputeDomains of 1–2 nodes on {nodes} nodes** "
                                           "({r} round(s) per driver)")):
        med = medians(doc, kind, by)
        for v in sorted({n for _, n in med}):
            runs = _runs(doc, kind, by, v)
            head = title.format(v=v, r=len({r["round"] for r in runs}), nodes=runs[0]["nodes"])
            lines += _section(head, med.get(("cdriver", v), {}), med.get(("upstream", v), {}), rows)
    commits = sorted({r["commit"] for r in doc["runs"]})
    loads = [x for r in doc["runs"] for x in r["load"]]
    limits = sorted({f"{r['limits']} ({r['client_limit'][0]:g}/{r['client_limit'][1]})" for r in doc["runs"]})
    lines.append(f"(Measured at commit {', '.join(commits)}; topology {TOPOLOGY}, simulated nodes with kubelet's "
                 f"timings; controller client limits {', '.join(limits)}; load average "
                 f"{min(loads, default=0):.1f}–{max(loads, default=0):.1f}; medians over the rounds.)")
    return "\n".join(lines)


def plot(doc: dict[str, Any], png: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (make bench installs it; pip install matplotlib)"
    med = medians(doc)
    if not med:
        return "no plot: no rack runs"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for driver, color in (("cdriver", "tab:green"), ("upstream", "tab:blue")):
        sizes = sorted(n for d, n in med if d == driver)
        if not sizes:
            continue
        for key, style, what in (("time_to_channel_p50_s", "-o", "p50"), ("time_to_channel_max_s", "--s", "max")):
            ax.plot(sizes, [med[(driver, n)][key] for n in sizes], style, color=color, label=f"{driver} {what}")
    ax.set_xlabel("nodes (GB200 NVL72 trays; one domain, one workload pod per node)")
    ax.set_ylabel("seconds from apply to channel0 in the container")
    commits = ", ".join(sorted({r["commit"] for r in doc["runs"]}))
    ax.set_title(f"Time to channel over cluster size (kubelet timings, commit {commits})", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    fig.savefig(png.with_suffix(".svg"))
    return f"plot written to {png} and {png.with_suffix('.svg')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts (at most 72)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--limits", choices=("matched", "default"), default="matched")
    parser.add_argument("--backlog", type=int, default=BACKLOG, help="pending pods of the burst scenario (0: none)")
    parser.add_argument("--domains", default=",".join(map(str, DOMAINS)), help="domain counts of the many scenario")
    parser.add_argument("--many-nodes", type=int, default=MANY_NODES, help="nodes of the many scenario's world")
    parser.add_argument("--json-out", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--plot-out", type=Path, default=RESULTS / "scale.png")
    parser.add_argument("--table", type=Path, help="print the table of this document and exit")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    counts = sorted(int(c) for c in args.domains.split(",") if c)
    if any(not 1 <= s <= 72 for s in [*sizes, args.many_nodes]):
        parser.error(f"--sizes {args.sizes}, --many-nodes {args.many_nodes}: the {TOPOLOGY} topology has 72 nodes")
    doc: dict[str, Any] = {"settings": {"topology": TOPOLOGY, "sizes": sizes, "limits": args.limits,
                                        "backlog": args.backlog, "domains": counts, "many_nodes": args.many_nodes},
                           "runs": []}
    base = Path(tempfile.mkdtemp(prefix="cds", dir="/tmp"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def keep(records: list[dict[str, Any]]) -> None:
        doc["runs"].extend(records)
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n")  # what is done so far

    drivers = args.drivers.split(",")
    try:
        for n in sizes:
            for round_ in range(args.rounds):
                for driver in drivers:
                    keep([run_once(driver, n, args.limits, base, round_)])
        for round_ in range(args.rounds if args.backlog else 0):
            for driver in drivers:
                keep([run_once(driver, BURST_NODES, args.limits, base, round_, backlog=args.backlog)])
        for round_ in range(1 if counts else 0):  # one round: a world of many nodes is slow to start
            for driver in drivers:
                keep(run_many(driver, args.many_nodes, counts, args.limits, base, round_))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(table(doc))
    print(plot(doc, args.plot_out))


if __name__ == "__main__":
    main()
