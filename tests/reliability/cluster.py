"""The reliability suite's simulated cluster: snapshots, role processes to kill, domain cycles.

Effects live here (API calls, files, signals); the checks are the pure functions in
`tests.reliability.invariants`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from cdriver.api import constants
from cdriver.cdi.writer import claim_spec_name, list_specs
from cdriver.checkpoint import decode
from cdriver.diagnose.collect import SOURCES, CollectError, Collector
from cdriver.diagnose.snapshot import Snapshot
from cdriver.imex.config import IMEX_DAEMON_BINARY
from cdriver.kube.errors import ApiError
from cdriver.roles.kubelet_plugin.config import CHECKPOINT_FILE_NAME, PLUGIN_DOMAINS_DIR_NAME
from cdriver.sim.controlplane.cluster import APISERVER, ETCD, ClusterError
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.world import scenario
from cdriver.sim.world.world import DRIVER_NAMESPACE, SimWorld
from tests.reliability import inside
from tests.reliability.invariants import INVARIANTS, Check, violations

CDI_ROOT = "/var/run/cdi"  # the chart's kubeletPlugin.cdiRoot
PLUGIN_ROLE, CONTROLLER_ROLE, DAEMON_ROLE, IMEX_ROLE = "kubelet-plugin", "controller", "imex-daemon", "nvidia-imex"
NODE_ROLES = (PLUGIN_ROLE, CONTROLLER_ROLE, DAEMON_ROLE, IMEX_ROLE)
CONTROL_PLANE = (APISERVER, ETCD)


# -- snapshots ----------------------------------------------------------------------------------
def node_files(world: SimWorld) -> dict[str, dict[str, Any]]:
    """What each node's kubelet plugin keeps on disk (see `invariants` for the shape)."""
    out: dict[str, dict[str, Any]] = {}
    for node in world.nodes:
        layout: NodeLayout = node.agent.layout
        plugin_dir = layout.plugins_dir / constants.DRIVER_NAME
        files: dict[str, Any] = {}
        try:
            data = (plugin_dir / CHECKPOINT_FILE_NAME).read_bytes()
            files["checkpoint"] = {uid: rec.to_dict() for uid, rec in decode(data).claims.items()}
        except FileNotFoundError:
            files["checkpoint"] = {}
        except Exception as exc:  # noqa: BLE001 - recorded as a violation
            files["checkpointError"] = str(exc)
        prefix = claim_spec_name("x")[:-1]
        cdi_dir = layout.host_path(CDI_ROOT)
        specs = list_specs(cdi_dir) if cdi_dir.is_dir() else []
        files["cdiClaims"] = sorted(s[len(prefix):] for s in specs if s.startswith(prefix))
        domains = plugin_dir / PLUGIN_DOMAINS_DIR_NAME
        files["domainDirs"] = sorted(p.name for p in domains.iterdir()) if domains.is_dir() else []
        out[node.name] = files
    return out


def snapshot(world: SimWorld) -> dict[str, Any]:
    """The API objects the invariants read (cluster-wide) and every node's files."""
    collector = Collector(world.raw)
    for kind in SOURCES:
        if kind != "events":
            collector.list(kind)
    data = collector.data
    data["driverNamespace"] = DRIVER_NAMESPACE
    data["nodeFiles"] = node_files(world)
    return data


@dataclass
class ExecCounts:
    """How many containers `look_inside` read, and the seconds it spent reading them."""

    workloads: int = 0
    daemons: int = 0
    seconds: float = 0.0

    def count(self, workloads: int, daemons: int, seconds: float) -> None:
        self.workloads += workloads
        self.daemons += daemons
        self.seconds += seconds

    def since(self, before: ExecCounts) -> dict[str, float]:
        """What was read after `before` (a copy taken earlier), as figures."""
        return {"workload_execs": self.workloads - before.workloads, "daemon_execs": self.daemons - before.daemons,
                "exec_s": round(self.seconds - before.seconds, 1)}


#: Every read of this test session.
EXECS = ExecCounts()
#: How long one exec into a container may take.
EXEC_TIMEOUT = 30.0


