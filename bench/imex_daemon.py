"""Benchmark: `cdriver imex-daemon` start to clique entry Ready, and the daemon's memory.

Starts a local control plane with the driver's CRDs and a simulated driver root (IMEX
stand-ins), then per iteration: a fresh ComputeDomain UID (so a fresh clique), a Pod object
on a test Node whose Ready condition is already True (the kubelet's probe cadence is not the
daemon's to measure), and the daemon as its own process with the CDI-style environment.
A watch on the clique timestamps:

- join: daemon start -> its entry appears (NotReady, index assigned);
- ready: daemon start -> its entry turns Ready (nvidia-imex started and answered READY);
- stop: SIGTERM -> process exit (nvidia-imex stopped, entry removed).

Baselines from the same run, the floor the daemon builds on:

- cli start: `python -m cdriver version` (interpreter + CLI import);
- stand-in start: spawn `nvidia-imex -c <the daemon's config>` -> its command port accepts;
- ctl probe: one `nvidia-imex-ctl -q` against a ready stand-in;
- raw API: create + update of a clique object with a plain RawClient (two round trips).

Goals: ready < 1 s and dominated by the stand-in's own start; daemon RSS <= 50 MB.
Prints a table and writes JSON to bench/results/imex_daemon.json (or --json-out).

    python bench/imex_daemon.py [--iterations 5] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import yaml
from report import print_rows  # bench/report.py (scripts run from bench/)

from cdriver.api.constants import (
    API_VERSION,
    ENV_CD_NAME,
    ENV_CD_NAMESPACE,
    ENV_CD_UUID,
    ENV_CLIQUE_ID,
    ENV_MAX_NODES,
    ENV_NODE_NAME,
    ENV_POD_IP,
    ENV_POD_NAME,
    ENV_POD_NAMESPACE,
    ENV_POD_UID,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    STATUS_READY,
    clique_object_name,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES
from cdriver.checkout import CRD_DIR
from cdriver.imex import config as imex_config
from cdriver.imex.config import IMEX_CMD_PORT, IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_TEMPLATE_NAME
from cdriver.kube.resources import RESOURCES
from cdriver.roles.imex_daemon.cli import ENV_IMEX_HOSTS_FILE, ENV_IMEXD_DIR
from cdriver.sim.controlplane.binaries import control_plane_binaries
from cdriver.sim.controlplane.cluster import LocalCluster
from cdriver.sim.gpu.driver_root import create_driver_root
from cdriver.sim.imex.protocol import ENV_SIM_HOSTS_FILE
from cdriver.sim.node.registration import register_node

RESULTS = Path(__file__).resolve().parent / "results" / "imex_daemon.json"
PODS, CLIQUES, CRDS = RESOURCES["pods"], COMPUTE_DOMAIN_CLIQUES, RESOURCES["customresourcedefinitions"]
CLIQUE = "00000000-0000-0000-0000-0000000000ab.0"
NS = "bench-imex"


def install_crds(raw) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        raw.create(CRDS, body)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            raw.list(CLIQUES, NS)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit("ComputeDomainClique CRD not served after 30 s")


class Watcher(threading.Thread):
    """Records when the node's entry first appears and when it first turns Ready."""

    def __init__(self, raw, name: str, node: str) -> None:
        super().__init__(daemon=True)
        self.raw, self.name, self.node = raw, name, node
        self.joined: float | None = None
        self.ready: float | None = None
        self.done = threading.Event()
        self.stream = raw.watch(CLIQUES, NS, field_selector=f"metadata.name={name}", timeout_seconds=60)

    def run(self) -> None:
        for _etype, obj in self.stream:
            now = time.perf_counter()
            for entry in obj.get("daemons") or []:
                if entry.get("nodeName") != self.node:
                    continue
                if self.joined is None:
                    self.joined = now
                if entry.get("status") == STATUS_READY and self.ready is None:
                    self.ready = now
                    self.done.set()
                    self.stream.close()
                    return


