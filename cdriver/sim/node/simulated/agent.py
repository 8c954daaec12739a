"""NodeAgent: one simulated Kubernetes node (kubelet + container runtime stand-in).

Registers its Node (own loopback address 127.0.1.N as InternalIP, capacity, Ready), renews
its Lease in ``kube-node-lease`` so node-lifecycle-controller keeps it schedulable, runs
every pod bound to it as real processes (`cdriver.sim.node.simulated.pods`), registers DRA plugins
from its ``plugins_registry`` (`cdriver.sim.node.simulated.plugins`), and offers faults on demand for
tests (kill a container, stop/restart the agent, drop a plugin socket, pause the heartbeat).
Like kubelet's, a restart of the agent leaves the containers running and takes them back.

Several agents can run in one process (each with its own root and address) or one per
process (``cdriver sim node run``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer, uid_index
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.sim.node import registration
from cdriver.sim.node.addresses import AddressBlock, lease_block
from cdriver.sim.node.simulated.claim_cache import ClaimCache
from cdriver.sim.node.simulated.claims import PodState, unprepare_pod_claims
from cdriver.sim.node.simulated.container import run_in_container
from cdriver.sim.node.simulated.container_store import ContainerStore
from cdriver.sim.node.simulated.container_tree import command_pid, tree_pids
from cdriver.sim.node.simulated.images import ImageContent
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.node.simulated.leftovers import kill_leftovers
from cdriver.sim.node.simulated.plugins import PluginManager
from cdriver.sim.node.simulated.pod_addresses import PodAddresses
from cdriver.sim.node.simulated.pods import PodWorker
from cdriver.sim.node.simulated.resource_health import HealthCache
from cdriver.sim.node.simulated.runtime import NodeOptions, NodeRuntime

PODS = RESOURCES["pods"]
NODES = RESOURCES["nodes"]
LEASES = RESOURCES["leases"]
SLICES = RESOURCES["resourceslices"]
DEFAULT_CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
EVENT_COMPONENT = "kubelet"
LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(message)s"


class NodeError(CdriverError):
    """A simulated node cannot start or a request about it cannot be served."""


def node_ip(index: int) -> str:
    """The loopback address of node number `index` (1..254): 127.0.1.<index>."""
    if not 1 <= index <= 254:
        raise NodeError(f"node index {index} is out of range 1..254")
    return f"127.0.1.{index}"


def executable_dir() -> str:
    """Directory put first on containers' PATH: where this `cdriver` (and its Python) lives."""
    return os.path.dirname(sys.executable)


def api_address(server: str) -> tuple[str, int]:
    """(host, port) of the API server URL."""
    parsed = urlparse(server)
    if not parsed.hostname:
        raise NodeError(f"API server address {server!r} has no host")
    return parsed.hostname, parsed.port or 443