def look_inside(world: SimWorld, data: dict[str, Any]) -> None:
    """Exec into the containers `inside.probes` names, as a user would (kubectl exec), and add
    what they show to `data` (``inPods``: the channels a workload sees; ``imexDomains``: the
    domain its IMEX daemon reports)."""
    wanted = inside.probes(Snapshot(data))
    started = time.monotonic()

    def run(ns: str, pod: str, argv: list[str]) -> tuple[int, str]:
        try:
            out = world.exec(ns, pod, argv, timeout=EXEC_TIMEOUT)
            return out.returncode, out.stdout + out.stderr
        except (subprocess.TimeoutExpired, OSError) as exc:
            return 124, str(exc)

    with ThreadPoolExecutor(max_workers=4) as pool:
        channels = {inside.key(ns, n): pool.submit(run, ns, n, inside.LIST_CHANNELS) for ns, n in wanted.workloads}
        domains = {inside.key(ns, n): pool.submit(run, ns, n, inside.QUERY_DOMAIN) for ns, n in wanted.daemons}
        data["inPods"] = {k: inside.parse_channel_listing(*f.result()) for k, f in channels.items()}
        data["imexDomains"] = {k: inside.parse_domain_report(*f.result()) for k, f in domains.items()}
    EXECS.count(len(channels), len(domains), time.monotonic() - started)


def converged(world: SimWorld, what: str, timeout: float, checks: tuple[Check, ...] = INVARIANTS,
              extra: Callable[[dict], list[str]] | None = None,
              in_containers: tuple[Check, ...] = inside.INSIDE) -> list[str]:
    """Wait until the invariants hold (and, once they do, what the containers show agrees); the
    violations still seen at the deadline ([] = converged)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            data = snapshot(world)
            found = violations(data, checks) + (extra(data) if extra else [])
            if not found and in_containers:
                look_inside(world, data)
                found = violations(data, in_containers)
        except (CollectError, ApiError, OSError) as exc:  # the API server may be restarting
            found = [f"cannot read the cluster: {exc}"]
        if not found or time.monotonic() > deadline:
            if found:
                print(f"not converged ({what}) after {timeout:.0f} s:\n  " + "\n  ".join(found[:20]))
            return found
        time.sleep(0.5)


# -- role processes -----------------------------------------------------------------------------
def driver_pods(world: SimWorld, component: str = "", domain: str = "") -> list[dict]:
    selector = (f"app.kubernetes.io/component={component}" if component
                else f"{constants.LABEL_COMPUTE_DOMAIN}={domain}")
    return world.raw.list(scenario.PODS, DRIVER_NAMESPACE, label_selector=selector)["items"]


def container_process(world: SimWorld, pod: dict) -> psutil.Process | None:
    """The main process (the role's own, not the container's launcher) of the pod's first container."""
    node = pod["spec"].get("nodeName")
    if not node:
        return None
    try:
        pid = world.node(node).agent.container_main_pid(DRIVER_NAMESPACE, pod["metadata"]["name"],
                                                        pod["spec"]["containers"][0]["name"])
        return psutil.Process(pid) if pid else None
    except Exception:  # noqa: BLE001 - the pod is not (yet) running there
        return None


def role_process(world: SimWorld, role: str, domain: str, nodes: list[str]) -> tuple[psutil.Process, str] | None:
    """The live process of `role` that serves `domain` on one of `nodes`, and its node, if there is one now."""
    if role == PLUGIN_ROLE:
        pods = [p for p in driver_pods(world, component="kubelet-plugin") if p["spec"].get("nodeName") in nodes]
    elif role == CONTROLLER_ROLE:
        pods = driver_pods(world, component="controller")
    else:
        pods = [p for p in driver_pods(world, domain=domain) if p["spec"].get("nodeName") in nodes]
    for pod in pods:
        proc = container_process(world, pod)
        if proc is None:
            continue
        if role != IMEX_ROLE:
            return proc, pod["spec"]["nodeName"]
        try:
            imex = [c for c in proc.children(recursive=True) if c.name() == IMEX_DAEMON_BINARY]
        except psutil.Error:
            continue
        if imex:
            return imex[0], pod["spec"]["nodeName"]
    return None