def make_pod(raw, node: str, ip: str) -> dict:
    pod = raw.create(PODS, {
        "metadata": {"name": f"computedomain-daemon-{uuid.uuid4().hex[:10]}"},
        "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "compute-domain-daemon", "image": "cdriver:bench"}]},
    }, NS)
    raw.patch(PODS, pod["metadata"]["name"], {"status": {
        "phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}},
        NS, subresource="status")
    return pod


def daemon_env(cluster, bin_dir: Path, home: Path, pod: dict, node: str, ip: str, cd_uid: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        ENV_CLIQUE_ID: CLIQUE, ENV_CD_UUID: cd_uid, ENV_CD_NAME: "bench", ENV_CD_NAMESPACE: NS,
        ENV_NODE_NAME: node, ENV_POD_IP: ip, ENV_POD_NAME: pod["metadata"]["name"],
        ENV_POD_NAMESPACE: NS, ENV_POD_UID: pod["metadata"]["uid"], ENV_MAX_NODES: "18",
        ENV_IMEXD_DIR: str(home / "imexd"), ENV_IMEX_HOSTS_FILE: str(home / "hosts"),
        ENV_SIM_HOSTS_FILE: str(home / "hosts"), "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{bin_dir}:{env.get('PATH', '')}",
    })
    return env


def one_run(cluster, raw, bin_dir: Path, tmp: Path, node: str, ip: str) -> dict:
    cd_uid = str(uuid.uuid4())
    home = tmp / cd_uid
    (home / "imexd").mkdir(parents=True)
    (home / "imexd" / IMEXD_TEMPLATE_NAME).write_text(imex_config.load_template())
    (home / "hosts").write_text("127.0.0.1\tlocalhost\n")
    pod = make_pod(raw, node, ip)
    watcher = Watcher(raw, clique_object_name(cd_uid, CLIQUE), node)
    watcher.start()
    env = daemon_env(cluster, bin_dir, home, pod, node, ip, cd_uid)
    log = open(home / "daemon.log", "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cdriver", "imex-daemon", "run"], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not watcher.done.wait(30):
            raise SystemExit(f"entry not Ready within 30 s; daemon log:\n{(home / 'daemon.log').read_text()[-3000:]}")
        time.sleep(1.0)  # settle: measure memory of the steady state
        rss = psutil.Process(proc.pid).memory_info().rss
        t1 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        stop_s = time.perf_counter() - t1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return {"join_s": watcher.joined - t0, "ready_s": watcher.ready - t0, "stop_s": stop_s,
            "rss_mb": rss / 2**20, "config": str(home / "imexd" / "imexd.cfg"), "env": env}


def standin_start(bin_dir: Path, config: str, env: dict[str, str], ip: str) -> tuple[float, float]:
    """(spawn -> command port accepts, one `nvidia-imex-ctl -q`) for the stand-in alone."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(bin_dir / IMEX_DAEMON_BINARY), "-c", config], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                socket.create_connection((ip, IMEX_CMD_PORT), timeout=0.2).close()
                break
            except OSError:
                if time.perf_counter() - t0 > 30:
                    raise SystemExit("stand-in did not listen within 30 s") from None
                time.sleep(0.005)
        listen = time.perf_counter() - t0
        t1 = time.perf_counter()
        out = subprocess.run([str(bin_dir / IMEX_CTL_BINARY), "-c", config, "-q"], env=env,
                             capture_output=True, text=True)
        probe = time.perf_counter() - t1
        if out.stdout != "READY\n":
            raise SystemExit(f"stand-in not READY: {out.stdout!r} {out.stderr!r}")
    finally:
        proc.terminate()
        proc.wait(10)
    return listen, probe


def raw_baseline(raw, n: int = 20) -> float:
    """Median seconds of create + update of a clique with a plain client."""
    times = []
    for _ in range(n):
        body = {"apiVersion": API_VERSION, "kind": KIND_COMPUTE_DOMAIN_CLIQUE,
                "metadata": {"name": f"baseline-{uuid.uuid4().hex[:8]}.{CLIQUE}"}}
        t0 = time.perf_counter()
        obj = raw.create(CLIQUES, body, NS)
        obj["daemons"] = [{"nodeName": "n", "ipAddress": "127.0.0.1", "cliqueID": CLIQUE, "index": 0,
                           "status": STATUS_READY}]
        raw.update(CLIQUES, obj, NS)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cli_start(n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cdriver", "version"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def summary(values: list[float]) -> dict:
    return {"runs": [round(v, 4) for v in values], "median": statistics.median(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5, help="daemon starts to time (default 5)")
    parser.add_argument("--json-out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    control_plane_binaries()  # build (cold) outside the measurement
    ip = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"
    with tempfile.TemporaryDirectory(prefix="cdriver-bench-imex-") as tmpdir, LocalCluster() as cluster:
        tmp = Path(tmpdir)
        raw = cluster.raw
        cluster.create_namespace(NS)
        install_crds(raw)
        bin_dir = create_driver_root(tmp / "driver-root", "bench-node", None, fabric_state="not_supported").bin_dir
        node = register_node(raw, "bench-node", wait=False)
        try:
            one_run(cluster, raw, bin_dir, tmp, "bench-node", ip)  # warm-up: page cache, API caches
            runs = [one_run(cluster, raw, bin_dir, tmp, "bench-node", ip) for _ in range(args.iterations)]
            listen, probe = zip(*(standin_start(bin_dir, runs[-1]["config"], runs[-1]["env"], ip)
                                  for _ in range(3)), strict=True)
            baseline = raw_baseline(raw)
        finally:
            node.delete()
    cli = cli_start()
    result = {
        "benchmark": "imex_daemon",
        "python": platform.python_version(),
        "iterations": args.iterations,
        "daemon_join_s": summary([r["join_s"] for r in runs]),
        "daemon_ready_s": summary([r["ready_s"] for r in runs]),
        "daemon_stop_s": summary([r["stop_s"] for r in runs]),
        "daemon_rss_mb": summary([r["rss_mb"] for r in runs]),
        "baseline_cli_start_s": cli,
        "baseline_standin_listen_s": summary(list(listen)),
        "baseline_ctl_probe_s": summary(list(probe)),
        "baseline_raw_create_update_s": baseline,
        "goals": {"daemon_ready_s": 1.0, "daemon_rss_mb": 50},
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")

    rows = [
        ("daemon start -> entry joined (median)", f"{result['daemon_join_s']['median']:.3f} s"),
        ("daemon start -> entry Ready (median)", f"{result['daemon_ready_s']['median']:.3f} s  (goal < 1 s)"),
        ("daemon start -> entry Ready (max)", f"{result['daemon_ready_s']['max']:.3f} s"),
        ("SIGTERM -> exit, entry removed (median)", f"{result['daemon_stop_s']['median']:.3f} s"),
        ("daemon RSS when Ready (max)", f"{result['daemon_rss_mb']['max']:.1f} MB  (goal <= 50 MB)"),
        ("baseline: cdriver CLI start", f"{cli:.3f} s"),
        ("baseline: stand-in spawn -> listening", f"{result['baseline_standin_listen_s']['median']:.3f} s"),
        ("baseline: one nvidia-imex-ctl -q", f"{result['baseline_ctl_probe_s']['median']:.3f} s"),
        ("baseline: raw create+update clique", f"{baseline * 1000:.1f} ms"),
    ]
    print_rows(rows, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
