"""The containers of one pod: their records, current runs, probes, restarts and kills.

`PodContainers` is the container half of a pod worker (`pods.PodWorker` runs the pod's stages
and calls it from its thread): it starts a container with its environment, mounts and CDI
edits, runs its probes, reaps it when its process exits, backs off crash loops, kills it on a
failed probe or at the end, and hands running containers to the node's `ContainerStore`
across an agent restart. `container_info`, `kill_container` and `log_path` may be called
from any thread.
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

from cdriver.dra.node_service import PreparedDevice
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.cdi_apply import container_cdi_ids, launch_edits
from cdriver.sim.node.simulated.claims import PodState
from cdriver.sim.node.simulated.container import (
    ContainerProcess,
    LaunchSpec,
    StartError,
    exit_details,
    run_in_container,
)
from cdriver.sim.node.simulated.container_store import KeptContainer, KeptPod
from cdriver.sim.node.simulated.env import EnvContext, command_line, container_env, probe_command
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
    REASON_CONFIG_ERROR,
    REASON_CRASH_LOOP,
    REASON_START_ERROR,
    ContainerRecord,
    now_utc,
    rfc3339,
)
from cdriver.sim.node.simulated.volumes import BindMount, container_mounts

DEFAULT_GRACE = 30


# --- pure helpers --------------------------------------------------------------------------

def backoff_delay(failures: int, base: float, maximum: float) -> float:
    """Kubelet's crash-loop backoff: the first restart is immediate, then base, 2*base, ..."""
    if failures <= 0:
        return 0.0
    return min(base * (2 ** (failures - 1)), maximum)


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def sidecar(container: dict[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


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


class PodContainers:
    """The containers of one pod, driven from its worker's thread."""

    def __init__(self, rt: NodeRuntime, pod: Callable[[], dict[str, Any]], state: PodState,
                 event: Callable[[str, str, str], None], save_state: Callable[[], None],
                 wake: threading.Event) -> None:
        """`pod`: the pod's current object; `event(type, reason, message)` records an Event on
        it; `save_state()` persists `state` (restart counts, containers started once);
        `wake` is set when a probe or a kill needs the worker's attention."""
        self.rt = rt
        self._pod = pod
        self.state = state
        self._event = event
        self._save_state = save_state
        self._wake = wake
        meta = pod()["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.log = rt.log
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        spec = pod().get("spec") or {}
        self.records: dict[str, ContainerRecord] = {}
        for c in spec.get("initContainers") or []:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), init=True, sidecar=sidecar(c),
                restart_count=state.restarts.get(c["name"], 0))
        for c in spec.get("containers") or []:
            self.records[c["name"]] = ContainerRecord(
                c["name"], c.get("image", ""), restart_count=state.restarts.get(c["name"], 0))
        self.live: dict[str, LiveContainer] = {}
        self.failures: dict[str, int] = {}
        self.not_before: dict[str, float] = {}
        #: set by the worker's setup: the pod's volumes and its claims' prepared devices
        self.volume_paths: dict[str, Path] = {}
        self.prepared: dict[str, list[PreparedDevice]] = {}
        self._run_ids = 0
        #: CPU seconds of each container's exec probes, over all its runs (they run from the node,
        #: outside the container's processes)
        self.probe_cpu: dict[str, float] = {}

    # -- entry points (any thread) ---------------------------------------------------------
    def probe_cpu_seconds(self, name: str) -> float:
        """CPU seconds the exec probes of container `name` have used so far (all its runs)."""
        with self._lock:
            return self.probe_cpu.get(name, 0.0)

    def _account_probe(self, name: str, seconds: float) -> None:
        with self._lock:
            self.probe_cpu[name] = self.probe_cpu.get(name, 0.0) + seconds

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

    # -- the pod's spec ----------------------------------------------------------------------
    def _spec(self) -> dict[str, Any]:
        return self._pod().get("spec") or {}

    def specs(self, init: bool) -> list[dict[str, Any]]:
        """The pod's init containers, or its regular ones, as specified."""
        return list(self._spec().get("initContainers" if init else "containers") or [])

    def _container(self, name: str) -> dict[str, Any]:
        for c in self.specs(True) + self.specs(False):
            if c["name"] == name:
                return c
        raise KeyError(name)

    # -- runs ----------------------------------------------------------------------------------
    def maybe_start(self, container: dict[str, Any], policy: str) -> None:
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

    def _start(self, container: dict[str, Any]) -> None:
        name = container["name"]
        record = self.records[name]
        first_run = name not in self.state.started
        pod = self._pod()
        image = find_image(self.rt.images, container.get("image", ""))
        try:
            ctx = EnvContext(
                node_name=self.rt.node_name, host_ip=self.rt.node_ip, pod_ip=self.state.pod_ip,
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
                    return run_in_container(live.proc.init_pid, cmd, live.env, live.working_dir, timeout,
                                            account=lambda seconds: self._account_probe(live.name, seconds))

                return lambda timeout: check_exec(run, command, timeout)
            if "httpGet" in probe:
                return lambda timeout: check_http(probe["httpGet"], self.state.pod_ip, timeout, ports)
            if "tcpSocket" in probe:
                return lambda timeout: check_tcp(probe["tcpSocket"], self.state.pod_ip, timeout, ports)
            if "grpc" in probe:
                return lambda timeout: check_grpc(probe["grpc"], self.state.pod_ip, timeout)
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

    def drain_probe_events(self) -> None:
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

    def enforce_kills(self) -> None:
        now = time.monotonic()
        for live in list(self.live.values()):
            if live.kill_deadline is not None and now >= live.kill_deadline and live.proc.poll() is None:
                live.proc.kill_group()

    def reap(self) -> None:
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

    def kill_all(self, grace: float) -> None:
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
        self.reap()

    def keep(self) -> None:
        """Hand the running containers and the container records to the node's store."""
        with self._lock:
            lives, self.live = list(self.live.values()), {}
        for live in lives:
            live.stop_probes()
        kept = [KeptContainer(live.name, live.proc, live.env, live.working_dir) for live in lives]
        self.rt.containers.keep(self.uid, KeptPod(kept, dict(self.records)))
        self.log.info("pod %s/%s: %d container(s) keep running while the node agent restarts",
                      self.namespace, self.name, len(kept))

    def take_kept(self) -> bool:
        """Take back what a stopped agent's worker of this pod left running."""
        kept = self.rt.containers.take(self.uid)
        if kept is None:
            return False
        self.records.update({n: r for n, r in kept.records.items() if n in self.records})
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
        return True

