"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler as plain processes on 127.0.0.1.

`LocalCluster` owns a run directory holding the test PKI, the etcd data, an admin kubeconfig
and one log file per component. It waits for each component's health endpoint with a
deadline, and on failure raises `ClusterError` naming the component with the tail of its log.
`stop()` stops the components in reverse order (SIGTERM, then SIGKILL after a grace period)
and removes the run directory unless `keep=True`.

Nodes: node-lifecycle-controller stays on, as in a real cluster. A Node becomes schedulable
once it reports Ready and renews its Lease in ``kube-node-lease`` (see `cdriver.sim.node.registration`).

Component processes are started with a parent-death signal: they receive SIGKILL when the
thread that started them exits, so a crashed test run leaves no stray control plane. Start
and restart a cluster from a thread that lives as long as the cluster (normally the main one).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import json
import logging
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cdriver.atomic import atomic_write
from cdriver.errors import CdriverError
from cdriver.sim.controlplane import pki
from cdriver.sim.controlplane.binaries import ControlPlaneBinaries, control_plane_binaries

if TYPE_CHECKING:
    from cdriver.kube.connection import Connection

log = logging.getLogger(__name__)

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
#: start order; stop runs in reverse
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTEXT_NAME = "cdriver-local"
STATE_FILE = "cluster.json"
LOG_TAIL_LINES = 30
POLL_SECONDS = 0.1


class ClusterError(CdriverError):
    """The local control plane could not be started or is unhealthy."""


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True)
class Layout:
    """Files and directories inside a run directory."""

    root: Path

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def scheduler_config(self) -> Path:
        return self.root / "scheduler.yaml"

    @property
    def state(self) -> Path:
        return self.root / STATE_FILE

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def cert_dir(self, component: str) -> Path:
        return self.root / "certs" / component


# --- pure: command lines and files -------------------------------------------------------

def etcd_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """etcd 3.6 single member on loopback, fsync off (test speed, data is throw-away)."""
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary), "--name=node0", f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=node0={peer}", "--initial-cluster-state=new",
        "--unsafe-no-fsync=true", "--auto-compaction-retention=1",
        "--quota-backend-bytes=4294967296", "--log-level=warn",
    ]


