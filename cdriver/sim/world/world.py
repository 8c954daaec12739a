"""The whole simulated cluster: control plane, simulated GB200 nodes, and the driver's chart.

`SimWorld.start()` builds what is missing (cached), starts the real control plane, one
simulated node per topology node (each with its own loopback address from a 127.X.Y.0/24 block
leased for this cluster, so clusters on one machine do not collide, its own root directory and
driver root holding the simulation kit), installs `helm/cdriver` with the built helm, and
waits until the controller and every node's kubelet plugin are ready and publishing. Each
step is named; a failure says which step failed and shows the relevant log tail.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.checkout import CHART_DIR
from cdriver.errors import CdriverError

log = logging.getLogger(__name__)

RELEASE = "cdriver"
#: which driver a world installs: cdriver's chart, or upstream's Go driver from its own chart
DRIVER_CDRIVER = "cdriver"
DRIVER_UPSTREAM = "upstream"
DRIVERS = (DRIVER_CDRIVER, DRIVER_UPSTREAM)
DRIVER_NAMESPACE = "cdriver-system"
KUBE_VERSION = "1.37.2"
SIM_DRIVER_ROOT = "/run/nvidia/driver"
READY_TIMEOUT = 180.0

Progress = Callable[[str], None]


class WorldError(CdriverError):
    """A step of bringing up the simulated cluster failed; the message names the step."""


def chart_dir() -> Path:
    """The chart in the source tree this package runs from."""
    path = CHART_DIR
    if not (path / "Chart.yaml").exists():
        raise WorldError(f"the Helm chart is not at {path}; run from a checkout of the cdriver repository")
    return path


#: What a world creates below its base directory.
WORLD_DIRS = ("cluster", "nodes", "driver-image")


@dataclass
class WorldSettings:
    """What to bring up."""

    base_dir: Path
    nodes: int = 4
    topology: Path | None = None
    imex_mode: str = IMEX_MODE_DRIVER_MANAGED
    feature_gates: dict[str, bool] = field(default_factory=dict)
    extra_values: list[str] = field(default_factory=list)
    #: short heartbeats, backoffs and retries (tests); off: kubelet's timings
    fast: bool = False
    #: node names to lay out as not fabric-attached (NVML reports no fabric)
    non_fabric_nodes: tuple[str, ...] = ()
    #: extra nodes outside the topology (GPU nodes without NVLink fabric), e.g. ("cpu-1",)
    extra_nodes: tuple[str, ...] = ()
    controller_metrics_port: int = 0  # 0: pick a free port
    #: how many of the topology's first nodes are real (kubelet + containerd + runc); the rest simulated
    real_nodes: int = 0
    #: DRIVER_CDRIVER, or DRIVER_UPSTREAM (the peer build, see cdriver.sim.world.upstream_driver)
    driver: str = DRIVER_CDRIVER
    #: the API server with its default request limits and API Priority and Fairness (as clusters
    #: run it; scale benchmarks), not unlimited
    api_fairness: bool = False
    #: a user's values file: when given, the chart gets it plus only what the simulated cluster
    #: needs (imex_mode and feature_gates above are then the file's to say)
    values_file: Path | None = None
    #: the driver image's platform the simulated nodes run ("": this checkout's cdriver, natively);
    #: another architecture's runs under emulation (see cdriver.sim.world.emulated_driver)
    driver_platform: str = ""

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise WorldError(f"unknown driver {self.driver!r}: use one of {', '.join(DRIVERS)}")
        if self.driver_platform and (self.driver != DRIVER_CDRIVER or self.real_nodes):
            raise WorldError(f"a driver image for {self.driver_platform} runs on simulated nodes only, with the "
                             "cdriver driver (a real node's runc runs outside any emulation, so an arm64 image "
                             "fails there with \"exec format error\"): drop --real-nodes or --driver-platform")
        if self.driver != DRIVER_CDRIVER and self.real_nodes:
            raise WorldError(f"the {self.driver} driver runs on simulated nodes only (no image of it is built "
                             "for real nodes): drop --real-nodes or use --driver cdriver")
        if not self.controller_metrics_port:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.controller_metrics_port = s.getsockname()[1]


def node_options(settings: WorldSettings) -> Any:
    """The nodes' timings: kubelet's, or the fast ones tests use."""
    from cdriver.sim.node.simulated.runtime import NodeOptions

    return NodeOptions.fast() if settings.fast else NodeOptions()


@dataclass
class SimNode:
    """One simulated node and its identity in the topology."""

    name: str
    ip: str
    clique: str  # "<clusterUUID>.<cliqueId>" or "" when not fabric-attached
    agent: Any  # a simulated NodeAgent, or a RealNode
    real: bool = False

    @property
    def cdi_dir(self) -> Path:
        """Where the node's runtime reads CDI specs (the plugin's cdiRoot), as this machine sees it."""
        if self.real:
            return self.agent.plan.path("run/cdi")
        return self.agent.layout.root / "var/run/cdi"

    @property
    def driver_root(self) -> Path:
        """The node's simulated driver root (mock NVML, IMEX stand-ins), as this machine sees it."""
        if self.real:
            return self.agent.plan.path("run/nvidia/driver")
        return Path(self.agent.driver_root.root)


