"""One real node: containerd + runc + CNI and kubelet in namespaces of their own.

`RealNode.start()` lays out the node's root directory (configuration, certificates, the
simulated driver root), creates its cgroup tree, starts a holder process that owns the node's
mount namespace inside its network namespace, then containerd (images imported) and kubelet
inside both, and waits until kubelet has registered a Ready Node. `stop()` kills every
process in the node's cgroups (kubelet, containerd, shims, containers), which ends the mount
namespace and every mount in it, then removes the cgroups and the network namespace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.errors import CdriverError
from cdriver.sim.controlplane import pki
from cdriver.sim.node.real import cgroups, evidence, plan
from cdriver.sim.node.real.images import NodeImages
from cdriver.sim.node.real.plan import FALLBACK_SNAPSHOTTER, SNAPSHOTTER, NodePlan

log = logging.getLogger(__name__)

READY_TIMEOUT = 120.0
#: a kubelet syncs every pod once on start, then every syncFrequency (10 s, plan.kubelet_config)
SYNC_TIMEOUT = 90.0
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_DIRS = ("var/lib/kubelet", "var/lib/containerd", "var/log/pods", "var/log/containers", "run/containerd",
             "run/cdi", "run/nvidia/driver", "etc/cni/net.d", "kubelet/pki", "containerd", "logs")


class RealNodeError(CdriverError):
    """A real node could not be set up or did not become Ready; the message says which part."""


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    containerd_dir: Path  # containerd, ctr, containerd-shim-runc-v2
    cni_dir: Path
    runc: Path

    @property
    def ctr(self) -> Path:
        return self.containerd_dir / "ctr"


def node_binaries(echo: bool = True) -> NodeBinaries:
    """kubelet, containerd, the CNI plugins and runc, building (or installing) them on first use."""
    from cdriver.sim.controlplane.binaries import component_dirs

    dirs = component_dirs(("kubelet", "containerd", "cni", "runc"), echo=echo)
    return NodeBinaries(dirs["kubelet"] / "kubelet", dirs["containerd"], dirs["cni"], dirs["runc"] / "runc")


def overlay_works(directory: Path) -> bool:
    """Whether an overlay mount with its layers in `directory` works (it does not on every file
    system, e.g. overlay below overlay); tried in a mount namespace of its own, then removed."""
    probe = directory / ".overlay-probe"
    shutil.rmtree(probe, ignore_errors=True)
    for sub in ("lower", "upper", "work", "merged"):
        (probe / sub).mkdir(parents=True)
    options = f"lowerdir={probe / 'lower'},upperdir={probe / 'upper'},workdir={probe / 'work'}"
    try:
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "overlay", "overlay",
                              "-o", options, str(probe / "merged")], capture_output=True, timeout=30)
        return out.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    from cdriver.sim.controlplane.cluster import parent_death_signal

    parent_death_signal()


@dataclass
class RealNode:
    """A real kubelet + containerd node (see the module docstring)."""

    plan: NodePlan
    binaries: NodeBinaries
    pki_files: pki.PKIFiles
    images: NodeImages
    labels: dict[str, str] = field(default_factory=dict)
    topology: str | None = None
    fabric_state: str = "completed"
    snapshotter: str = SNAPSHOTTER
    holder: subprocess.Popen | None = field(default=None, init=False)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    #: when the running kubelet was started (seconds since the epoch)
    kubelet_started: float = field(default=0.0, init=False)

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def ip(self) -> str:
        return self.plan.ip

    @property
    def socket(self) -> Path:
        """containerd's socket as the machine sees it (bound into the node's /run/containerd)."""
        return self.plan.path("run/containerd/containerd.sock")

    def log_file(self, component: str) -> Path:
        return self.plan.path(f"logs/{component}.log")

    # -- set up ---------------------------------------------------------------------------
    def write_files(self) -> None:
        p = self.plan
        for rel in NODE_DIRS:
            p.path(rel).mkdir(parents=True, exist_ok=True)
        if not overlay_works(p.path("var/lib/containerd")):
            log.warning("node %s: an overlay mount fails below %s; containerd uses the %s snapshotter (a copy "
                        "of the image for every container)", p.name, p.path("var/lib/containerd"),
                        FALLBACK_SNAPSHOTTER)
            self.snapshotter = FALLBACK_SNAPSHOTTER
        ca = pki.load_ca(self.pki_files)
        client = pki.issue_cert(ca, f"system:node:{p.name}", organizations=("system:nodes",), client=True)
        client_cert, client_key = p.path("kubelet/pki/client.crt"), p.path("kubelet/pki/client.key")
        client_key.write_bytes(client.key_pem())
        client_key.chmod(0o600)
        client_cert.write_bytes(client.cert_pem())
        cert, key = pki.issue_kubelet_serving_cert(self.pki_files, p.name, (p.ip,), p.path("kubelet/pki"))
        ca_file = self.pki_files.ca_cert
        p.path("kubelet/config.yaml").write_text(plan.render_yaml(plan.kubelet_config(p, ca_file, cert, key)))
        p.path("kubelet/kubeconfig").write_text(plan.render_yaml(plan.kubeconfig(p, ca_file, client_cert,
                                                                                  client_key)))
        p.path("containerd/config.toml").write_text(
            plan.containerd_config(p, self.binaries.runc, self.binaries.cni_dir, self.images.sandbox,
                                   self.snapshotter))
        p.path("etc/cni/net.d/10-cdriver.conflist").write_text(json.dumps(plan.cni_config(p), indent=2))
        p.path("etc/resolv.conf").write_text("# real node: no cluster DNS\noptions ndots:1\n")
        if self.topology:
            from cdriver.sim.gpu.driver_root import create_driver_root

            # the IMEX stand-ins run inside the driver image's containers: its cdriver, from PATH
            create_driver_root(p.path("run/nvidia/driver"), p.name, self.topology, fabric_state=self.fabric_state,
                               wrapper_command=["cdriver"])

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and k != "KUBECONFIG"}
        path = [str(self.binaries.containerd_dir), str(self.binaries.runc.parent), env.get("PATH", "/usr/bin:/bin")]
        env["PATH"] = ":".join(path)
        return env

    def _spawn(self, component: str, argv: list[str]) -> subprocess.Popen:
        """Start `argv` in the node's cgroup (system/) and, once the holder runs, its namespaces."""
        join = cgroups.join_script(f"{self.plan.cgroup}/system")
        if self.holder is not None:
            argv = ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--", *argv]
        logf = open(self.log_file(component), "ab")
        try:
            return subprocess.Popen(["sh", "-c", join + 'exec "$@"', "sh", *argv], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE if component == "holder" else logf,
                                    stderr=logf, env=self._env(), start_new_session=True,
                                    preexec_fn=_die_with_parent)
        finally:
            logf.close()

    def _start_holder(self) -> None:
        argv = ["nsenter", f"--net={self.plan.netns_path}", "--", "unshare", "--mount", "--propagation", "private",
                "sh", "-c", plan.mount_setup_script(self.plan)]
        self.holder = self._spawn("holder", argv)
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().decode().strip()
        if line != "ready":
            raise RealNodeError(f"node {self.name}: setting up its mount namespace failed; "
                                f"see {self.log_file('holder')}:\n{_tail(self.log_file('holder'))}")

    def _ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.binaries.ctr), "--address", str(self.socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)

    def _start_containerd(self) -> None:
        config = self.plan.path("containerd/config.toml")
        argv = [str(self.binaries.containerd_dir / "containerd"), "--config", str(config)]
        self.procs["containerd"] = self._spawn("containerd", argv)
        deadline = time.monotonic() + 30
        while True:
            if self.procs["containerd"].poll() is not None:
                raise RealNodeError(f"node {self.name}: containerd exited ({self.procs['containerd'].returncode}):\n"
                                    + _tail(self.log_file("containerd")))
            if self.socket.exists() and self._ctr("version", timeout=10).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RealNodeError(f"node {self.name}: containerd did not answer on {self.socket} in 30 s:\n"
                                    + _tail(self.log_file("containerd")))
            time.sleep(0.2)

    def import_images(self) -> None:
        for ref, archive in self.images.archives.items():
            out = self._ctr("images", "import", "--local", "--snapshotter", self.snapshotter, "--index-name", ref,
                            str(archive))
            if out.returncode != 0:
                raise RealNodeError(f"node {self.name}: importing {archive} as {ref} failed: "
                                    f"{out.stderr.strip() or out.stdout.strip()}")

    def tag_image(self, source: str, target: str) -> None:
        """Give an imported image another reference (a "new" image for a rollout)."""
        out = self._ctr("images", "tag", "--force", source, target)
        if out.returncode != 0:
            raise RealNodeError(f"node {self.name}: tagging {source} as {target} failed: {out.stderr.strip()[-500:]}")

    def _start_kubelet(self) -> None:
        self.kubelet_started = time.time()
        self.procs["kubelet"] = self._spawn("kubelet", plan.kubelet_args(self.binaries.kubelet, self.plan,
                                                                         self.labels))

    def launch_runtime(self) -> None:
        """Lay out the node and start its namespaces' holder and containerd (the network namespace
        exists already). They die with the calling thread: call it from one that lives as long as
        the node. Then `import_images` (any thread) and `launch_kubelet`."""
        self.write_files()
        # a run killed before its teardown leaves its node's processes and cgroups: end them first
        cgroups.kill_all(self.plan.cgroup)
        cgroups.remove(self.plan.cgroup)
        cgroups.create(f"{self.plan.cgroup}/system")
        self._start_holder()
        self._start_containerd()

    def launch_kubelet(self) -> None:
        self._start_kubelet()

    def launch(self) -> None:
        """`launch_runtime`, `import_images`, `launch_kubelet`; see `wait_ready`."""
        self.launch_runtime()
        self.import_images()
        self.launch_kubelet()

    def start(self, raw: Any, timeout: float = READY_TIMEOUT) -> RealNode:
        """`launch` and wait for kubelet's Ready Node."""
        self.launch()
        self.wait_ready(raw, timeout)
        return self

    def _check_kubelet_runs(self) -> None:
        kubelet = self.procs.get("kubelet")
        if kubelet is not None and kubelet.poll() is not None:
            raise RealNodeError(f"node {self.name}: kubelet exited ({kubelet.returncode}):\n"
                                + _tail(self.log_file("kubelet")))

    def wait_ready(self, raw: Any, timeout: float = READY_TIMEOUT) -> None:
        """Wait for a Ready Node and a heartbeat of the running kubelet: its Lease renewed since
        it started (a Node stays Ready for a while after its kubelet stops)."""
        from cdriver.kube.resources import RESOURCES

        deadline = time.monotonic() + timeout
        state = "no Node object"
        while time.monotonic() < deadline:
            self._check_kubelet_runs()
            node = raw.get_or_none(RESOURCES["nodes"], self.name)
            if node is not None:
                conds = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
                ready = conds.get("Ready", {})
                lease = raw.get_or_none(RESOURCES["leases"], self.name, NODE_LEASE_NAMESPACE)
                heartbeat = evidence.lease_renewed_since(lease, self.kubelet_started)
                if ready.get("status") == "True" and heartbeat:
                    return
                state = (f"Ready={ready.get('status')} ({ready.get('message', '')}), Lease renewed "
                         f"{'since' if heartbeat else 'not since'} the kubelet started")
            time.sleep(0.5)
        raise RealNodeError(f"node {self.name}: not Ready after {timeout:.0f} s: {state}; kubelet log:\n"
                            + _tail(self.log_file("kubelet")))

    def wait_pods_synced(self, raw: Any, timeout: float = SYNC_TIMEOUT) -> None:
        """Wait until the running kubelet has synced every pod of the node, first and periodically,
        and the API shows every container it started (see `evidence.pods_synced`): what it
        decides about the pods it found (after a restart: keep their containers) shows by then."""
        from cdriver.kube.errors import ApiError
        from cdriver.kube.resources import RESOURCES

        deadline = time.monotonic() + timeout
        state = "not asked yet"
        while time.monotonic() < deadline:
            self._check_kubelet_runs()
            pods = evidence.live_pods(raw.list(RESOURCES["pods"], field_selector=f"spec.nodeName={self.name}")
                                      ["items"], self.name)
            try:
                metrics = raw.request("GET", f"/api/v1/nodes/{self.name}/proxy/metrics")
            except ApiError as exc:  # the kubelet may not serve yet
                state = f"its metrics are not served: {exc}"
            else:
                state = evidence.pods_synced(evidence.parse_metrics(str(metrics)), self.kubelet_started, pods)
                if not state:
                    return
            time.sleep(0.5)
        raise RealNodeError(f"node {self.name}: kubelet has not synced its pods after {timeout:.0f} s: {state}; "
                            "kubelet log:\n" + _tail(self.log_file("kubelet")))

    def container_log(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path | None:
        """The CRI-format log kubelet keeps of a container's current (or previous) run."""
        runs = sorted(self.plan.path("var/log/pods").glob(f"{namespace}_{pod}_*/{container}/*.log"),
                      key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
        if previous:
            runs = runs[:-1]
        return runs[-1] if runs else None

    def restart_kubelet(self) -> None:
        """Stop kubelet (SIGTERM) and start it again; pods keep running in containerd. `wait_ready`
        then waits for the new kubelet's heartbeat, `wait_pods_synced` for its work on the pods."""
        proc = self.procs.get("kubelet")
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._start_kubelet()

    # -- tear down ------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Kill everything of the node and remove its cgroups; returns what could not be removed."""
        kubelet = self.procs.get("kubelet")
        if kubelet is not None and kubelet.poll() is None:
            kubelet.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                kubelet.wait(timeout=10)
        left = cgroups.kill_all(self.plan.cgroup)
        for proc in [*self.procs.values(), *([self.holder] if self.holder else [])]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=5)
            if proc.stdout:
                proc.stdout.close()
        problems = [f"pid {pid} survived SIGKILL" for pid in left]
        problems += cgroups.remove(self.plan.cgroup)
        self.procs, self.holder = {}, None
        return problems


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not readable)"