def egress_config(socket_path: Path) -> dict[str, Any]:
    """Send the API server's traffic to nodes (kubelet API) through an HTTP CONNECT proxy on
    `socket_path`: real nodes' addresses live in network namespaces only the proxy can enter."""
    return {"apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
            "egressSelections": [{"name": "cluster", "connection": {
                "proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(socket_path)}}}}]}


#: kube-apiserver's own defaults for request limits (API Priority and Fairness, 400 read-only and 200
#: mutating seats), as clusters run them; later flags win, so these in a cluster's extra_args
#: undo the unlimited default above (`WorldSettings.api_fairness`)
FAIRNESS_ARGS = ["--enable-priority-and-fairness=true", "--max-requests-inflight=400",
                 "--max-mutating-requests-inflight=200"]


def apiserver_args(binary: Path, layout: Layout, ports: Ports, egress: Path | None = None) -> list[str]:
    """kube-apiserver with TLS, client-cert admin, service-account keys, Node and RBAC authorization;
    with `egress` (an EgressSelectorConfiguration file), kubelet traffic goes through its proxy."""
    files = pki.PKIFiles(layout.pki_dir)
    extra = [f"--egress-selector-config-file={egress}"] if egress else []
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.apiserver}",
        "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
        f"--cert-dir={layout.cert_dir(APISERVER)}",
        f"--tls-cert-file={files.apiserver_cert}", f"--tls-private-key-file={files.apiserver_key}",
        f"--client-ca-file={files.ca_cert}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={files.sa_pub}",
        f"--service-account-signing-key-file={files.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        # no request limits by default (tests on 2 cores); FAIRNESS_ARGS turns on the defaults users run
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
        f"--kubelet-client-certificate={files.kubelet_client_cert}",
        f"--kubelet-client-key={files.kubelet_client_key}",
        f"--kubelet-certificate-authority={files.ca_cert}",
        "--kubelet-preferred-address-types=InternalIP",
        # Close open watches on SIGTERM instead of waiting (up to a minute) for clients to
        # end them: a stop or restart then takes about a second.
        "--shutdown-watch-termination-grace-period=2s",
        "--profiling=false",
        *extra,
    ]


def controller_manager_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    """kube-controller-manager with every default controller (node-lifecycle included)."""
    files = pki.PKIFiles(layout.pki_dir)
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1", f"--secure-port={ports.controller_manager}",
        f"--cert-dir={layout.cert_dir(CONTROLLER_MANAGER)}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        f"--root-ca-file={files.ca_cert}",
        f"--service-account-private-key-file={files.sa_key}",
        f"--cluster-signing-cert-file={files.ca_cert}",
        f"--cluster-signing-key-file={files.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--controllers=*",
        "--node-monitor-period=2s",
        "--profiling=false",
    ]


def scheduler_config(layout: Layout) -> dict[str, Any]:
    """KubeSchedulerConfiguration: default plugins (DynamicResources included), no election."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }


def scheduler_args(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--config={layout.scheduler_config}",
        "--bind-address=127.0.0.1", f"--secure-port={ports.scheduler}",
        f"--cert-dir={layout.cert_dir(SCHEDULER)}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--profiling=false",
    ]


def dra_beta_args(versions: tuple[str, ...] = ("v1beta1",)) -> dict[str, list[str]]:
    """Extra flags that turn dynamic resource allocation on in Kubernetes 1.32/1.33 (beta, off
    by default there), serving the resource.k8s.io `versions`; for `LocalCluster.extra_args`."""
    gate = "--feature-gates=DynamicResourceAllocation=true"
    runtime = ",".join(f"resource.k8s.io/{v}=true" for v in versions)
    return {APISERVER: [gate, f"--runtime-config={runtime}"], CONTROLLER_MANAGER: [gate], SCHEDULER: [gate]}


def kubeconfig_dict(server: str, files: pki.PKIFiles, user: str = pki.ADMIN_USER) -> dict[str, Any]:
    """An admin kubeconfig with the CA and client certificate embedded (copyable as is)."""
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {
            "server": server, "certificate-authority-data": b64(files.ca_cert)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(files.admin_cert),
            "client-key-data": b64(files.admin_key)}}],
        "contexts": [{"name": CONTEXT_NAME, "context": {
            "cluster": CONTEXT_NAME, "user": user, "namespace": "default"}}],
        "current-context": CONTEXT_NAME,
    }


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last `n` lines of a text file ("" if it does not exist)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, maxlen=n)).rstrip("\n")
    except FileNotFoundError:
        return ""


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_port_picker = random.SystemRandom()


def _ephemeral_low() -> int:
    """Lowest port the kernel hands out as a connection's source port (32768 by default)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    """Whether `port` can be listened on at every address, IPv4 and (where present) IPv6."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno == errno.EAFNOSUPPORT:
                continue
            return False
    return True


def free_port() -> int:
    """A TCP port that is free right now on every address.

    It is taken below the kernel's ephemeral range, so that outgoing connections (whose source
    ports come from that range) cannot take it before the server that is handed it binds it.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = _port_picker.randrange(10000, max(10001, low))
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pick_ports() -> Ports:
    """Five distinct free loopback ports."""
    chosen: set[int] = set()
    while len(chosen) < 5:
        chosen.add(free_port())
    return Ports(*sorted(chosen))


# --- effects: processes and probes -------------------------------------------------------

try:  # loaded here, not in the child: no dlopen between fork and exec
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - non-glibc platform
    _LIBC = None
PR_SET_PDEATHSIG = 1


def parent_death_signal() -> None:  # runs in the child between fork and exec
    """SIGKILL this (child) process when the thread that started it exits."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("KUBECONFIG", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


_NO_PROXY_OPENER_HANDLERS = (urllib.request.ProxyHandler({}),)


def probe(url: str, context: ssl.SSLContext | None, timeout: float = 2.0) -> tuple[bool, str]:
    """GET `url`: (HTTP 200?, short description of the answer or error)."""
    handlers: list[Any] = list(_NO_PROXY_OPENER_HANDLERS)
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout) as resp:
            body = resp.read(400).decode(errors="replace")
            return resp.status == 200, f"HTTP {resp.status}: {body.strip()[:200]}"
    except urllib.error.HTTPError as exc:
        body = exc.read(400).decode(errors="replace") if exc.fp else ""
        return False, f"HTTP {exc.code}: {body.strip()[:200]}"
    except (urllib.error.URLError, OSError) as exc:
        return False, str(getattr(exc, "reason", exc))


