"""Benchmark: the kubelet plugin's Prepare/Unprepare path on a ready simulated node.

Starts a local control plane, a simulated node (Node object, driver root with mock NVML and
real channel devices) and `cdriver kubelet-plugin` as its own process, then acts as kubelet:

- Prepare and Unprepare latency of a channel claim whose ComputeDomain is already Ready on
  the node (its daemon runs there, so the node carries the domain label; p50/p99, goal p99
  <= 10 ms), next to a raw-client baseline: one GET of the claim from this process, the API
  round trip every Prepare needs; and the first Prepare of a domain on the node (label write);
- readiness-to-success: a Prepare waits for the node's clique entry; the time from writing
  the entry Ready to the Prepare answer (goal <= 200 ms);
- Kubernetes API requests per Prepare and per Unprepare (from the plugin's own counter);
- the plugin process's resident memory after the run (goal <= 60 MB).

Prints a table and one JSON line (also written to --json-out if given).

    python bench/prepare.py [--iterations 200] [--wakeups 10] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
import psutil
import yaml

from cdriver.api.constants import (
    API_VERSION,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    LABEL_COMPUTE_DOMAIN,
    clique_object_name,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.checkout import CRD_DIR
from cdriver.dra.gen.dra.v1 import api_pb2 as dra_pb2
from cdriver.dra.gen.dra.v1 import api_pb2_grpc as dra_grpc
from cdriver.dra.gen.pluginregistration.v1 import api_pb2 as reg_pb2
from cdriver.dra.gen.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.config import DRA_SOCKET_NAME, REGISTRATION_SOCKET_NAME
from cdriver.sim.world.scenario import compute_domain

CDS, CLIQUES, CLAIMS = COMPUTE_DOMAINS, COMPUTE_DOMAIN_CLIQUES, RESOURCES["resourceclaims"]
NODES = RESOURCES["nodes"]
CLUSTER_UUID = "00000000-0000-0000-0000-0000000000be"
CLIQUE = f"{CLUSTER_UUID}.0"
GOALS = {"prepare_p99_ms": 10.0, "readiness_to_success_ms": 200.0, "plugin_rss_mb": 60.0}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def wait_for(what: str, fn, timeout: float, interval: float = 0.02):
    """Poll `fn` until truthy (the argument order of `scenario.wait_for`); exit naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(interval)