@dataclass
class Kill:
    """One fault: what to kill, `delay` seconds after the cycle's `anchor` moment (its creation
    or its deletion); when it happened (seconds after creation) and in which phase."""

    role: str
    anchor: str
    delay: float
    done: bool = False
    at: float = 0.0
    phase: str = ""
    pid: int = 0
    node: str = ""
    #: seconds from the kill until the domain ran again (workloads with their channel, its IMEX
    #: domain UP, the role back); None unless the kill hit a live domain and it recovered
    recovered_after: float | None = None


@dataclass
class Cycle:
    """A domain's life: created, its workloads running, deleted; the phase it is in now."""

    name: str
    phase: str = "creating"
    started: float = field(default_factory=time.monotonic)
    uid: str = ""
    moments: dict[str, threading.Event] = field(
        default_factory=lambda: {"create": threading.Event(), "delete": threading.Event()})


#: How long after its moment a kill waits for its process to exist before giving up.
KILL_PATIENCE = 30.0


class Supervisor:
    """Restarts control-plane parts that die, as a service manager would, within a fraction of
    a second. It runs on one thread for the world's whole life: a component runs with
    PR_SET_PDEATHSIG, which fires when the thread that started it ends."""

    def __init__(self, world: SimWorld, interval: float = 0.2) -> None:
        self.world = world
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="control-plane-supervisor")

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.world.cluster.dead_components():
                    self.world.cluster.ensure_healthy()
            except ClusterError as exc:
                print(f"control plane could not be restarted yet: {exc}")


def killer(world: SimWorld, kill: Kill, cycle: Cycle, nodes: list[str], stop: threading.Event) -> threading.Thread:
    """A thread that SIGKILLs `kill.role` at its moment (or as soon after as the process
    exists): a role's process, or kube-apiserver / etcd (restarted by the `Supervisor`)."""
    def run() -> None:
        moment = cycle.moments[kill.anchor]
        while not moment.wait(0.2):
            if stop.is_set():
                return
        if stop.wait(kill.delay):
            return
        give_up = time.monotonic() + KILL_PATIENCE
        while not stop.is_set() and time.monotonic() < give_up:
            kill.phase = cycle.phase
            if kill.role in CONTROL_PLANE:  # the world's Supervisor brings it back
                pid = world.cluster.pid(kill.role)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    kill.done, kill.at, kill.pid = True, time.monotonic() - cycle.started, pid
                    return
            found = role_process(world, kill.role, cycle.uid, nodes)
            if found is not None:
                proc, kill.node = found
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                    kill.done, kill.at, kill.pid = True, time.monotonic() - cycle.started, proc.pid
                    return
                except ProcessLookupError:
                    pass
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True, name=f"kill-{kill.role}")
    thread.start()
    return thread


def role_back(world: SimWorld, kill: Kill, domain: str) -> Callable[[dict], list[str]]:
    """An extra check: the killed process is gone and a new process of its role runs in its place
    (on its node: the kubelet restarted the container, or the daemon restarted nvidia-imex)."""
    def check(_: dict) -> list[str]:
        if not kill.done:
            return []
        if kill.role in CONTROL_PLANE:
            now = world.cluster.pid(kill.role)
            return [] if now and now != kill.pid else [f"{kill.role} does not run again (killed pid {kill.pid})"]
        found = role_process(world, kill.role, domain, [kill.node])
        if found is None or found[0].pid == kill.pid:
            return [f"{kill.role} does not run again on {kill.node or 'its node'} (killed pid {kill.pid})"]
        return []
    return check


def all_of(*checks: Callable[[dict], list[str]]) -> Callable[[dict], list[str]]:
    """One extra check made of several."""
    return lambda data: [line for check in checks for line in check(data)]


# -- a domain's life ----------------------------------------------------------------------------
def clique_nodes(world: SimWorld, clique: str) -> list[str]:
    return sorted(n.name for n in world.nodes if n.clique == clique)


def cliques(world: SimWorld) -> list[str]:
    return sorted({n.clique for n in world.nodes if n.clique})