@dataclass
class _Process:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None
    starts: int = 0

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class LocalCluster:
    """A running etcd + kube-apiserver + kube-controller-manager + kube-scheduler.

    ``with LocalCluster() as c:`` starts it and stops it on exit; ``c.kubeconfig`` is an admin
    kubeconfig and ``c.raw`` a `RawClient` for it. `run_dir` (default: a fresh temporary
    directory) is owned by the cluster and removed on stop unless `keep` is true.
    """

    run_dir: Path | None = None
    keep: bool = False
    binaries: ControlPlaneBinaries | None = None
    start_timeout: float = 120.0
    stop_grace: float = 10.0
    die_with_parent: bool = True
    ports: Ports | None = None
    #: component -> flags added to its command line (e.g. `dra_beta_args()` for 1.33)
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    #: Unix socket of an HTTP CONNECT proxy for the API server's kubelet traffic (real nodes)
    egress_proxy: Path | None = None
    _procs: dict[str, _Process] = field(default_factory=dict, init=False, repr=False)
    _raw: Any = field(default=None, init=False, repr=False)
    _created_dir: bool = field(default=False, init=False, repr=False)

    # -- public properties ------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        if self.run_dir is None:
            raise ClusterError("the cluster has no run directory yet; call start() first")
        return Layout(Path(self.run_dir))

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def server(self) -> str:
        if self.ports is None:
            raise ClusterError("the cluster is not started; call start() first")
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def pki(self) -> pki.PKIFiles:
        return pki.PKIFiles(self.layout.pki_dir)

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    @property
    def raw(self) -> Any:
        """A `cdriver.kube.raw.RawClient` with admin rights (created on first use)."""
        if self._raw is None:
            from cdriver.kube.raw import RawClient

            self._raw = RawClient(self.api_client())
        return self._raw

    def api_client(self) -> Connection:
        """A new connection to the API server (`cdriver.kube.connection`) for the admin kubeconfig."""
        from cdriver.kube.client import load_api_client

        return load_api_client(str(self.kubeconfig))

    def pid(self, component: str) -> int | None:
        proc = self._procs.get(component)
        return proc.popen.pid if proc and proc.alive and proc.popen else None

    def log_tail(self, component: str, lines: int = LOG_TAIL_LINES) -> str:
        return tail_lines(self.layout.log_file(component), lines)

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        """Start every component and wait until the cluster serves requests."""
        if self._procs:
            raise ClusterError("this LocalCluster is already started")
        binaries = self.binaries or control_plane_binaries()
        self.binaries = binaries
        if self.run_dir is None:
            self.run_dir = Path(tempfile.mkdtemp(prefix="cdriver-cluster-"))
            self._created_dir = True
        else:
            self.run_dir = Path(self.run_dir)
            if self.run_dir.exists() and any(self.run_dir.iterdir()):
                raise ClusterError(
                    f"run directory {self.run_dir} is not empty; pass an empty or new directory "
                    "(or stop the cluster that uses it and remove it)"
                )
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._created_dir = True
        layout = self.layout
        layout.logs.mkdir(parents=True, exist_ok=True)
        for component in (APISERVER, CONTROLLER_MANAGER, SCHEDULER):
            layout.cert_dir(component).mkdir(parents=True, exist_ok=True)
        pki.write_pki(layout.pki_dir)
        atomic_write(layout.scheduler_config, yaml.safe_dump(scheduler_config(layout)))
        started = time.monotonic()
        for attempt in range(3):
            self.ports = self.ports if (attempt == 0 and self.ports) else pick_ports()
            atomic_write(layout.kubeconfig,
                         yaml.safe_dump(kubeconfig_dict(self.server, self.pki)), mode=0o600)
            try:
                self._start_all(binaries)
                break
            except ClusterError as exc:
                self._stop_processes()
                if "address already in use" in str(exc) and attempt < 2:
                    log.warning("port collision while starting the control plane; retrying")
                    shutil.rmtree(layout.etcd_data, ignore_errors=True)
                    continue
                raise ClusterError(f"{exc}\n(run directory kept for inspection: {layout.root})") from None
        self._write_state()
        log.info("control plane ready at %s in %.1f s (kubeconfig %s)", self.server,
                 time.monotonic() - started, layout.kubeconfig)
        return self

    def _start_all(self, binaries: ControlPlaneBinaries) -> None:
        layout, ports = self.layout, self.ports
        assert ports is not None
        extra = self.extra_args
        self._procs = {
            ETCD: _Process(ETCD, etcd_args(binaries.etcd, layout, ports), layout.log_file(ETCD)),
            APISERVER: _Process(APISERVER, apiserver_args(binaries.kube_apiserver, layout, ports,
                                                          self._egress_file())
                                + extra.get(APISERVER, []), layout.log_file(APISERVER)),
            CONTROLLER_MANAGER: _Process(
                CONTROLLER_MANAGER,
                controller_manager_args(binaries.kube_controller_manager, layout, ports)
                + extra.get(CONTROLLER_MANAGER, []),
                layout.log_file(CONTROLLER_MANAGER)),
            SCHEDULER: _Process(SCHEDULER, scheduler_args(binaries.kube_scheduler, layout, ports)
                                + extra.get(SCHEDULER, []), layout.log_file(SCHEDULER)),
        }
        for component in COMPONENTS:
            self._launch(component)
            self._wait_component(component)
        self._wait_for_service_account("default", "default", self.start_timeout)

    def _egress_file(self) -> Path | None:
        if self.egress_proxy is None:
            return None
        path = self.layout.root / "egress-selector.yaml"
        atomic_write(path, yaml.safe_dump(egress_config(self.egress_proxy)))
        return path

    def _launch(self, component: str) -> None:
        proc = self._procs[component]
        with open(proc.log_path, "ab") as logf:
            logf.write(f"--- start {proc.starts + 1}: {' '.join(proc.argv)}\n".encode())
            logf.flush()
            try:
                proc.popen = subprocess.Popen(
                    proc.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                    env=_child_env(), start_new_session=True,
                    preexec_fn=parent_death_signal if self.die_with_parent else None,
                )
            except OSError as exc:
                raise ClusterError(
                    f"cannot run {component} ({proc.argv[0]}): {exc.strerror or exc}; rebuild it "
                    "with hack/kube/build.sh or fix CDRIVER_ETCD_BIN_DIR / CDRIVER_KUBE_BIN_DIR"
                ) from None
        proc.starts += 1
        log.debug("started %s pid %d", component, proc.popen.pid)

    def _health_urls(self, component: str) -> list[str]:
        ports = self.ports
        assert ports is not None
        if component == ETCD:
            return [f"http://127.0.0.1:{ports.etcd_client}/health"]
        if component == APISERVER:
            return [f"{self.server}/readyz", f"{self.server}/healthz"]
        port = ports.controller_manager if component == CONTROLLER_MANAGER else ports.scheduler
        return [f"https://127.0.0.1:{port}/healthz"]

    def _ssl_context(self, component: str) -> ssl.SSLContext | None:
        if component == ETCD:
            return None
        if component == APISERVER:
            return ssl.create_default_context(cafile=str(self.ca_file))
        # controller-manager and scheduler serve a self-signed certificate from their cert dir
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _failure(self, component: str, what: str) -> ClusterError:
        tail = self.log_tail(component)
        return ClusterError(
            f"{component} {what}; log {self.layout.log_file(component)}, last lines:\n{tail}"
        )

    def _wait_component(self, component: str, timeout: float | None = None) -> None:
        """Wait until every health URL of `component` answers 200, or raise."""
        deadline = time.monotonic() + (timeout or self.start_timeout)
        ctx = self._ssl_context(component)
        proc = self._procs[component]
        for url in self._health_urls(component):
            detail = "no answer yet"
            while True:
                if proc.popen is None or proc.popen.poll() is not None:
                    rc = proc.popen.returncode if proc.popen else None
                    raise self._failure(component, f"exited with code {rc} while starting")
                ok, detail = probe(url, ctx)
                if ok:
                    break
                if time.monotonic() > deadline:
                    raise self._failure(
                        component, f"not healthy after {timeout or self.start_timeout:.0f} s "
                        f"({url}: {detail})")
                time.sleep(POLL_SECONDS)

    def _wait_for_service_account(self, namespace: str, name: str, timeout: float) -> None:
        """Admin GET of a ServiceAccount until it exists (proves the controllers run)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        url = f"{self.server}/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        deadline = time.monotonic() + timeout
        detail = ""
        while time.monotonic() < deadline:
            dead = [p.name for p in self._procs.values() if not p.alive]
            if dead:
                raise self._failure(dead[0], "exited while waiting for the controllers")
            ok, detail = probe(url, ctx)
            if ok:
                return
            time.sleep(POLL_SECONDS)
        raise self._failure(
            CONTROLLER_MANAGER,
            f"did not create serviceaccount {namespace}/{name} within {timeout:.0f} s ({detail})")

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports.__dict__ if self.ports else {},
            "pids": {name: p.popen.pid for name, p in self._procs.items() if p.popen},
            "kubectl": str(self.binaries.kubectl) if self.binaries else "",
        }
        atomic_write(self.layout.state, json.dumps(state, indent=2) + "\n")

    # -- faults and recovery ------------------------------------------------------------
    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a component and reap it (simulates a crash with SIGKILL)."""
        proc = self._component(component)
        if proc.popen is not None and proc.popen.poll() is None:
            proc.popen.send_signal(sig)
            try:
                proc.popen.wait(timeout=self.stop_grace)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()

    def restart(self, component: str, kill: bool = True) -> None:
        """Stop (SIGKILL if `kill`, else SIGTERM) and start one component on the same port."""
        self.kill(component, signal.SIGKILL if kill else signal.SIGTERM)
        self._launch(component)
        self._wait_component(component)
        self._write_state()

    def restart_apiserver(self, kill: bool = True) -> None:
        """Crash (or gracefully stop) kube-apiserver and bring it back; waits for /readyz."""
        self.restart(APISERVER, kill=kill)

    def restart_with(self, component: str, extra: list[str]) -> None:
        """Restart one component with `extra` in place of its `extra_args` (e.g. the API server
        with another --runtime-config); the data in etcd stays."""
        proc = self._component(component)
        old = self.extra_args.get(component, [])
        proc.argv = [*proc.argv[:len(proc.argv) - len(old)], *extra]
        self.extra_args[component] = list(extra)
        self.restart(component)

    def dead_components(self) -> list[str]:
        return [name for name in COMPONENTS if name in self._procs and not self._procs[name].alive]

    def ensure_healthy(self) -> list[str]:
        """Restart any component that has exited and wait until all are healthy.

        Returns the names of the restarted components; raises `ClusterError` (component, log
        tail) if one cannot be brought back.
        """
        if not self._procs:
            raise ClusterError("the cluster is not started; call start() first")
        restarted = []
        for component in COMPONENTS:
            proc = self._procs[component]
            if not proc.alive:
                rc = proc.popen.returncode if proc.popen else None
                log.warning("%s exited (code %s); restarting it", component, rc)
                self._launch(component)
                restarted.append(component)
            self._wait_component(component)
        if restarted:
            self._write_state()
        return restarted

    def _component(self, component: str) -> _Process:
        if component not in self._procs:
            raise ClusterError(f"unknown or not started component {component!r}; "
                               f"choose one of {', '.join(COMPONENTS)}")
        return self._procs[component]

    # -- API helpers -------------------------------------------------------------------
    def wait_for_default_service_account(self, namespace: str, timeout: float = 30.0) -> dict:
        """Wait until serviceaccount/default exists in `namespace` (pods need it) and return it."""
        from cdriver.kube.resources import RESOURCES

        deadline = time.monotonic() + timeout
        while True:
            sa = self.raw.get_or_none(RESOURCES["serviceaccounts"], "default", namespace)
            if sa is not None:
                return sa
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"serviceaccount default in namespace {namespace} did not appear within "
                    f"{timeout:.0f} s; is kube-controller-manager running? last lines:\n"
                    + self.log_tail(CONTROLLER_MANAGER))
            time.sleep(POLL_SECONDS)

    def create_namespace(self, name: str, labels: dict[str, str] | None = None,
                         timeout: float = 30.0) -> dict:
        """Create a namespace and wait for its default service account; returns the namespace."""
        from cdriver.kube.resources import RESOURCES

        ns = self.raw.create(RESOURCES["namespaces"], {
            "metadata": {"name": name, "labels": dict(labels or {})}})
        self.wait_for_default_service_account(name, timeout)
        return ns

    # -- stop ----------------------------------------------------------------------------
    def _stop_processes(self) -> None:
        """Stop the components in reverse start order: SIGTERM, SIGKILL after the grace."""
        for component in reversed(COMPONENTS):
            proc = self._procs.get(component)
            if proc is None or proc.popen is None or proc.popen.poll() is not None:
                continue
            proc.popen.terminate()
            try:
                proc.popen.wait(timeout=self.stop_grace)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0f s; killing it", component, self.stop_grace)
                proc.popen.kill()
                proc.popen.wait()
        self._procs = {}

    def stop(self) -> None:
        """Stop all components in reverse start order; remove the run dir unless `keep`."""
        if self._raw is not None:
            with contextlib.suppress(Exception):
                self._raw.api_client.close()
            self._raw = None
        self._stop_processes()
        if self.run_dir is not None and self._created_dir and not self.keep:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self._created_dir = False


def read_state(run_dir: Path) -> dict[str, Any]:
    """The state file a started cluster wrote into its run directory."""
    path = Path(run_dir) / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster state in {run_dir} ({STATE_FILE} missing): "
                           "is a cluster running there?") from None
    except ValueError as exc:
        raise ClusterError(f"{path}: unreadable cluster state ({exc})") from None