def local_helm_values(settings: WorldSettings) -> list[str]:
    """`--set` arguments for cdriver's chart that only the simulated cluster needs."""
    return [
        "--set", f"nvidiaDriverRoot={SIM_DRIVER_ROOT}",
        "--set", "command=cdriver",
        "--set", "image.pullPolicy=Never",
        # The plugins serve metrics on their pod IP (each node has its own address); the
        # controller's metrics port is picked free.
        "--set", f"controller.metrics.port={settings.controller_metrics_port}",
        # The chart's GPU-node affinity, health port and gRPC probes stay: every node carries
        # nvidia.com/gpu.present, and the plugin's health service listens on its pod IP (each
        # node has its own address).
    ]


def helm_values(settings: WorldSettings) -> list[str]:
    """`--set` arguments that point the chart at the simulated nodes."""
    if settings.values_file is not None:
        return ["-f", str(settings.values_file), *local_helm_values(settings), *settings.extra_values]
    values = [*local_helm_values(settings), "--set", f"imex.mode={settings.imex_mode}", "--set", "logVerbosity=4"]
    for name, enabled in sorted(_gates(settings).items()):
        values += ["--set", f"featureGates.{name}={str(enabled).lower()}"]
    return values + list(settings.extra_values)


def _gates(settings: WorldSettings) -> dict[str, bool]:
    gates = dict(settings.feature_gates)
    if settings.imex_mode == IMEX_MODE_HOST_MANAGED:
        gates.setdefault("HostManagedIMEXDaemon", True)
    return gates