def start_domain(world: SimWorld, ns: str, name: str, clique: str, pods: int = 2) -> str:
    """Create a ComputeDomain and `pods` workload pods on distinct nodes of `clique`; its uid."""
    cd = create_retrying(world, scenario.CDS, scenario.compute_domain(name, ns, f"{name}-channel"), ns)
    for i in range(pods):
        pod = scenario.workload_pod(f"{name}-w{i}", ns, f"{name}-channel", clique=clique, group=f"{ns}-{name}")
        create_retrying(world, scenario.PODS, pod, ns)
    return str(cd["metadata"]["uid"])


def create_retrying(world: SimWorld, resource: Any, body: dict, ns: str, timeout: float = 60) -> dict:
    """Create (or find, after a lost answer), retrying while the API server is away."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return world.raw.create(resource, body, ns)
        except ApiError as exc:
            if exc.already_exists:
                return world.raw.get(resource, body["metadata"]["name"], ns)
            if not exc.unavailable or time.monotonic() > deadline:
                raise
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def pods_running(world: SimWorld, ns: str, names: list[str]) -> Callable[[dict], list[str]]:
    """An extra check: the named pods exist and are Running and Ready."""
    def check(data: dict) -> list[str]:
        pods = {p["metadata"]["name"]: p for p in data.get("pods") or [] if p["metadata"]["namespace"] == ns}
        return [f"pod {ns}/{n} is not running: {json.dumps((pods.get(n) or {}).get('status', {}).get('phase'))}"
                for n in names if not (pods.get(n) and scenario.pod_phase(pods[n]) == "Running"
                                       and scenario.pod_ready(pods[n]))]
    return check


def delete_domain(world: SimWorld, ns: str, name: str, pods: int = 2) -> None:
    for i in range(pods):
        delete_quietly(world, scenario.PODS, f"{name}-w{i}", ns)
    delete_quietly(world, scenario.CDS, name, ns)


def delete_quietly(world: SimWorld, resource: Any, name: str, ns: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            world.raw.delete(resource, name, ns)
            return
        except ApiError as exc:
            if exc.not_found:
                return
            if time.monotonic() > deadline:
                raise
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def gone(world: SimWorld, ns: str, names: list[str]) -> Callable[[dict], list[str]]:
    """An extra check: nothing of the named objects remains in `ns`."""
    def check(data: dict) -> list[str]:
        left = [f"{kind} {ns}/{obj['metadata']['name']} remains" for kind in ("computedomains", "pods")
                for obj in data.get(kind) or [] if obj["metadata"]["namespace"] == ns
                and any(obj["metadata"]["name"] == n or obj["metadata"]["name"].startswith(f"{n}-") for n in names)]
        return left
    return check


def roles_memory(world: SimWorld) -> dict[str, int]:
    """RSS (bytes) of the controller's and every kubelet plugin's main process, summed per role."""
    out: dict[str, int] = {}
    for role, component in ((CONTROLLER_ROLE, "controller"), (PLUGIN_ROLE, "kubelet-plugin")):
        for pod in driver_pods(world, component=component):
            proc = container_process(world, pod)
            if proc is not None:
                out[role] = out.get(role, 0) + proc.memory_info().rss
    return out


def roles_fds(world: SimWorld) -> dict[str, int]:
    """Open file descriptors of the controller's and the kubelet plugins' main processes, summed per role."""
    out: dict[str, int] = {}
    for role, component in ((CONTROLLER_ROLE, "controller"), (PLUGIN_ROLE, "kubelet-plugin")):
        for pod in driver_pods(world, component=component):
            proc = container_process(world, pod)
            if proc is not None:
                out[role] = out.get(role, 0) + proc.num_fds()
    return out


def imex_processes() -> list[int]:
    """PIDs of nvidia-imex stand-ins running under this test process (the simulated nodes)."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.name() == IMEX_DAEMON_BINARY:
                out.append(proc.pid)
        except psutil.Error:
            continue
    return out


def base_dir(world: SimWorld) -> Path:
    return Path(world.settings.base_dir)
