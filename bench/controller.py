"""Benchmark: `cdriver controller` reconciling N fresh ComputeDomains, against a raw-client floor.

One local control plane, two phases:

1. raw floor: W threads perform, per domain, exactly the writes a perfect controller plus the
   user need (create the ComputeDomain, add the finalizer, create the daemon claim template,
   the DaemonSet and the workload claim template, write the status) with a plain `RawClient`;
2. controller: `cdriver controller` runs as its own process with W workers; W threads create N
   ComputeDomains and the clock stops when every generated object exists and every status is
   written (read from the controller's metrics, then verified by listing).

Reported: both durations and their ratio (controller throughput relative to the floor; goal
>= 0.8), the controller's API writes per domain (5 is the minimum), all API server requests per
domain during the phase (every client, including kube-controller-manager reacting to the new
DaemonSets), and the controller's RSS (goal <= 120 MB at 1,000 domains).

The raw floor has no client-side rate limit, so by default neither has the controller
(``--kube-api-qps -1``): the ratio measures the controller's own cost. ``--kube-api-qps 50``
(its default) shows the limit instead: 500 domains x 5 writes then take about 48 s.

    python bench/controller.py [-n 500] [--workers 4] [--kube-api-qps Q] [--json-out FILE]

Prints a table; writes JSON to bench/results/controller.json (or --json-out).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import yaml
from report import print_rows  # bench/report.py (scripts run from bench/)

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.checkout import CRD_DIR, REPO_ROOT
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.controller import desired
from cdriver.roles.controller.reconciler import parse_domain
from cdriver.roles.controller.settings import ControllerSettings
from cdriver.sim.controlplane.binaries import control_plane_binaries
from cdriver.sim.controlplane.cluster import LocalCluster
from cdriver.sim.world.scenario import compute_domain

RESULTS = REPO_ROOT / "bench" / "results" / "controller.json"
CDS, RCTS, DS = COMPUTE_DOMAINS, RESOURCES["resourceclaimtemplates"], \
    RESOURCES["daemonsets"]
MIN_WRITES_PER_DOMAIN = 5  # finalizer, 3 creates, status
RESOURCE_EMPTY = re.compile(r'[{,]resource=""')  # non-resource requests (/healthz, /metrics)


def install_crds(raw: RawClient) -> None:
    crds = RESOURCES["customresourcedefinitions"]
    for path in sorted(CRD_DIR.glob("*.yaml")):
        raw.create(crds, yaml.safe_load(path.read_text()))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            raw.list(CDS, "default")
            raw.list(COMPUTE_DOMAIN_CLIQUES, "default")
            return
        except ApiError:
            time.sleep(0.1)
    raise SystemExit("the ComputeDomain CRDs were not served within 60 s")


def run_parallel(workers: int, fn, items) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(fn, items):
            pass


def raw_floor(cluster: LocalCluster, n: int, workers: int) -> float:
    """Seconds W threads need for the minimal write set of n domains (no controller runs)."""
    raw = cluster.raw
    ns, driver_ns = "bench-floor", "bench-floor-drv"
    cluster.create_namespace(ns)
    cluster.create_namespace(driver_ns)
    settings = ControllerSettings(namespace=driver_ns)

    def one(i: int) -> None:
        cd = raw.create(CDS, compute_domain(f"cd-{i}", ns, f"cd-{i}-ch", mode=None), ns)
        cd["metadata"]["finalizers"] = ["bench.cdriver/floor"]
        cd = raw.update(CDS, cd)
        objects = desired.desired_objects(parse_domain(cd), settings)
        for obj in (objects.daemon_template, objects.daemon_set, objects.workload_template):
            obj = copy.deepcopy(obj)
            obj["metadata"].pop("finalizers")
            obj["metadata"]["labels"] = {"bench": "floor"}  # invisible to the controller
            raw.create(DS if obj["kind"] == "DaemonSet" else RCTS, obj)
        cd["status"] = {"status": constants.STATUS_READY}
        raw.update_status(CDS, cd)

    t0 = time.perf_counter()
    run_parallel(workers, one, range(n))
    elapsed = time.perf_counter() - t0

    def release(obj: dict) -> None:
        obj["metadata"]["finalizers"] = []
        raw.update(CDS, obj)

    run_parallel(workers, release, raw.list(CDS, ns)["items"])
    for name in (ns, driver_ns):
        raw.delete(RESOURCES["namespaces"], name)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (
            raw.get_or_none(RESOURCES["namespaces"], ns)
            or raw.get_or_none(RESOURCES["namespaces"], driver_ns)):
        time.sleep(0.2)
    return elapsed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[str, float]:
    """Prometheus text -> {sample with labels: value}."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def writes(metrics: dict[str, float], verb: str, resource: str) -> float:
    return metrics.get(
        f'cdriver_controller_api_writes_total{{resource="{resource}",verb="{verb}"}}', 0.0)


