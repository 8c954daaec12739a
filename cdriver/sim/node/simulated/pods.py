"""The pod worker: one thread per pod bound to the node, driving it like kubelet does.

Stages: ``setup`` (volumes, /etc/hosts, NodePrepareResources for the pod's claims; failures
keep the containers waiting in ContainerCreating, record an Event and are retried with
backoff) → ``init`` (init containers in order; sidecars, i.e. init containers with
``restartPolicy: Always``, keep running) → ``run`` (containers with probes and the restart
policy, crash loops backed off) → ``done`` (all containers finished: claims unprepared).
A pod with a deletionTimestamp is terminated gracefully (SIGTERM, grace period, SIGKILL),
its claims unprepared, and then deleted with grace period 0, as kubelet does.

Restart counts and prepared claims are kept in ``pods/<uid>/state.json`` so a restarted
node agent continues counting and can unprepare the claims of pods deleted meanwhile. An agent
stopped for a restart keeps the containers running, as kubelet's restart does: the worker hands
them and its container records to the node's `ContainerStore` and the next worker of the pod
takes them back (probes start anew).
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdriver.dra.client import DRAError
from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import being_deleted, meta_of
from cdriver.kube.resources import RESOURCES
from cdriver.sim.node.simulated.cdi_apply import container_cdi_ids, launch_edits
from cdriver.sim.node.simulated.claims import (
    PodState,
    claim_drivers,
    pod_claim_names,
    reserved_for,
    unprepare_pod_claims,
)
from cdriver.sim.node.simulated.container import (
    ContainerProcess,
    LaunchSpec,
    StartError,
    exit_details,
    run_in_container,
)
from cdriver.sim.node.simulated.container_store import KeptContainer, KeptPod
from cdriver.sim.node.simulated.env import (
    EnvContext,
    EnvError,
    command_line,
    container_env,
    probe_command,
)
from cdriver.sim.node.simulated.images import find_image
from cdriver.sim.node.simulated.probes import (
    LIVENESS,
    READINESS,
    STARTUP,
    ProbeWorker,
    check_exec,
    check_grpc,
    check_http,
    check_tcp,
)
from cdriver.sim.node.simulated.runtime import NodeRuntime
from cdriver.sim.node.simulated.status import (
    CONTAINER_ID_SCHEME,
    FAILED,
    REASON_CONFIG_ERROR,
    REASON_CRASH_LOOP,
    REASON_CREATING,
    REASON_POD_INITIALIZING,
    REASON_START_ERROR,
    SUCCEEDED,
    WAITING,
    ContainerRecord,
    PodView,
    comparable,
    now_utc,
    pod_status,
    rfc3339,
)
from cdriver.sim.node.simulated.volumes import BindMount, PodVolumes, VolumeContext, VolumeError, container_mounts

PODS = RESOURCES["pods"]
CLAIMS = RESOURCES["resourceclaims"]
TICK = 0.2
DEFAULT_GRACE = 30


# --- pure helpers --------------------------------------------------------------------------

def backoff_delay(failures: int, base: float, maximum: float) -> float:
    """Kubelet's crash-loop backoff: the first restart is immediate, then base, 2*base, ..."""
    if failures <= 0:
        return 0.0
    return min(base * (2 ** (failures - 1)), maximum)


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def hosts_file(pod: dict[str, Any], ip: str, node_name: str) -> str:
    """A kubelet-managed /etc/hosts for the pod."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet",
             "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters"]
    if spec.get("hostNetwork"):
        lines.append(f"{ip}\t{node_name}")
    else:
        hostname = spec.get("hostname") or meta.get("name", "")
        names = [hostname]
        if spec.get("subdomain"):
            names.insert(0, f"{hostname}.{spec['subdomain']}.{meta.get('namespace', 'default')}.svc.cluster.local")
        lines.append(f"{ip}\t{' '.join(names)}")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("")
        lines.append("# Entries added by HostAliases.")
        for alias in aliases:
            lines.append(f"{alias.get('ip', '')}\t{' '.join(alias.get('hostnames') or [])}")
    return "\n".join(lines) + "\n"


def sidecar(container: dict[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


# --- a container's live parts ----------------------------------------------------------------

@dataclass
class LiveContainer:
    """The current run of a container: process, env, probes and pending kill."""

    name: str
    run_id: int
    proc: ContainerProcess
    env: dict[str, str]
    working_dir: str
    probes: list[ProbeWorker] = field(default_factory=list)
    kill_deadline: float | None = None
    kill_reason: str = ""
    started_mono: float = field(default_factory=time.monotonic)

    def stop_probes(self) -> None:
        for p in self.probes:
            p.stop()


#: the node log's line per NodePrepareResources call (benchmarks read its duration)
PREPARE_TIMING = "NodePrepareResources timing:"


class PodWorker:
    """Runs one pod. Thread-safe entry points: `update`, `deleted`, `shutdown`, `kill_container`,
    `container_info`."""

    def __init__(self, rt: NodeRuntime, pod: dict[str, Any], on_exit: Callable[[str], None] | None = None) -> None:
        self.rt = rt
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.log = rt.log
        self.on_exit = on_exit
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._deleted = False
        self._shutdown = False
        self._keep_containers = False
        self.stage = "setup"
        self.state = PodState.load(rt.layout.pod_state_file(self.uid))
        self.state.namespace, self.state.name = self.namespace, self.name
        spec = pod.get("spec") or {}
        self.records: dict[str, ContainerRecord] = {}
        for c in spec.get("initContainers") or []:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), init=True, sidecar=sidecar(c),
                restart_count=self.state.restarts.get(c["name"], 0))
        for c in spec.get("containers") or []:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), restart_count=self.state.restarts.get(c["name"], 0))
        self.live: dict[str, LiveContainer] = {}
        self.failures: dict[str, int] = {}
        self.not_before: dict[str, float] = {}
        self.setup_failures = 0
        self.setup_not_before = 0.0
        self.sandbox_ready = False
        self.initialized = False
        self.volumes: PodVolumes | None = None
        self.volume_paths: dict[str, Path] = {}
        self.prepared: dict[str, list[PreparedDevice]] = {}
        self._last_status: dict[str, Any] | None = None
        self._last_refresh = time.monotonic()
        self._run_ids = 0
        self._pending_message = ""
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}-{self.name}", daemon=True)

    # -- entry points ----------------------------------------------------------------------
    def start(self) -> PodWorker:
        self.thread.start()
        return self

    def update(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self.pod = pod
        self._wake.set()

    def deleted(self) -> None:
        """The pod object is gone from the API: stop everything now."""
        self._deleted = True
        self._wake.set()

    def shutdown(self, keep_containers: bool = False) -> None:
        """The node agent stops: stop the containers (or, for a restart, keep them running
        in the node's store), keep claims prepared."""
        self._keep_containers = keep_containers
        self._shutdown = True
        self._wake.set()

    def kill_container(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to a container's main process (fault injection); returns its pid."""
        with self._lock:
            live = self.live.get(name)
        if live is None:
            raise CdriverError(f"container {name!r} of pod {self.namespace}/{self.name} is not running")
        live.proc.signal(sig)
        self._wake.set()
        return live.proc.pid

    def container_info(self, name: str) -> LiveContainer | None:
        with self._lock:
            return self.live.get(name)

    def log_path(self, name: str, previous: bool = False) -> Path | None:
        """The log file of the container's current (or previous) run."""
        record = self.records.get(name)
        if record is None:
            return None
        restart = record.restart_count - (1 if previous else 0)
        if restart < 0:
            return None
        return self.rt.layout.container_log(self.namespace, self.name, self.uid, name, restart)

    # -- helpers -----------------------------------------------------------------------------
    def _pod(self) -> dict[str, Any]:
        with self._lock:
            return self.pod

    def _spec(self) -> dict[str, Any]:
        return self._pod().get("spec") or {}

    def _containers(self, init: bool) -> list[dict[str, Any]]:
        return list(self._spec().get("initContainers" if init else "containers") or [])

    def _container(self, name: str) -> dict[str, Any]:
        for c in self._containers(True) + self._containers(False):
            if c["name"] == name:
                return c
        raise KeyError(name)

    def _event(self, type_: str, reason: str, message: str) -> None:
        # list items carry no kind; `kubectl describe` selects events by involvedObject.kind
        self.rt.recorder.event({**self._pod(), "apiVersion": "v1", "kind": "Pod"}, type_, reason, message)

    def _save_state(self) -> None:
        self.state.restarts = {n: r.restart_count for n, r in self.records.items()}
        try:
            self.state.save(self.rt.layout.pod_state_file(self.uid))
        except OSError as exc:
            self.log.warning("pod %s/%s: cannot save state: %s", self.namespace, self.name, exc)

    # -- main loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - never lose a pod silently
            self.log.exception("pod worker %s/%s crashed", self.namespace, self.name)
            self._kill_all(0)
        finally:
            self.finished.set()
            if self.on_exit:
                self.on_exit(self.uid)

    def _loop(self) -> None:
        phase = (self._pod().get("status") or {}).get("phase")
        if phase in (SUCCEEDED, FAILED):
            self.stage = "done"
        if not self.state.start_time:
            self.state.start_time = (self._pod().get("status") or {}).get("startTime") or rfc3339(now_utc())
        self._save_state()
        self._take_kept()
        # kubelet sets the pod's status at the start of a sync, before it prepares the pod's claims,
        # so an event about a failed Prepare never precedes the Pending/ContainerCreating status
        self._post_status()
        while True:
            if self._shutdown:
                if self._keep_containers:
                    self._keep()
                else:
                    self._kill_all(self.rt.options.shutdown_grace)
                return
            if self._deleted:
                self._terminate(grace=min(self._grace(), 2.0), delete_object=False)
                return
            if being_deleted(self._pod()):
                self._terminate(grace=self._grace(), delete_object=True)
                return
            self._drain_probe_events()
            self._step()
            self._post_status()
            self._wake.wait(TICK)
            self._wake.clear()

    def _grace(self) -> float:
        pod = self._pod()
        meta = meta_of(pod)
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        return float(grace if grace is not None else DEFAULT_GRACE)

    def _step(self) -> None:
        if self.stage == "setup":
            self._setup()
        if self.stage in ("init", "run"):
            self._reap()
            self._enforce_kills()
            self._refresh_volumes()
        if self.stage == "init":
            self._run_init()
        if self.stage == "run":
            self._run_main()

    # -- setup: volumes, hosts, DRA ------------------------------------------------------------
    def _setup(self) -> None:
        if time.monotonic() < self.setup_not_before:
            return
        try:
            self._setup_volumes()
            self._prepare_claims()
        except (CdriverError, OSError) as exc:
            self.setup_failures += 1
            delay = backoff_delay(self.setup_failures, self.rt.options.setup_retry_base,
                                  self.rt.options.setup_retry_max)
            self.setup_not_before = time.monotonic() + max(delay, self.rt.options.setup_retry_base)
            reason = getattr(exc, "event_reason", None) or ("FailedMount" if isinstance(exc, VolumeError)
                                                             else "FailedPrepareDynamicResources")
            if not isinstance(exc, _SetupWait) or exc.event:
                self._event("Warning", reason, str(exc))
            self.log.info("pod %s/%s not ready to start (%s): %s", self.namespace, self.name, reason, exc)
            return
        self.sandbox_ready = True
        self.stage = "init"
        self.log.info("pod %s/%s: volumes and claims ready", self.namespace, self.name)

    def _setup_volumes(self) -> None:
        pod = self._pod()
        self.volumes = PodVolumes(self.rt.layout, pod, VolumeContext(
            host_ip=self.rt.node_ip, pod_ip=self.rt.node_ip, allocatable=self.rt.allocatable,
            get_configmap=self.rt.get_configmap, get_secret=self.rt.get_secret,
            request_token=self.rt.request_token))
        self.volume_paths = self.volumes.setup()
        hosts = self.rt.layout.pod_hosts_file(self.uid)
        hosts.parent.mkdir(parents=True, exist_ok=True)
        if not hosts.exists():
            hosts.write_text(hosts_file(pod, self.rt.node_ip, self.rt.node_name))

    def _refresh_volumes(self) -> None:
        if self.volumes is None or time.monotonic() - self._last_refresh < self.rt.options.volume_refresh_interval:
            return
        self._last_refresh = time.monotonic()
        try:
            self.volumes.refresh()
        except (VolumeError, ApiError, EnvError) as exc:
            self.log.warning("pod %s/%s: volume refresh failed: %s", self.namespace, self.name, exc)

    def _prepare_claims(self) -> None:
        pod = self._pod()
        names = pod_claim_names(pod)
        if not names:
            return
        claims: list[tuple[str, dict[str, Any]]] = []
        for pod_claim, claim_name in names:
            if claim_name is None:
                raise _SetupWait(f"waiting for the ResourceClaim of pod claim {pod_claim!r} to be created",
                                 event=False)
            claim = self.rt.raw.get_or_none(CLAIMS, claim_name, self.namespace)
            if claim is None:
                raise _SetupWait(f"ResourceClaim {self.namespace}/{claim_name} not found")
            if not (claim.get("status") or {}).get("allocation"):
                raise _SetupWait(f"ResourceClaim {self.namespace}/{claim_name} is not allocated")
            if not reserved_for(claim, self.uid):
                raise _SetupWait(f"pod {self.namespace}/{self.name} is not allowed to use ResourceClaim "
                                 f"{claim_name}: it is not reserved for the pod")
            claims.append((pod_claim, claim))
        # record the pod with each claim before any driver call, so that it is always unprepared
        batches: dict[str, list[ClaimRef]] = {}
        for _, claim in claims:
            meta = claim["metadata"]
            ref = ClaimRef(self.namespace, meta["name"], meta["uid"])
            drivers = claim_drivers(claim)
            if self.rt.claims.reference(self.uid, ref, drivers):
                for driver in drivers:
                    batches.setdefault(driver, []).append(ref)
        for driver, refs in sorted(batches.items()):
            client = self.rt.plugins.client(driver)
            if client is None:
                raise DRAError(f"DRA driver {driver} is not registered on node {self.rt.node_name}")
            started = time.monotonic()
            result = client.prepare(refs, timeout=self.rt.options.prepare_timeout)
            errors = [f"NodePrepareResources failed for ResourceClaim {ref.name}: {result[ref.uid].error}"
                      for ref in refs if result[ref.uid].error]
            self.rt.log.info("%s %s claims=%d errors=%d took_ms=%.1f", PREPARE_TIMING, driver, len(refs),
                             len(errors), (time.monotonic() - started) * 1000)
            if errors:
                raise DRAError("; ".join(errors))
            for ref in refs:
                self.rt.claims.set_devices(ref, driver, result[ref.uid].devices)
        self.rt.claims.set_prepared([r for refs in batches.values() for r in refs])
        self.prepared = {}
        for pod_claim, claim in claims:
            info = self.rt.claims.get(self.namespace, claim["metadata"]["name"])
            self.prepared.setdefault(pod_claim, []).extend(info.all_devices() if info else [])

    # -- containers -------------------------------------------------------------------------------
    def _start(self, container: dict[str, Any]) -> None:
        name = container["name"]
        record = self.records[name]
        first_run = name not in self.state.started
        pod = self._pod()
        image = find_image(self.rt.images, container.get("image", ""))
        try:
            ctx = EnvContext(
                node_name=self.rt.node_name, host_ip=self.rt.node_ip, pod_ip=self.rt.node_ip,
                api_host=self.rt.api_host, api_port=self.rt.api_port, node_allocatable=self.rt.allocatable,
                services=self.rt.services(self.namespace) if (pod.get("spec") or {}).get("enableServiceLinks", True)
                else [], get_configmap=self.rt.get_configmap, get_secret=self.rt.get_secret,
                path_prefix=[*(image.path if image else ()), *self.rt.path_prefix])
            env = container_env(pod, container, ctx)
            argv = command_line(container, env)
            mounts = (image.mounts() if image else []) + container_mounts(container, self.volume_paths, env)
            if not any(m.target == "/etc/hosts" for m in mounts):
                mounts.append(BindMount(str(self.rt.layout.pod_hosts_file(self.uid)), "/etc/hosts"))
            ids = container_cdi_ids(container, self.prepared)
            devices: list[Any] = []
            if ids:
                cdi_env, devices, cdi_mounts = launch_edits(self.rt.resolve_cdi(ids), self.rt.layout)
                env.update(cdi_env)
                mounts.extend(cdi_mounts)
        except (CdriverError, OSError) as exc:
            record.set_waiting(REASON_CONFIG_ERROR, str(exc))
            self._event("Warning", "Failed", f"Error: {exc}")
            self._backoff(name)
            return
        spec = self._spec()
        hostname = self.rt.node_name if spec.get("hostNetwork") else (spec.get("hostname") or self.name)
        privileged = bool((container.get("securityContext") or {}).get("privileged"))
        working_dir = container.get("workingDir") or "/"
        run_dir = self.rt.layout.pod_runtime_dir(self.uid)
        restart = record.restart_count if first_run else record.restart_count + 1
        launch = LaunchSpec(argv=argv, env=env, working_dir=working_dir, hostname=hostname, devices=devices,
                            mounts=mounts, extra_dev_dir=str(self.rt.layout.dev_dir) if privileged else None,
                            staging=str(run_dir / f"{name}.root"))
        log_path = self.rt.layout.container_log(self.namespace, self.name, self.uid, name, restart)
        proc = ContainerProcess(launch, run_dir / f"{name}.json", log_path, f"{self.name}-{name}")
        if not first_run:
            record.restart_count += 1
        self.state.started.add(name)
        self._save_state()
        try:
            proc.start()
        except StartError as exc:
            proc.close()
            record.set_terminated(128, rfc3339(now_utc()), REASON_START_ERROR, str(exc))
            record.container_id = record.container_id or f"{CONTAINER_ID_SCHEME}{self.uid}-{name}-{restart}"
            self._event("Warning", "Failed", f"Error: {exc}")
            self.log.warning("pod %s/%s container %s failed to start: %s", self.namespace, self.name, name, exc)
            return
        self._run_ids += 1
        live = LiveContainer(name, self._run_ids, proc, env, working_dir)
        record.set_running(f"{CONTAINER_ID_SCHEME}{self.uid}-{name}-{restart}", rfc3339(now_utc()))
        with self._lock:
            self.live[name] = live
        self._start_probes(container, live, record)
        self._event("Normal", "Started", f"Started container {name}")
        self.log.info("pod %s/%s container %s started (pid %d, run %d)", self.namespace, self.name, name,
                      proc.pid, restart)

    def _start_probes(self, container: dict[str, Any], live: LiveContainer, record: ContainerRecord) -> None:
        ports = {p["name"]: p["containerPort"] for p in container.get("ports") or [] if p.get("name")}
        startup = container.get("startupProbe")
        record.started = startup is None
        has_readiness = container.get("readinessProbe") is not None
        record.ready = record.started and not has_readiness and (not record.init or record.sidecar)
        run_id = live.run_id

        def make_check(probe: dict[str, Any]) -> Callable[[float], tuple[bool, str]]:
            if "exec" in probe:
                command = probe_command(container, list((probe["exec"] or {}).get("command") or []))

                def run(cmd: list[str], timeout: float) -> Any:
                    return run_in_container(live.proc.init_pid, cmd, live.env, live.working_dir, timeout)

                return lambda timeout: check_exec(run, command, timeout)
            if "httpGet" in probe:
                return lambda timeout: check_http(probe["httpGet"], self.rt.node_ip, timeout, ports)
            if "tcpSocket" in probe:
                return lambda timeout: check_tcp(probe["tcpSocket"], self.rt.node_ip, timeout, ports)
            if "grpc" in probe:
                return lambda timeout: check_grpc(probe["grpc"], self.rt.node_ip, timeout)
            return lambda timeout: (False, f"probe handler {sorted(probe)} is not supported on simulated nodes")

        def on_change(kind: str, ok: bool, message: str) -> None:
            self._events.put(("change", live.name, run_id, kind, ok, message))
            self._wake.set()

        def on_failure(kind: str, message: str) -> None:
            self._events.put(("failure", live.name, run_id, kind, False, message))
            self._wake.set()

        def started() -> bool:
            rec = self.records.get(live.name)
            return bool(rec and rec.started and rec.running)

        for kind, key in ((STARTUP, "startupProbe"), (LIVENESS, "livenessProbe"),
                          (READINESS, "readinessProbe")):
            probe = container.get(key)
            if probe is None:
                continue
            gate = None if kind == STARTUP else started
            live.probes.append(ProbeWorker(
                kind, probe, make_check(probe), on_change, on_failure, gate, name=f"{self.name}-{live.name}",
                prompt_after_gate=container.get("startupProbe") is not None).start())

    def _drain_probe_events(self) -> None:
        while True:
            try:
                what, name, run_id, kind, ok, message = self._events.get_nowait()
            except queue.Empty:
                return
            live = self.live.get(name)
            record = self.records.get(name)
            if live is None or record is None or live.run_id != run_id or not record.running:
                continue
            if what == "failure":
                self._event("Warning", "Unhealthy", f"{kind} probe failed: {message}")
                continue
            if kind == STARTUP:
                if ok:
                    record.started = True
                    if not self._container(name).get("readinessProbe"):
                        record.ready = not record.init or record.sidecar
                else:
                    self._request_kill(live, f"Container {name} failed startup probe, will be restarted")
            elif kind == READINESS:
                record.ready = ok and record.started
            elif kind == LIVENESS and not ok:
                self._request_kill(live, f"Container {name} failed liveness probe, will be restarted")

    def _keep(self) -> None:
        """Hand the running containers and the container records to the node's store."""
        with self._lock:
            lives, self.live = list(self.live.values()), {}
        for live in lives:
            live.stop_probes()
        kept = [KeptContainer(live.name, live.proc, live.env, live.working_dir) for live in lives]
        self.rt.containers.keep(self.uid, KeptPod(kept, dict(self.records)))
        self.log.info("pod %s/%s: %d container(s) keep running while the node agent restarts",
                      self.namespace, self.name, len(kept))

    def _take_kept(self) -> None:
        """Take back what a stopped agent's worker of this pod left running."""
        kept = self.rt.containers.take(self.uid)
        if kept is None:
            return
        self.records.update({n: r for n, r in kept.records.items() if n in self.records})
        self.sandbox_ready = True
        for item in kept.containers:
            record = self.records.get(item.name)
            if record is None:
                item.proc.kill_group()
                item.proc.wait(10)
                item.proc.close()
                continue
            self._run_ids += 1
            live = LiveContainer(item.name, self._run_ids, item.proc, item.env, item.working_dir)
            with self._lock:
                self.live[item.name] = live
            self._start_probes(self._container(item.name), live, record)
        self.log.info("pod %s/%s: took back %d running container(s)", self.namespace, self.name,
                      len(kept.containers))

    def _request_kill(self, live: LiveContainer, reason: str) -> None:
        if live.kill_deadline is not None:
            return
        container = self._container(live.name)
        grace = self._grace_for(container)
        live.kill_reason = reason
        live.kill_deadline = time.monotonic() + grace
        self._event("Normal", "Killing", reason)
        live.stop_probes()
        live.proc.signal(signal.SIGTERM)

    def _grace_for(self, container: dict[str, Any]) -> float:
        for key in ("livenessProbe", "startupProbe"):
            probe = container.get(key) or {}
            if probe.get("terminationGracePeriodSeconds") is not None:
                return float(probe["terminationGracePeriodSeconds"])
        grace = self._spec().get("terminationGracePeriodSeconds", DEFAULT_GRACE)
        return float(DEFAULT_GRACE if grace is None else grace)

    def _enforce_kills(self) -> None:
        now = time.monotonic()
        for live in list(self.live.values()):
            if live.kill_deadline is not None and now >= live.kill_deadline and live.proc.poll() is None:
                live.proc.kill_group()

    def _reap(self) -> None:
        """Record containers whose main process exited."""
        for name, live in list(self.live.items()):
            rc = live.proc.poll()
            if rc is None:
                continue
            live.stop_probes()
            live.proc.close()
            with self._lock:
                self.live.pop(name, None)
            code, sig = exit_details(rc)
            record = self.records[name]
            record.set_terminated(code, rfc3339(now_utc()), signal=sig)
            record.ready = record.init and not record.sidecar and code == 0  # completed init containers
            ran = time.monotonic() - live.started_mono
            if ran > 2 * self.rt.options.backoff_max:
                self.failures[name] = 0
            self.log.info("pod %s/%s container %s exited with code %d", self.namespace, self.name, name, code)

    def _backoff(self, name: str) -> float:
        self.failures[name] = self.failures.get(name, 0) + 1
        delay = backoff_delay(self.failures[name], self.rt.options.backoff_base, self.rt.options.backoff_max)
        self.not_before[name] = time.monotonic() + delay
        return delay

    def _maybe_start(self, container: dict[str, Any], policy: str) -> None:
        """Start a container that is waiting, or restart a terminated one per `policy`."""
        name = container["name"]
        record = self.records[name]
        if record.running:
            return
        if record.terminated:
            if not should_restart(policy, record.exit_code):
                return
            delay = self._backoff(name)
            if delay > 0:
                record.set_waiting(REASON_CRASH_LOOP,
                                   f"back-off {delay:g}s restarting failed container={name} "
                                   f"pod={self.name}_{self.namespace}({self.uid})")
                self._event("Warning", "BackOff", "Back-off restarting failed container "
                            f"{name} in pod {self.name}_{self.namespace}({self.uid})")
                return
        if time.monotonic() < self.not_before.get(name, 0.0):
            return
        self._start(container)

    def _run_init(self) -> None:
        policy = self._spec().get("restartPolicy", "Always")
        for container in self._containers(True):
            name = container["name"]
            record = self.records[name]
            if sidecar(container):
                self._maybe_start(container, "Always")
                if not (record.running and record.started):
                    return
                continue
            if record.succeeded:
                continue
            if record.running:
                return
            if record.terminated and policy == "Never":
                self.stage = "done"
                self._finish()
                return
            self._maybe_start(container, "OnFailure" if policy != "Never" else "Never")
            return
        self.initialized = True
        self.stage = "run"

    def _run_main(self) -> None:
        policy = self._spec().get("restartPolicy", "Always")
        for container in self._containers(True):
            if sidecar(container):
                self._maybe_start(container, "Always")
        for container in self._containers(False):
            self._maybe_start(container, policy)
        mains = [self.records[c["name"]] for c in self._containers(False)]
        if all(r.terminated and not should_restart(policy, r.exit_code) for r in mains):
            self.stage = "done"
            self._finish()

    def _finish(self) -> None:
        """All regular containers are done: stop sidecars, unprepare the claims."""
        self._kill_all(self._grace())
        self._unprepare(retry=False)

    def _unprepare(self, retry: bool) -> bool:
        """Release the pod's claims (unprepare those it was the last user of); with `retry`,
        until that succeeds or the worker must stop."""
        failures = 0
        while True:
            errors = unprepare_pod_claims(self.rt, self.uid)
            if not errors:
                self.prepared = {}
                return True
            failures += 1
            message = "; ".join(errors)
            self._event("Warning", "FailedUnprepareDynamicResources", message)
            self.log.warning("pod %s/%s: unprepare failed: %s", self.namespace, self.name, message)
            if not retry or self._shutdown:
                return False
            delay = backoff_delay(failures, self.rt.options.setup_retry_base, self.rt.options.setup_retry_max)
            if self._wait_or_stop(max(delay, self.rt.options.setup_retry_base)):
                return False

    def _wait_or_stop(self, seconds: float) -> bool:
        """Sleep; True if the worker should stop waiting (agent shutdown, pod object gone: the
        node's orphan cleanup retries from the saved state)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._shutdown or self._deleted:
                return True
            time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
        return self._shutdown or self._deleted

    # -- termination ------------------------------------------------------------------------------
    def _kill_all(self, grace: float) -> None:
        """SIGTERM every running container, SIGKILL the rest after `grace` seconds."""
        lives = list(self.live.values())
        if not lives:
            return
        for live in lives:
            live.stop_probes()
            if live.proc.poll() is None:
                self._event("Normal", "Killing", f"Stopping container {live.name}")
                live.proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + max(grace, 0.0)
        while time.monotonic() < deadline and any(live.proc.poll() is None for live in lives):
            time.sleep(0.05)
        for live in lives:
            if live.proc.poll() is None:
                live.proc.kill_group()
                live.proc.wait(10)
        self._reap()

    def _terminate(self, grace: float, delete_object: bool) -> None:
        self.log.info("pod %s/%s: terminating (grace %gs)", self.namespace, self.name, grace)
        self._kill_all(grace)
        # as kubelet: unprepare after the containers stopped and before the final status
        if not self._unprepare(retry=delete_object):
            self.log.warning("pod %s/%s: claims stay prepared (unprepare failed); retried later",
                             self.namespace, self.name)
            return
        if delete_object and not self._deleted:
            self._post_status(force=True)
        if delete_object and not self._final_delete():
            return
        self._cleanup()

    def _final_delete(self) -> bool:
        """Remove the terminated pod's object, retrying (as kubelet's status manager does) while
        the API server is away; False if the worker must stop first."""
        failures = 0
        while True:
            try:
                self.rt.raw.delete(PODS, self.name, self.namespace, grace_period_seconds=0,
                                   precondition_uid=self.uid)
                return True
            except ApiError as exc:
                if exc.not_found or exc.conflict:
                    return True
                failures += 1
                self.log.warning("pod %s/%s: final delete failed (retrying): %s", self.namespace, self.name, exc)
            delay = backoff_delay(failures, self.rt.options.setup_retry_base, self.rt.options.setup_retry_max)
            if self._wait_or_stop(max(delay, self.rt.options.setup_retry_base)):
                return self._deleted

    def _cleanup(self) -> None:
        """Remove the pod's directory (volumes, state); logs stay."""
        import shutil

        shutil.rmtree(self.rt.layout.pod_dir(self.uid), ignore_errors=True)

    # -- status -------------------------------------------------------------------------------------
    def _post_status(self, force: bool = False) -> None:
        pod = self._pod()
        spec = pod.get("spec") or {}
        prev = (pod.get("status") or {}).get("conditions") or []
        view = PodView(
            host_ip=self.rt.node_ip, pod_ip=self.rt.node_ip, start_time=self.state.start_time,
            restart_policy=spec.get("restartPolicy", "Always"), sandbox_ready=self.sandbox_ready,
            initialized=self.initialized or not self._containers(True),
            readiness_gates=[g.get("conditionType", "") for g in spec.get("readinessGates") or []],
            previous_conditions=prev)
        init = [self.records[c["name"]] for c in self._containers(True)]
        main = [self.records[c["name"]] for c in self._containers(False)]
        default = REASON_POD_INITIALIZING if init and not self.initialized else REASON_CREATING
        for r in init + main:
            if r.state == WAITING and not r.container_id and r.reason in (REASON_CREATING,
                                                                              REASON_POD_INITIALIZING):
                r.reason = default
        status = pod_status(view, init, main)
        if self.stage == "done" and (pod.get("status") or {}).get("phase") in (SUCCEEDED, FAILED) \
                and not self.live and not any(r.container_id for r in self.records.values()):
            return  # finished before this agent started: keep the recorded status
        key = comparable(status)
        if not force and key == self._last_status:
            return
        try:
            self.rt.raw.patch(PODS, self.name, {"status": status}, self.namespace, patch_type="strategic",
                              subresource="status")
            self._last_status = key
        except ApiError as exc:
            if exc.not_found:
                self._deleted = True
                self._wake.set()
                return
            self.log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)


class _SetupWait(CdriverError):
    """A pod's setup must wait for something outside the node (claim creation, allocation)."""

    event_reason = "FailedPrepareDynamicResources"

    def __init__(self, message: str, event: bool = True) -> None:
        super().__init__(message)
        self.event = event