class SimWorld:
    """Control plane + simulated nodes + the installed chart (a context manager)."""

    def __init__(self, settings: WorldSettings, progress: Progress | None = None) -> None:
        self.settings = settings
        self.progress = progress or (lambda msg: log.info("%s", msg))
        self.cluster: Any = None
        self.nodes: list[SimNode] = []
        self.helm: Path | None = None
        self.kubectl: Path | None = None
        self.addresses: Any = None  # the leased 127.X.Y.0/24 of the nodes
        self.fleet: Any = None  # the real nodes (RealFleet), when asked for
        self.node_images: Any = None
        self.peer: Any = None
        self.emulated: Any = None  # the driver image of settings.driver_platform (EmulatedDriver)

    # -- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> SimWorld:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def raw(self) -> Any:
        return self.cluster.raw

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    def _step(self, name: str, fn: Callable[[], Any]) -> Any:
        self.progress(f"==> {name}")
        start = time.monotonic()
        try:
            result = fn()
        except WorldError:
            raise
        except CdriverError as e:
            raise WorldError(f"step '{name}' failed: {e}") from e
        self.progress(f"    done in {time.monotonic() - start:.1f} s")
        return result

    def start(self) -> SimWorld:
        """Bring everything up; if a step fails, stop what started and remove what this start
        created below the base directory (and the base directory itself when that leaves it empty)."""
        try:
            self._step("end what a dead run of this cluster left running", self._end_leftovers)
            self._step("build or find the control-plane binaries and helm (cold: about 9 min on 2 cores)",
                       self._binaries)
            self._step("start etcd, kube-apiserver, kube-controller-manager, kube-scheduler", self._start_cluster)
            if self.settings.real_nodes:
                self._step("build or find kubelet, containerd, runc, the CNI plugins and the images",
                           self._node_parts)
            if self.settings.driver_platform:
                self._step(f"build or find the {self.settings.driver_platform} driver image and unpack it",
                           self._driver_image)
            self._step(f"start {self.settings.nodes} GB200 nodes ({self.settings.real_nodes} real)",
                       self._start_nodes)
            self._step(f"install the {self.settings.driver} Helm chart", self._install_chart)
            self._step("wait for the controller and every node's kubelet plugin", self._wait_ready)
        except BaseException:
            self.stop()
            self._remove_files()
            raise
        return self

    def _remove_files(self) -> None:
        base = self.settings.base_dir
        for sub in WORLD_DIRS:
            shutil.rmtree(base / sub, ignore_errors=True)
        try:
            base.rmdir()  # only if nothing else (a log the user reads, say) is there
        except OSError:
            pass

    def stop(self) -> None:
        for node in reversed(self.nodes):
            if node.real:
                continue  # the fleet stops them
            try:
                node.agent.stop()
            except Exception as e:  # keep stopping the rest
                log.warning("stopping node %s: %s", node.name, e)
        self.nodes = []
        if self.addresses is not None:
            self.addresses.release()
            self.addresses = None
        if self.fleet is not None:
            self.fleet.stop()
            self.fleet = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    # -- steps ---------------------------------------------------------------------------
    def _end_leftovers(self) -> None:
        from cdriver.sim.node.simulated.leftovers import kill_processes_below

        ended = kill_processes_below(self.settings.base_dir)
        if ended:
            self.progress(f"    ended {len(ended)} processes a dead run left: {' '.join(map(str, ended))}")

    def _binaries(self) -> None:
        from cdriver.sim.controlplane.binaries import control_plane_binaries, helm_binary

        binaries = control_plane_binaries()
        self._binaries_obj = binaries
        self.helm = helm_binary()
        self.kubectl = getattr(binaries, "kubectl", None)
        if self.settings.driver == DRIVER_UPSTREAM:
            from cdriver.sim.world.upstream_driver import peer_build

            self.peer = peer_build()

    def _start_cluster(self) -> None:
        from cdriver.sim.controlplane.cluster import LocalCluster

        run_dir = self.settings.base_dir / WORLD_DIRS[0]
        egress = None
        if self.settings.real_nodes:
            from cdriver.sim.node.real.fleet import RealFleet

            self.fleet = RealFleet(self.settings.base_dir)
            self.fleet.start_proxy()
            egress = self.fleet.egress_socket
        from cdriver.sim.controlplane.cluster import APISERVER, FAIRNESS_ARGS

        extra = {APISERVER: list(FAIRNESS_ARGS)} if self.settings.api_fairness else {}
        self.cluster = LocalCluster(run_dir=run_dir, binaries=self._binaries_obj, egress_proxy=egress,
                                    extra_args=extra)
        self.cluster.start()

    def _node_parts(self) -> None:
        from cdriver.sim.node.real.images import node_images
        from cdriver.sim.node.real.node import node_binaries

        node_binaries()
        self.node_images = node_images(driver=True)

    def _topology(self) -> Any:
        from cdriver.sim.gpu.topology import demo_topology_path, load_topology

        path = self.settings.topology or demo_topology_path()
        return path, load_topology(path)

    def _driver_image(self) -> None:
        from cdriver.sim.world.emulated_driver import prepare

        dest = self.settings.base_dir / WORLD_DIRS[2]
        shutil.rmtree(dest, ignore_errors=True)
        self.emulated = prepare(self.settings.driver_platform, dest, self.progress)
        self.progress(f"    {self.emulated.ref} ({self.settings.driver_platform})"
                      + (f" through {self.emulated.emulator.name}" if self.emulated.emulator else ""))

    def _start_nodes(self) -> None:
        import threading

        from cdriver.sim.gpu.topology import clique_label
        from cdriver.sim.node.addresses import lease_block
        from cdriver.sim.node.simulated.agent import NodeAgent
        path, topology = self._topology()
        names = topology.nodes()[: self.settings.nodes]
        if len(names) < self.settings.nodes:
            raise WorldError(f"the topology {path} lists {len(names)} nodes, {self.settings.nodes} were asked for")
        names += list(self.settings.extra_nodes)
        options = node_options(self.settings)
        self.addresses = lease_block()
        real_specs = []
        for i, name in enumerate(names, start=1):
            identity = topology.find(name)
            fabric = identity is not None and name not in self.settings.non_fabric_nodes
            clique = clique_label(identity) if (identity and fabric) else ""
            labels = {"nvidia.com/gpu.present": "true"}
            if clique:
                # What GPU feature discovery sets on a real node.
                labels[constants.LABEL_NODE_CLIQUE] = clique
            if i <= self.settings.real_nodes:
                from cdriver.sim.node.real.fleet import RealNodeSpec

                real_specs.append(RealNodeSpec(name, labels, str(path), "completed" if fabric else "not_supported"))
                self.nodes.append(SimNode(name, "", clique, None, real=True))
                continue
            ip = self.addresses.ip(i)
            agent = NodeAgent(self.raw, name, ip, self.settings.base_dir / WORLD_DIRS[1] / name, labels=labels,
                              options=options, topology=str(path), pki_dir=self.cluster.pki.dir,
                              fabric_state="completed" if fabric else "not_supported",
                              **self._node_driver_parts())
            self.nodes.append(SimNode(name, ip, clique, agent))
        errors: list[BaseException] = []

        def run(node: SimNode) -> None:
            try:
                node.agent.start()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(WorldError(f"node {node.name}: {e}"))

        threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in self.nodes if not n.real]
        for t in threads:
            t.start()
        if real_specs:
            self._start_real_nodes(real_specs)
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for node in self.nodes:
            self.progress(f"    {node.name} at {node.ip}, clique {node.clique or '<not fabric-attached>'}")

    def _node_driver_parts(self) -> dict[str, Any]:
        """What a simulated node needs to run the chosen driver's image (NodeAgent arguments)."""
        if self.peer is not None:
            return {"images": (self.peer.image(),)}
        if self.emulated is not None:
            from cdriver.sim.gpu.nvml_build import cross_compiler

            cc = cross_compiler(self.emulated.platform) if self.emulated.emulator is not None else None
            return {"images": (self.emulated.image(),), "stand_in_command": self.emulated.command, "nvml_cc": cc}
        return {}

    def _start_real_nodes(self, specs: list[Any]) -> None:
        real = {n.name: n for n in self.fleet.start(self.cluster, specs, self.node_images,
                                                     self.settings.base_dir / WORLD_DIRS[1])}
        for node in self.nodes:
            if node.real:
                node.agent, node.ip = real[node.name], real[node.name].ip

    def helm_cmd(self, *args: str) -> subprocess.CompletedProcess:
        """Run helm against this cluster."""
        assert self.helm is not None
        argv = [str(self.helm), *args, "--kubeconfig", str(self.kubeconfig)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)

    def chart_args(self, driver: str) -> list[str]:
        """The chart of `driver` and its values for this cluster (helm install/upgrade arguments)."""
        if driver == DRIVER_UPSTREAM:
            from cdriver.sim.world.upstream_driver import peer_helm_values, peer_local_values

            if self.peer is None:
                raise WorldError("the upstream driver's chart is known only to a world started with driver=upstream")
            if self.settings.values_file is not None:
                values = ["-f", str(self.settings.values_file), *peer_local_values(SIM_DRIVER_ROOT)]
            else:
                values = peer_helm_values(SIM_DRIVER_ROOT, self.settings.imex_mode, _gates(self.settings))
            return [str(self.peer.chart), *values, *self.settings.extra_values]
        values = helm_values(self.settings)
        if self.node_images is not None:  # real nodes run the driver image imported into their containerd
            repository, _, tag = self.node_images.refs["cdriver"].rpartition(":")
            values += ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]
        if self.emulated is not None:  # simulated nodes map this image to the unpacked one
            values += self.emulated.chart_values()
        return [str(chart_dir()), *values]

    def _install_chart(self) -> None:
        out = self.helm_cmd("upgrade", "--install", RELEASE, *self.chart_args(self.settings.driver),
                            "--namespace", DRIVER_NAMESPACE, "--create-namespace")
        if out.returncode != 0:
            raise WorldError(f"helm install failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")

    def _wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        from cdriver.kube.resources import RESOURCES

        deadline = time.monotonic() + timeout
        want = {n.name for n in self.nodes}
        last = ""
        while time.monotonic() < deadline:
            pods = self.raw.list(RESOURCES["pods"], namespace=DRIVER_NAMESPACE)["items"]
            ready_plugins = {p["spec"].get("nodeName") for p in pods if _is_plugin(p) and _pod_ready(p)}
            controller_ready = any(_is_controller(p) and _pod_ready(p) for p in pods)
            slices = self.raw.list(RESOURCES["resourceslices"])["items"]
            published = {s["spec"].get("nodeName") for s in slices if s["spec"].get("driver") == constants.DRIVER_NAME}
            if controller_ready and want <= ready_plugins and want <= published:
                return
            last = (f"controller ready: {controller_ready}; plugins ready on {sorted(ready_plugins)}; "
                    f"ResourceSlices from {sorted(published)} (want {sorted(want)})")
            time.sleep(0.5)
        raise WorldError(f"the driver was not ready after {timeout:.0f} s: {last}\n{self.pod_log_tails()}")

    def kubectl_cmd(self, *args: str, timeout: float = 60.0, stdin: str | None = None) -> subprocess.CompletedProcess:
        """Run the matching kubectl against this cluster (text output)."""
        assert self.kubectl is not None
        # its discovery cache stays with the cluster's files
        cache = os.environ.get("KUBECACHEDIR") or str(self.settings.base_dir / WORLD_DIRS[0] / "kubectl-cache")
        return subprocess.run([str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "KUBECACHEDIR": cache})

    def exec(self, namespace: str, pod: str, argv: list[str], container: str | None = None,
             timeout: float = 60.0) -> subprocess.CompletedProcess:
        """`kubectl exec` into a pod on a simulated node (served by the node's kubelet API)."""
        args = ["exec", "-n", namespace, pod]
        if container:
            args += ["-c", container]
        return self.kubectl_cmd(*args, "--", *argv, timeout=timeout)

    # -- diagnostics ---------------------------------------------------------------------
    def node(self, name: str) -> SimNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise WorldError(f"no simulated node {name!r}")

    def pod_log_tails(self, namespace: str = DRIVER_NAMESPACE, lines: int = 15) -> str:
        """The last lines of every container log in `namespace` (for failure messages)."""
        from cdriver.kube.resources import RESOURCES

        out = []
        for pod in self.raw.list(RESOURCES["pods"], namespace=namespace)["items"]:
            node_name = pod["spec"].get("nodeName")
            node = next((n for n in self.nodes if n.name == node_name), None)
            if node is None:
                continue
            for ctr in pod["spec"].get("containers", []):
                path = node.agent.container_log(namespace, pod["metadata"]["name"], ctr["name"])
                if path and os.path.exists(path):
                    text = Path(path).read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"--- {pod['metadata']['name']}/{ctr['name']} on {node_name}:\n" + "\n".join(text))
        return "\n".join(out)