def apiserver_requests(raw: RawClient) -> float:
    """Total resource requests the API server has served (all clients)."""
    text = raw.request("GET", "/metrics")
    total = 0.0
    for line in str(text).splitlines():
        if line.startswith("apiserver_request_total{") and not RESOURCE_EMPTY.search(line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def controller_phase(cluster: LocalCluster, n: int, workers: int, log: Path, qps: float) -> dict:
    raw = cluster.raw
    ns, driver_ns = "bench", "bench-drv"
    cluster.create_namespace(ns)
    cluster.create_namespace(driver_ns)
    port = free_port()
    argv = [sys.executable, "-m", "cdriver", "controller", "--kubeconfig", str(cluster.kubeconfig),
            "--namespace", driver_ns, "--workers", str(workers), "--kube-api-qps", str(qps),
            "--http-endpoint", f"127.0.0.1:{port}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"controller did not become healthy; see {log}")
            time.sleep(0.1)
        ps = psutil.Process(proc.pid)
        rss_idle = ps.memory_info().rss / 2**20
        cpu_before = sum(ps.cpu_times()[:2])
        requests_before = apiserver_requests(raw)

        t0 = time.perf_counter()
        run_parallel(workers, lambda i: raw.create(CDS, compute_domain(f"cd-{i}", ns, f"cd-{i}-ch", mode=None), ns),
                     range(n))
        created_s = time.perf_counter() - t0
        while True:
            m = scrape(f"{base}/metrics")
            done = (writes(m, "create", "resourceclaimtemplates") >= 2 * n
                    and writes(m, "create", "daemonsets") >= n
                    and writes(m, "update_status", "computedomains") >= n)
            if done:
                break
            if time.perf_counter() - t0 > 600 or proc.poll() is not None:
                raise SystemExit(f"controller did not finish; see {log}")
            time.sleep(0.1)
        elapsed = time.perf_counter() - t0
        cpu = sum(ps.cpu_times()[:2]) - cpu_before
        requests = apiserver_requests(raw) - requests_before - n  # minus our own creates
        time.sleep(1.0)  # let the tail of watch events settle before measuring memory
        m = scrape(f"{base}/metrics")
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20

        uids = {cd["metadata"]["uid"] for cd in raw.list(CDS, ns)["items"]
                if (cd.get("status") or {}).get("status") == constants.STATUS_READY
                and constants.FINALIZER in cd["metadata"].get("finalizers", [])}
        selector = constants.LABEL_COMPUTE_DOMAIN
        rct_uids = [t["metadata"]["labels"][selector]
                    for t in raw.list(RCTS, label_selector=selector)["items"]]
        ds_uids = [d["metadata"]["labels"][selector]
                   for d in raw.list(DS, driver_ns, label_selector=selector)["items"]]
        if not (len(uids) == n and sorted(rct_uids) == sorted(list(uids) * 2)
                and sorted(ds_uids) == sorted(uids)):
            raise SystemExit(f"verification failed: {len(uids)} ready domains, {len(rct_uids)} "
                             f"templates, {len(ds_uids)} DaemonSets for {n} domains")
        total_writes = sum(v for k, v in m.items()
                           if k.startswith("cdriver_controller_api_writes_total{"))
        return {
            "elapsed_s": elapsed, "create_domains_s": created_s,
            "controller_writes_per_domain": total_writes / n,
            "apiserver_requests_per_domain_all_clients": requests / n,
            "rss_mb": rss, "rss_idle_mb": rss_idle, "controller_cpu_s": cpu,
            "reconciles": {k.split('"')[1]: v for k, v in m.items()
                           if k.startswith("cdriver_controller_reconcile_total{")},
        }
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--domains", type=int, default=500,
                        help="ComputeDomains to create (default 500)")
    parser.add_argument("--workers", type=int, default=4,
                        help="controller workers = raw-floor threads (default 4)")
    parser.add_argument("--kube-api-qps", type=float, default=-1,
                        help="the controller's client-side rate limit (default -1: none, as the floor)")
    parser.add_argument("--json-out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    n, workers = args.domains, args.workers

    binaries = control_plane_binaries()  # build (cold) outside the measurement
    with LocalCluster(binaries=binaries) as cluster:
        install_crds(cluster.raw)
        floor_s = raw_floor(cluster, n, workers)
        log = Path(tempfile.gettempdir()) / f"cdriver-controller-bench-{os.getpid()}.log"
        phase = controller_phase(cluster, n, workers, log, args.kube_api_qps)
        log.unlink(missing_ok=True)
    floor_rate = n * (MIN_WRITES_PER_DOMAIN + 1) / floor_s
    ctl_rate = n * (MIN_WRITES_PER_DOMAIN + 1) / phase["elapsed_s"]
    result = {
        "benchmark": "controller",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "domains": n, "workers": workers, "kube_api_qps": args.kube_api_qps,
        "raw_floor_s": floor_s,
        "raw_floor_writes_per_s": floor_rate,
        "controller_s": phase["elapsed_s"],
        "controller_writes_per_s": ctl_rate,
        "ratio_to_raw": floor_s / phase["elapsed_s"],
        **{k: v for k, v in phase.items() if k != "elapsed_s"},
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")

    rows = [
        (f"raw floor, {n} domains x 6 writes", f"{floor_s:.2f} s ({floor_rate:.0f} writes/s)"),
        (f"controller, {n} domains to all objects", f"{phase['elapsed_s']:.2f} s "
         f"({ctl_rate:.0f} writes/s; creating the domains alone {phase['create_domains_s']:.2f} s)"),
        ("ratio to raw floor (goal >= 0.8)", f"{result['ratio_to_raw']:.2f}"),
        ("controller API writes per domain (min 5)",
         f"{phase['controller_writes_per_domain']:.2f}"),
        ("API server requests per domain, all clients",
         f"{phase['apiserver_requests_per_domain_all_clients']:.2f}"),
        (f"controller RSS at {n} domains", f"{phase['rss_mb']:.0f} MB "
         f"(idle {phase['rss_idle_mb']:.0f} MB)"),
        ("controller CPU during the run", f"{phase['controller_cpu_s']:.1f} s"),
        ("reconciles", ", ".join(f"{k} {v:.0f}" for k, v in sorted(phase["reconciles"].items()))),
    ]
    print_rows(rows, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