class Bench:
    def __init__(self, work: Path, iterations: int, wakeups: int) -> None:
        self.work = work
        self.iterations = iterations
        self.wakeups = wakeups
        self.cluster = None
        self.plugin: subprocess.Popen | None = None

    # -- set-up ------------------------------------------------------------------------------
    def start(self) -> None:
        from cdriver.sim.controlplane.binaries import control_plane_binaries
        from cdriver.sim.controlplane.cluster import LocalCluster, free_port
        from cdriver.sim.gpu.driver_root import create_driver_root
        from cdriver.sim.node.registration import register_node

        self.cluster = LocalCluster(run_dir=self.work / "cluster", binaries=control_plane_binaries())
        self.cluster.start()
        self.raw: RawClient = self.cluster.raw
        for path in sorted(CRD_DIR.glob("*.yaml")):
            self.raw.create(RESOURCES["customresourcedefinitions"], yaml.safe_load(path.read_text()))
        wait_for("the ComputeDomain CRDs", self._crds_served, 30)
        self.ns, self.driver_ns = "bench", "bench-driver"
        self.cluster.create_namespace(self.ns)
        self.cluster.create_namespace(self.driver_ns)
        self.node = f"bench-{uuid.uuid4().hex[:6]}"
        topology = self.work / "topology.yaml"
        topology.write_text(yaml.safe_dump({"version": 1, "domains": [
            {"uuid": CLUSTER_UUID, "cliques": [{"id": 0, "nodes": [self.node]}]}]}))
        self.root = create_driver_root(self.work / "root", self.node, topology, channel_count=4)
        self.registered = register_node(self.raw, self.node)
        self.metrics_port = free_port()
        self.plugin_dir = self.work / "plugins" / DRIVER_NAME
        self.reg_socket = self.work / "registry" / REGISTRATION_SOCKET_NAME
        argv = [sys.executable, "-m", "cdriver", "kubelet-plugin", "--node-name", self.node,
                "--namespace", self.driver_ns, "--kubeconfig", str(self.cluster.kubeconfig),
                "--nvidia-driver-root", str(self.root.root),
                "--kubelet-plugins-directory-path", str(self.work / "plugins"),
                "--kubelet-registrar-directory-path", str(self.work / "registry"),
                "--cdi-root", str(self.work / "cdi"), "--http-endpoint", f"127.0.0.1:{self.metrics_port}"]
        self.log = open(self.work / "plugin.log", "wb")  # noqa: SIM115 - closed in stop()
        self.plugin = subprocess.Popen(argv, env=self.root.process_env(), stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("the plugin's registration socket", self._registered, 60)
        self.channel = grpc.insecure_channel(f"unix://{self.plugin_dir / DRA_SOCKET_NAME}")
        self.stub = dra_grpc.DRAPluginStub(self.channel)

    def _crds_served(self) -> bool:
        try:
            self.raw.list(CDS, "default")
            self.raw.list(CLIQUES, "default")
            return True
        except ApiError:
            return False

    def _registered(self) -> bool:
        if self.plugin is not None and self.plugin.poll() is not None:
            raise SystemExit(f"bench: plugin exited; see {self.work / 'plugin.log'}")
        if not self.reg_socket.exists():
            return False
        try:
            with grpc.insecure_channel(f"unix://{self.reg_socket}") as ch:
                reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=1)
            return True
        except grpc.RpcError:
            return False

    def stop(self) -> None:
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.send_signal(signal.SIGTERM)
            try:
                self.plugin.wait(15)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
        if self.cluster is not None:
            self.cluster.stop()

    # -- objects -----------------------------------------------------------------------------
    def make_cd(self) -> dict:
        name = f"cd-{uuid.uuid4().hex[:6]}"
        return self.raw.create(CDS, compute_domain(name, self.ns, name, mode=None), self.ns)

    def set_clique(self, cd: dict, status: str) -> None:
        name = clique_object_name(cd["metadata"]["uid"], CLIQUE)
        daemons = [{"nodeName": self.node, "ipAddress": "127.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": status}]
        existing = self.raw.get_or_none(CLIQUES, name, self.driver_ns)
        if existing is None:
            self.raw.create(CLIQUES, {"apiVersion": API_VERSION, "kind": KIND_COMPUTE_DOMAIN_CLIQUE,
                                      "metadata": {"name": name, "namespace": self.driver_ns}, "daemons": daemons},
                            self.driver_ns)
        else:
            existing["daemons"] = daemons
            self.raw.update(CLIQUES, existing, self.driver_ns)

    def make_claim(self, cd: dict) -> dict:
        params = {"apiVersion": API_VERSION, "kind": KIND_CHANNEL_CONFIG, "domainID": cd["metadata"]["uid"],
                  "allocationMode": "Single"}
        config = [{"requests": ["channel"], "opaque": {"driver": DRIVER_NAME, "parameters": params}}]
        claim = self.raw.create(CLAIMS, {
            "metadata": {"name": f"c-{uuid.uuid4().hex[:8]}", "namespace": self.ns},
            "spec": {"devices": {"requests": [{"name": "channel", "exactly": {
                "deviceClassName": DEVICE_CLASS_DEFAULT_CHANNEL}}], "config": config}}}, self.ns)
        claim["status"] = {"allocation": {"devices": {
            "results": [{"request": "channel", "driver": DRIVER_NAME, "pool": self.node, "device": "channel-0"}],
            "config": [{"source": "FromClaim", **config[0]}]}}}
        return self.raw.update_status(CLAIMS, claim, self.ns)

    def ref(self, claim: dict) -> dra_pb2.Claim:
        m = claim["metadata"]
        return dra_pb2.Claim(namespace=m["namespace"], name=m["name"], uid=m["uid"])

    def prepare(self, claim: dict) -> tuple[float, str]:
        t = time.perf_counter()
        resp = self.stub.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest(claims=[self.ref(claim)]), timeout=45)
        return time.perf_counter() - t, resp.claims[claim["metadata"]["uid"]].error

    def unprepare(self, claim: dict) -> tuple[float, str]:
        t = time.perf_counter()
        resp = self.stub.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest(claims=[self.ref(claim)]),
                                                timeout=45)
        return time.perf_counter() - t, resp.claims[claim["metadata"]["uid"]].error

    def api_requests(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("cdriver_kubelet_plugin_api_requests_total{"):
                verb = line.split('verb="', 1)[1].split('"', 1)[0]
                out[verb] = float(line.rsplit(" ", 1)[1])
        return out

    # -- measurements ---------------------------------------------------------------------------
    def label_node(self, cd: dict) -> None:
        self.raw.patch(NODES, self.node, {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: cd["metadata"]["uid"]}}})

    def cycle(self, claim: dict) -> tuple[float, float, float, float]:
        """Prepare + Unprepare one claim: (prepare s, unprepare s, API requests of each)."""
        before = self.api_requests()
        prep = self.prepare(claim)
        self._check(prep, "prepare")
        middle = self.api_requests()
        unprep = self.unprepare(claim)
        self._check(unprep, "unprepare")
        after = self.api_requests()
        return prep[0], unprep[0], _requests(middle) - _requests(before), _requests(after) - _requests(middle)

    def run(self) -> dict:
        cd = self.make_cd()
        self.set_clique(cd, "Ready")
        claims = [self.make_claim(cd) for _ in range(2 * self.iterations + 5)]
        for claim in claims[:5]:  # warm-up: caches, imports, connections
            self._check(self.prepare(claim), "warm-up prepare")
            self._check(self.unprepare(claim), "warm-up unprepare")
        ready, cold = claims[5:5 + self.iterations], claims[5 + self.iterations:]
        # Ready node: the domain's daemon runs here, so the node already carries the domain
        # label (as on kubelet's retry after the daemon became Ready).
        warm_runs, baseline = [], []
        for claim in ready:
            self.label_node(cd)
            t = time.perf_counter()
            self.raw.get(CLAIMS, claim["metadata"]["name"], self.ns)
            baseline.append(time.perf_counter() - t)
            warm_runs.append(self.cycle(claim))
        # First Prepare of the domain on the node: the label is written too.
        cold_runs = [self.cycle(claim) for claim in cold]
        wake = [self._wakeup() for _ in range(self.wakeups)]
        proc = psutil.Process(self.plugin.pid)
        rss = proc.memory_info().rss
        full = proc.memory_full_info()
        ms = 1000.0

        def col(runs: list, i: int) -> list[float]:
            return [r[i] for r in runs]

        return {
            "iterations": self.iterations,
            "prepare_p50_ms": percentile(col(warm_runs, 0), 50) * ms,
            "prepare_p99_ms": percentile(col(warm_runs, 0), 99) * ms,
            "api_requests_per_prepare": statistics.mean(col(warm_runs, 2)),
            "unprepare_p50_ms": percentile(col(warm_runs, 1), 50) * ms,
            "unprepare_p99_ms": percentile(col(warm_runs, 1), 99) * ms,
            "api_requests_per_unprepare": statistics.mean(col(warm_runs, 3)),
            "baseline_get_claim_p50_ms": percentile(baseline, 50) * ms,
            "baseline_get_claim_p99_ms": percentile(baseline, 99) * ms,
            "first_prepare_p50_ms": percentile(col(cold_runs, 0), 50) * ms,
            "first_prepare_p99_ms": percentile(col(cold_runs, 0), 99) * ms,
            "api_requests_per_first_prepare": statistics.mean(col(cold_runs, 2)),
            "readiness_to_success_ms": statistics.median(wake) * ms,
            "readiness_to_success_max_ms": max(wake) * ms,
            "plugin_rss_mb": rss / 2**20,
            "plugin_uss_mb": full.uss / 2**20,
            "plugin_threads": proc.num_threads(),
        }

    def _wakeup(self) -> float:
        cd = self.make_cd()
        self.set_clique(cd, "NotReady")
        claim = self.make_claim(cd)
        answer: dict = {}

        def call() -> None:
            answer["result"] = self.prepare(claim)
            answer["at"] = time.perf_counter()

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.3)  # the Prepare is now waiting for the clique entry
        marked = time.perf_counter()
        self.set_clique(cd, "Ready")
        t.join(45)
        self._check(answer["result"], "waiting prepare")
        self._check(self.unprepare(claim), "unprepare after wake-up")
        return answer["at"] - marked

    @staticmethod
    def _check(result: tuple[float, str], what: str) -> None:
        if result[1]:
            raise SystemExit(f"bench: {what} failed: {result[1]}")