#: pod labels that name a driver component: upstream's, which both charts set, and cdriver's own
COMPONENT_LABELS = (constants.LABEL_COMPONENT, "app.kubernetes.io/component")
#: each chart's `app.kubernetes.io/name` of its pods: which driver a pod is part of
CHART_NAMES = {"cdriver": DRIVER_CDRIVER, constants.UPSTREAM_CHART_NAME: DRIVER_UPSTREAM}


def component_of(pod: dict) -> str:
    """The driver component a pod of either chart runs ("controller", "kubelet-plugin"), or ""."""
    labels = pod["metadata"].get("labels") or {}
    return next((labels[key] for key in COMPONENT_LABELS if key in labels), "")


def driver_of(pod: dict) -> str:
    """Which chart's pod this is (DRIVER_CDRIVER or DRIVER_UPSTREAM), or "" for neither's: both
    charts give their pods upstream's component label, so that alone does not tell them apart."""
    if not component_of(pod):
        return ""
    return CHART_NAMES.get((pod["metadata"].get("labels") or {}).get("app.kubernetes.io/name", ""), "")


def _is_plugin(pod: dict) -> bool:
    return component_of(pod) == constants.COMPONENT_KUBELET_PLUGIN


def _is_controller(pod: dict) -> bool:
    return component_of(pod) == constants.COMPONENT_CONTROLLER


def _pod_ready(pod: dict) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False