class NodeAgent:
    """A simulated node. ``with NodeAgent(...) as node:`` starts and stops it."""

    def __init__(self, raw: RawClient | str, name: str, ip: str, root: str | os.PathLike[str], *,
                 labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None,
                 options: NodeOptions | None = None, topology: str | Path | None = None,
                 driver_root: bool = False, profile: str | None = None, fabric_state: str = "completed",
                 kubelet_port: int = 10250, pki_dir: str | os.PathLike[str] | None = None,
                 images: Iterable[ImageContent] = (), stand_in_command: list[str] | None = None,
                 nvml_cc: str | None = None) -> None:
        if isinstance(raw, str):
            from cdriver.kube.client import new_raw_client

            raw = new_raw_client(raw)
        self.raw = raw
        self.name = name
        self.ip = ip
        self.layout = NodeLayout.at(root)
        self.labels = dict(labels or {})
        self.capacity = dict(capacity or DEFAULT_CAPACITY)
        self.options = options or NodeOptions()
        self.topology = topology
        self.want_driver_root = driver_root or topology is not None
        self.profile = profile
        self.fabric_state = fabric_state
        self.kubelet_port = kubelet_port
        self.pki_dir = Path(pki_dir) if pki_dir is not None else None
        self.images = tuple(images)
        #: what the driver root's stand-ins run and the NVML stand-in's compiler (defaults: this
        #: cdriver and gcc; a driver image of another architecture brings its own, see emulated_driver)
        self.stand_in_command = stand_in_command
        self.nvml_cc = nvml_cc
        self.kubelet_server: Any = None
        self.log = logging.getLogger(f"cdriver.sim.node.{name}")
        self.recorder = EventRecorder(raw, EVENT_COMPONENT, host=name)
        self.plugins: PluginManager | None = None
        self.informer: Informer | None = None
        self.runtime: NodeRuntime | None = None
        self.workers: dict[str, PodWorker] = {}
        self.driver_root: Any = None
        self.node_uid = ""
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeat_paused = threading.Event()
        self._wipe_timers: dict[str, threading.Timer] = {}
        self._log_handler: logging.Handler | None = None
        self._running = False
        #: the address block this node's address comes from, kept leased while the node exists
        self.addresses: AddressBlock | None = None
        #: containers kept running while the agent restarts (the container runtime's part)
        self.containers = ContainerStore()
        #: the pods' own addresses, kept across an agent restart as their containers are
        self.pod_addresses = PodAddresses()

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    def start(self, wait: bool = True) -> NodeAgent:
        """Register the Node, start heartbeat, plugin watcher and pods; with `wait`, return
        once the Node is schedulable."""
        if self._running:
            return self
        self.layout.ensure()
        self._setup_logging()
        self.log.info("starting node %s (%s) in %s", self.name, self.ip, self.layout.root)
        left = kill_leftovers(self.layout.pods_dir, keep=self.containers.mount_namespaces())
        if left:
            self.log.warning("ended %d processes a previous run of this node left behind: %s", len(left),
                             " ".join(map(str, left)))
        self._running = True
        try:
            self._start(wait)
        except BaseException:
            self.stop()
            raise
        self.log.info("node %s is up", self.name)
        return self

    def _start(self, wait: bool) -> None:
        if self.want_driver_root:
            from cdriver.sim.gpu.driver_root import create_driver_root

            self.driver_root = create_driver_root(self.layout.driver_root, self.name, self.topology, self.profile,
                                                  fabric_state=self.fabric_state,
                                                  wrapper_command=self.stand_in_command, cc=self.nvml_cc)
        host, port = api_address(self.raw.server)
        self._stop.clear()
        if self.pki_dir is not None:
            self._start_kubelet_server(self.pki_dir)
        self._register_node()
        self._delete_slices()
        health = HealthCache()
        self.plugins = PluginManager(self.layout, self.log, scan_interval=self.options.plugin_scan_interval,
                                     on_registered=self._plugin_registered,
                                     on_unregistered=self._plugin_unregistered,
                                     health=health if self.options.resource_health else None).start()
        self.runtime = NodeRuntime(
            node_name=self.name, node_ip=self.ip, layout=self.layout, raw=self.raw, recorder=self.recorder,
            plugins=self.plugins, api_host=host, api_port=port, allocatable=dict(self.capacity),
            options=self.options, path_prefix=[executable_dir()], log=self.log,
            claims=ClaimCache(self.layout.claim_checkpoint), health=health, containers=self.containers,
            images=self.images, pod_addresses=self.pod_addresses)
        self._spawn(self._heartbeat_loop, "heartbeat")
        self._spawn(self._housekeeping_loop, "housekeeping")
        self.informer = Informer(self.raw, PODS, field_selector=f"spec.nodeName={self.name}",
                                 resync_seconds=300)
        self.informer.add_index("uid", uid_index)
        self.informer.add_handler(on_add=self._on_pod, on_update=lambda old, new: self._on_pod(new),
                                  on_delete=self._on_pod_deleted)
        self.informer.start()
        if not self.informer.wait_synced(30):
            raise NodeError(f"node {self.name}: the pod list did not load within 30 s; is the API server up?")
        self._end_kept(lambda uid: not self.informer or not self.informer.by_index("uid", uid))
        if wait:
            registration.wait_schedulable(self.raw, self.name, self.options.wait_schedulable)

    def stop(self, delete_node: bool = False, keep_containers: bool = False) -> None:
        """Stop the pods (claims stay prepared), the plugin watcher and the heartbeat; with
        `keep_containers` (a restart), the containers keep running for the next start."""
        if not keep_containers:
            self._end_kept(lambda uid: True)
        if not self._running:
            if not keep_containers:
                self.pod_addresses.close()
            return
        self.log.info("stopping node %s", self.name)
        self._running = False
        if self.informer is not None:
            self.informer.stop()
            self.informer = None
        with self._lock:
            workers = list(self.workers.values())
        for worker in workers:
            worker.shutdown(keep_containers)
        for worker in workers:
            worker.finished.wait(self.options.shutdown_grace + 15)
        with self._lock:
            self.workers.clear()
            for timer in self._wipe_timers.values():
                timer.cancel()
            self._wipe_timers.clear()
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        self._threads = []
        if self.kubelet_server is not None:
            self.kubelet_server.stop()
            self.kubelet_server = None
        if self.plugins is not None:
            self.plugins.stop()
        if delete_node:
            try:
                self.raw.delete(NODES, self.name)
            except ApiError as exc:
                if not exc.not_found:
                    self.log.warning("deleting node %s failed: %s", self.name, exc)
        if not keep_containers:
            self.pod_addresses.close()
        self.log.info("node %s stopped", self.name)
        self._teardown_logging()

    def restart(self, wait: bool = True) -> NodeAgent:
        """Stop and start again, as kubelet restarts: running containers keep running and are
        taken back by the new pod workers."""
        self.stop(keep_containers=True)
        return self.start(wait=wait)

    def _end_kept(self, gone: Callable[[str], bool]) -> None:
        """Kill the kept containers of pods for which `gone(uid)` holds."""
        for uid, pod in self.containers.take_all().items():
            if not gone(uid):
                self.containers.keep(uid, pod)
                continue
            for item in pod.containers:
                item.proc.kill_group()
                item.proc.wait(10)
                item.proc.close()
            if pod.containers:
                self.log.info("ended %d kept container(s) of pod %s", len(pod.containers), uid)

    def _spawn(self, target: Callable[[], None], role: str) -> None:
        thread = threading.Thread(target=target, name=f"node-{self.name}-{role}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _setup_logging(self) -> None:
        handler = logging.FileHandler(self.layout.node_log)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self.log.addHandler(handler)
        if self.log.level == logging.NOTSET:
            self.log.setLevel(logging.INFO)
        self._log_handler = handler

    def _teardown_logging(self) -> None:
        if self._log_handler is not None:
            self.log.removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    def _start_kubelet_server(self, pki_dir: Path) -> None:
        from cdriver.sim.controlplane import pki
        from cdriver.sim.node.simulated.kubelet_server import KubeletServer

        files = pki.PKIFiles(pki_dir)
        try:
            cert, key = pki.issue_kubelet_serving_cert(files, self.name, (self.ip,), self.layout.pki_dir)
        except (OSError, ValueError) as exc:
            raise NodeError(f"node {self.name}: cannot issue the kubelet serving certificate from the cluster "
                            f"CA in {self.pki_dir}: {exc}; pass the cluster's pki directory") from None
        self.kubelet_server = KubeletServer(self, self.name, self.ip, self.kubelet_port, cert, key, files.ca_cert,
                                            (pki.KUBELET_CLIENT_USER,), self.log).start()

    # -- Node object and heartbeat ---------------------------------------------------------------
    def node_object(self) -> dict[str, Any]:
        port = self.kubelet_server.port if self.kubelet_server is not None else self.kubelet_port
        body = registration.node_object(self.name, self.labels, internal_ip=self.ip, capacity=self.capacity,
                                   kubelet_port=port)
        body["status"]["nodeInfo"]["containerRuntimeVersion"] = "cdriver-sim://1"
        if self.kubelet_server is not None:
            from cdriver.sim.node.simulated.kubelet_server import WEBSOCKET_NODE_FEATURE

            body["status"]["declaredFeatures"] = [WEBSOCKET_NODE_FEATURE]
        return body

    def _register_node(self) -> None:
        body = self.node_object()
        try:
            node = self.raw.create(NODES, body)
        except ApiError as exc:
            if not exc.already_exists:
                raise NodeError(f"node {self.name}: cannot register the Node: {exc}") from None
            node = self.raw.patch(NODES, self.name, {"metadata": {"labels": body["metadata"]["labels"]}})
        self.node_uid = node["metadata"]["uid"]
        self._post_node_status(body)
        self._renew_lease(create=True)

    def _post_node_status(self, body: dict[str, Any] | None = None) -> None:
        body = body or self.node_object()
        self.raw.patch(NODES, self.name, {"status": body["status"]}, patch_type="strategic",
                       subresource="status")

    def _renew_lease(self, create: bool = False) -> None:
        try:
            spec = {"renewTime": registration.micro_time(dt.datetime.now(dt.UTC)), "holderIdentity": self.name,
                    "leaseDurationSeconds": registration.LEASE_DURATION_SECONDS}
            self.raw.patch(LEASES, self.name, {"spec": spec}, registration.NODE_LEASE_NAMESPACE)
        except ApiError as exc:
            if not exc.not_found:
                raise
            node = {"metadata": {"name": self.name, "uid": self.node_uid}}
            try:
                self.raw.create(LEASES, registration.lease_object(node), registration.NODE_LEASE_NAMESPACE)
            except ApiError as again:
                if not again.already_exists:
                    raise

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stop.wait(self.options.heartbeat_interval):
            if self._heartbeat_paused.is_set():
                continue
            try:
                self._renew_lease()
                if time.monotonic() - last_status >= self.options.status_interval:
                    last_status = time.monotonic()
                    self._post_node_status()
            except ApiError as exc:
                if exc.not_found:  # the Node was deleted: register again, as kubelet would
                    try:
                        self._register_node()
                    except (ApiError, NodeError) as again:
                        self.log.warning("re-registering node %s failed: %s", self.name, again)
                else:
                    self.log.warning("heartbeat of node %s failed: %s", self.name, exc)

    def pause_heartbeat(self) -> None:
        """Stop renewing the Lease (the Node turns NotReady after the grace period); pods keep running."""
        self._heartbeat_paused.set()

    def resume_heartbeat(self) -> None:
        """Renew the Lease again and report Ready now."""
        self._heartbeat_paused.clear()
        self._renew_lease()
        self._post_node_status()

    # -- ResourceSlices --------------------------------------------------------------------------
    def _delete_slices(self, driver: str | None = None) -> int:
        selector = f"spec.nodeName={self.name}" + (f",spec.driver={driver}" if driver else "")
        deleted = 0
        try:
            items = self.raw.list(SLICES, field_selector=selector)["items"]
        except ApiError as exc:
            self.log.warning("listing ResourceSlices of node %s failed: %s", self.name, exc)
            return 0
        for item in items:
            try:
                self.raw.delete(SLICES, item["metadata"]["name"])
                deleted += 1
            except ApiError as exc:
                if not exc.not_found:
                    self.log.warning("deleting ResourceSlice %s failed: %s", item["metadata"]["name"], exc)
        if deleted:
            self.log.info("deleted %d ResourceSlice(s) of node %s%s", deleted, self.name,
                          f" for driver {driver}" if driver else "")
        return deleted

    def _plugin_registered(self, driver: str) -> None:
        with self._lock:
            timer = self._wipe_timers.pop(driver, None)
        if timer is not None:
            timer.cancel()

    def _plugin_unregistered(self, driver: str) -> None:
        """Kubelet removes the slices of this node of a gone or unreachable driver after a grace period."""
        def wipe() -> None:
            with self._lock:
                self._wipe_timers.pop(driver, None)
            if self._running and self.plugins is not None and not self.plugins.usable(driver):
                self._delete_slices(driver)

        timer = threading.Timer(self.options.slice_wipe_delay, wipe)
        timer.daemon = True
        with self._lock:
            old = self._wipe_timers.pop(driver, None)
            if old is not None:
                old.cancel()
            self._wipe_timers[driver] = timer
        timer.start()

    # -- pods --------------------------------------------------------------------------------------
    def _on_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            if not self._running or self.runtime is None:
                return
            worker = self.workers.get(uid)
            if worker is None:
                worker = PodWorker(self.runtime, pod, on_exit=self._worker_done)
                self.workers[uid] = worker
                worker.start()
                return
        worker.update(pod)

    def _on_pod_deleted(self, pod: dict[str, Any]) -> None:
        with self._lock:
            worker = self.workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.deleted()

    def _worker_done(self, uid: str) -> None:
        with self._lock:
            worker = self.workers.get(uid)
            if worker is not None and worker.finished.is_set():
                self.workers.pop(uid, None)
                if self._running:  # the pod ended (not a stop of the node): its address is free
                    self.pod_addresses.release(uid)

    def _housekeeping_loop(self) -> None:
        interval = max(min(self.options.status_interval, 30.0), 1.0)
        while not self._stop.wait(interval):
            try:
                self.cleanup_orphans()
            except Exception:  # noqa: BLE001 - keep the node running
                self.log.exception("orphaned pod cleanup failed")

    def cleanup_orphans(self) -> list[str]:
        """Release the claims of, and remove the dirs of, pods that are gone and have no worker."""
        if self.informer is None or not self.informer.synced or self.runtime is None:
            return []
        removed = []
        try:
            uids = {d.name for d in self.layout.pods_dir.iterdir() if d.is_dir()}
        except FileNotFoundError:
            uids = set()
        uids |= self.runtime.claims.pod_uids()
        for uid in sorted(uids):
            with self._lock:
                if uid in self.workers:
                    continue
            if self.informer.by_index("uid", uid):
                continue
            state = PodState.load(self.layout.pod_state_file(uid))
            errors = unprepare_pod_claims(self.runtime, uid)
            if errors:
                self.log.info("orphaned pod %s: unprepare pending: %s", uid, "; ".join(errors))
                continue
            shutil.rmtree(self.layout.pod_dir(uid), ignore_errors=True)
            removed.append(uid)
            self.log.info("removed orphaned pod %s (%s/%s)", uid, state.namespace, state.name)
        return removed

    # -- queries ------------------------------------------------------------------------------------
    def worker(self, namespace: str, name: str) -> PodWorker | None:
        with self._lock:
            for worker in self.workers.values():
                if worker.namespace == namespace and worker.name == name:
                    return worker
        return None

    def _require_worker(self, namespace: str, name: str) -> PodWorker:
        worker = self.worker(namespace, name)
        if worker is None:
            raise NodeError(f"pod {namespace}/{name} is not running on node {self.name}")
        return worker

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The pid of a container's launcher (one per run of the container; not its command)."""
        live = self._require_worker(namespace, pod).container_info(container)
        return live.proc.pid if live else None

    def container_main_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The machine pid of a container's command (its PID 2: the process its image runs)."""
        live = self._require_worker(namespace, pod).container_info(container)
        return command_pid(live.proc.init_pid) if live and live.proc.init_pid else None

    def container_tree_pids(self, namespace: str, pod: str, container: str) -> list[int]:
        """The container's command and every process below it (empty when it is not running)."""
        main = self.container_main_pid(namespace, pod, container)
        return tree_pids(main) if main else []

    def container_probe_cpu_s(self, namespace: str, pod: str, container: str) -> float:
        """CPU seconds a container's exec probes have used (all its runs): the probes run from
        the node through nsenter, outside the container's process tree, so its processes' CPU
        times leave them out."""
        return self._require_worker(namespace, pod).probe_cpu_seconds(container)

    def container_launcher_pids(self, namespace: str, pod: str, container: str) -> list[int]:
        """The pids of a container's launcher processes: the shim the node waits on and the
        container's init (node overhead, not the container's command; empty when not running)."""
        live = self._require_worker(namespace, pod).container_info(container)
        if live is None:
            return []
        return [pid for pid in (live.proc.pid, live.proc.init_pid) if pid]

    def container_log(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path | None:
        """The CRI-format log file of a container's current (or previous) run."""
        return self._require_worker(namespace, pod).log_path(container, previous)

    def exec_in_container(self, namespace: str, pod: str, container: str, argv: list[str],
                          timeout: float = 30.0, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        """Run `argv` inside a running container (its mount namespace and environment)."""
        live = self._require_worker(namespace, pod).container_info(container)
        if live is None:
            raise NodeError(f"container {container!r} of pod {namespace}/{pod} is not running")
        return run_in_container(live.proc.init_pid, argv, live.env, live.working_dir, timeout, stdin)

    def wait_for_plugin(self, driver: str, timeout: float = 30.0) -> bool:
        return self.plugins is not None and self.plugins.wait_for(driver, timeout)

    # -- faults ---------------------------------------------------------------------------------------
    def kill_container(self, namespace: str, pod: str, container: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` (default SIGKILL) to a container's main process; returns its pid."""
        return self._require_worker(namespace, pod).kill_container(container, sig)

    def drop_plugin_socket(self, driver: str) -> Path:
        """Remove a registered plugin's registration socket (as if the plugin vanished)."""
        if self.plugins is None:
            raise NodeError(f"node {self.name} is not running")
        for plugin in self.plugins.plugins():
            if plugin.driver == driver:
                plugin.registration_socket.unlink(missing_ok=True)
                return plugin.registration_socket
        raise NodeError(f"DRA driver {driver} is not registered on node {self.name}")


def start_nodes(raw: RawClient | str, count: int, base_dir: str | os.PathLike[str], *, prefix: str = "node",
                first_index: int = 1, labels: dict[str, str] | None = None,
                options: NodeOptions | None = None, wait: bool = True, addresses: AddressBlock | None = None,
                **kwargs: Any) -> list[NodeAgent]:
    """Start `count` nodes `<prefix>-<i>` at address <i> of `addresses` (default: a block leased
    for as long as the agents exist) with roots `<base_dir>/<name>`, in parallel."""
    block = addresses or lease_block()
    agents = [NodeAgent(raw, f"{prefix}-{i}", block.ip(i), Path(base_dir) / f"{prefix}-{i}", labels=labels,
                        options=options, **kwargs) for i in range(first_index, first_index + count)]
    for agent in agents:
        agent.addresses = block
    errors: list[BaseException] = []

    def run(agent: NodeAgent) -> None:
        try:
            agent.start(wait=wait)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a,), daemon=True) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for agent in agents:
            agent.stop()
        raise errors[0]
    return agents