def _requests(counts: dict[str, float]) -> float:
    return sum(v for verb, v in counts.items() if verb != "watch")


def table(results: dict) -> str:
    rows = [
        ("Prepare, ready node p50 / p99", f"{results['prepare_p50_ms']:.2f} / {results['prepare_p99_ms']:.2f} ms",
         f"p99 <= {GOALS['prepare_p99_ms']:.0f} ms"),
        ("Unprepare p50 / p99", f"{results['unprepare_p50_ms']:.2f} / {results['unprepare_p99_ms']:.2f} ms", ""),
        ("baseline: GET claim p50 / p99",
         f"{results['baseline_get_claim_p50_ms']:.2f} / {results['baseline_get_claim_p99_ms']:.2f} ms", ""),
        ("first Prepare (writes label) p50 / p99",
         f"{results['first_prepare_p50_ms']:.2f} / {results['first_prepare_p99_ms']:.2f} ms", ""),
        ("readiness-to-success median / max",
         f"{results['readiness_to_success_ms']:.1f} / {results['readiness_to_success_max_ms']:.1f} ms",
         f"<= {GOALS['readiness_to_success_ms']:.0f} ms"),
        ("API requests per Prepare / Unprepare / first Prepare",
         f"{results['api_requests_per_prepare']:.2f} / {results['api_requests_per_unprepare']:.2f} / "
         f"{results['api_requests_per_first_prepare']:.2f}", ""),
        ("plugin RSS (USS, threads)",
         f"{results['plugin_rss_mb']:.1f} MB ({results['plugin_uss_mb']:.1f} MB, {results['plugin_threads']})",
         f"<= {GOALS['plugin_rss_mb']:.0f} MB"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'metric'.ljust(width)}  {'value':<28}  goal", "-" * (width + 42)]
    lines += [f"{name.ljust(width)}  {value:<28}  {goal}" for name, value, goal in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--wakeups", type=int, default=10)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cdb-", dir="/tmp"))  # short: Unix socket paths are limited
    bench = Bench(work, args.iterations, args.wakeups)
    try:
        bench.start()
        results = bench.run()
    finally:
        bench.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    line = json.dumps({"bench": "prepare", **{k: round(v, 3) if isinstance(v, float) else v
                                              for k, v in results.items()}})
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
