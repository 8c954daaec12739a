"""The pod worker: one thread per pod bound to the node, driving it like kubelet does.

Stages (`PodStage`): ``setup`` (volumes, /etc/hosts, NodePrepareResources for the pod's claims; failures
keep the containers waiting in ContainerCreating, record an Event and are retried with
backoff) → ``init`` (init containers in order; sidecars, i.e. init containers with
``restartPolicy: Always``, keep running) → ``run`` (containers with probes and the restart
policy, crash loops backed off) → ``done`` (all containers finished: claims unprepared).
A pod with a deletionTimestamp is terminated gracefully (SIGTERM, grace period, SIGKILL),
its claims unprepared, and then deleted with grace period 0, as kubelet does. As kubelet
cancels a pod's sync when the pod starts terminating, a NodePrepareResources still in flight
then is cancelled and the claim unprepared at once (the late Unprepare of a failed Prepare).

Restart counts and prepared claims are kept in ``pods/<uid>/state.json`` so a restarted
node agent continues counting and can unprepare the claims of pods deleted meanwhile. An agent
stopped for a restart keeps the containers running, as kubelet's restart does: the worker hands
them and its container records to the node's `ContainerStore` and the next worker of the pod
takes them back (probes start anew). The containers themselves (starts, probes, restarts,
kills) are `pod_containers.PodContainers`; this module runs the stages, the pod's claims and
its status.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from cdriver.dra.client import DRAError
from cdriver.dra.node_service import ClaimRef
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import being_deleted, meta_of
from cdriver.kube.resources import RESOURCES
from cdriver.sim.node.simulated.call_log import UNREGISTERED, call_outcome, log_call
from cdriver.sim.node.simulated.claims import (
    PodState,
    claim_drivers,
    pod_claim_names,
    reserved_for,
    unprepare_pod_claims,
)
from cdriver.sim.node.simulated.env import EnvError
from cdriver.sim.node.simulated.pod_containers import (
    DEFAULT_GRACE,
    LiveContainer,
    PodContainers,
    backoff_delay,
    should_restart,
    sidecar,
)
from cdriver.sim.node.simulated.resource_health import allocated_resources_status
from cdriver.sim.node.simulated.runtime import NodeRuntime
from cdriver.sim.node.simulated.status import (
    FAILED,
    REASON_CREATING,
    REASON_POD_INITIALIZING,
    SUCCEEDED,
    WAITING,
    PodView,
    comparable,
    now_utc,
    pod_status,
    rfc3339,
)
from cdriver.sim.node.simulated.volumes import PodVolumes, VolumeContext, VolumeError

PODS = RESOURCES["pods"]
CLAIMS = RESOURCES["resourceclaims"]
TICK = 0.2
#: kubelet's pod-worker back-off (backOffPeriod): the longest wait between a terminating pod's
#: attempts to unprepare its claims
TERMINATING_RETRY_MAX = 10.0


# --- pure helpers --------------------------------------------------------------------------

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


class PodStage(StrEnum):
    """Where a pod worker is; it only moves forward."""

    SETUP = "setup"  # volumes, /etc/hosts, the pod's claims prepared
    INIT = "init"  # init containers in order, sidecars kept running
    RUN = "run"  # the containers, restarted per the pod's restart policy
    DONE = "done"  # every container finished, the claims unprepared


#: the node log's line per NodePrepareResources call, failed and timed-out ones too (benchmarks
#: read its duration and its outcome: ok, error (claims with errors), timeout, failed)
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
        self._deleted = False
        # set once the pod is going (deletionTimestamp, or its object gone): as kubelet cancels a
        # pod's sync then, an in-flight NodePrepareResources is cancelled and the pod terminates,
        # its claims unprepared, instead of waiting for the call's answer
        self._going = threading.Event()
        if being_deleted(pod):
            self._going.set()
        self._shutdown = False
        self._keep_containers = False
        self.stage = PodStage.SETUP
        self.state = PodState.load(rt.layout.pod_state_file(self.uid))
        self.state.namespace, self.state.name = self.namespace, self.name
        # the pod's own address (kubelet's runtime gives each sandbox one), the node's for host-network pods
        self.state.pod_ip = rt.node_ip if (pod.get("spec") or {}).get("hostNetwork") else \
            rt.pod_addresses.address(self.uid, self.state.pod_ip)
        self.containers = PodContainers(rt, self._pod, self.state, self._event, self._save_state, self._wake)
        self.setup_failures = 0
        self.setup_not_before = 0.0
        self.sandbox_ready = False
        self.initialized = False
        self.volumes: PodVolumes | None = None
        self._last_status: dict[str, Any] | None = None
        self._last_refresh = time.monotonic()
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.namespace}-{self.name}", daemon=True)

    # -- entry points ----------------------------------------------------------------------
    def start(self) -> PodWorker:
        self.thread.start()
        return self

    def update(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self.pod = pod
        if being_deleted(pod):
            self._going.set()
        self._wake.set()

    def deleted(self) -> None:
        """The pod object is gone from the API: stop everything now."""
        self._deleted = True
        self._going.set()
        self._wake.set()

    def shutdown(self, keep_containers: bool = False) -> None:
        """The node agent stops: stop the containers (or, for a restart, keep them running
        in the node's store), keep claims prepared."""
        self._keep_containers = keep_containers
        self._shutdown = True
        self._wake.set()

    def kill_container(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to a container's main process (fault injection); returns its pid."""
        return self.containers.kill_container(name, sig)

    def container_info(self, name: str) -> LiveContainer | None:
        return self.containers.container_info(name)

    def probe_cpu_seconds(self, name: str) -> float:
        """CPU seconds of container `name`'s exec probes so far (all its runs)."""
        return self.containers.probe_cpu_seconds(name)

    def log_path(self, name: str, previous: bool = False) -> Path | None:
        """The log file of the container's current (or previous) run."""
        return self.containers.log_path(name, previous)

    # -- helpers -----------------------------------------------------------------------------
    def _pod(self) -> dict[str, Any]:
        with self._lock:
            return self.pod

    def _spec(self) -> dict[str, Any]:
        return self._pod().get("spec") or {}

    def _event(self, type_: str, reason: str, message: str) -> None:
        # list items carry no kind; `kubectl describe` selects events by involvedObject.kind
        self.rt.recorder.event({**self._pod(), "apiVersion": "v1", "kind": "Pod"}, type_, reason, message)

    def _save_state(self) -> None:
        self.state.restarts = {n: r.restart_count for n, r in self.containers.records.items()}
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
            self.containers.kill_all(0)
        finally:
            self.finished.set()
            if self.on_exit:
                self.on_exit(self.uid)

    def _loop(self) -> None:
        phase = (self._pod().get("status") or {}).get("phase")
        if phase in (SUCCEEDED, FAILED):
            self.stage = PodStage.DONE
        if not self.state.start_time:
            self.state.start_time = (self._pod().get("status") or {}).get("startTime") or rfc3339(now_utc())
        self._save_state()
        if self.containers.take_kept():
            self.sandbox_ready = True
        # kubelet sets the pod's status at the start of a sync, before it prepares the pod's claims,
        # so an event about a failed Prepare never precedes the Pending/ContainerCreating status
        self._post_status()
        while True:
            if self._shutdown:
                if self._keep_containers:
                    self.containers.keep()
                else:
                    self.containers.kill_all(self.rt.options.shutdown_grace)
                return
            if self._deleted:
                self._terminate(grace=min(self._grace(), 2.0), delete_object=False)
                return
            if being_deleted(self._pod()):
                self._terminate(grace=self._grace(), delete_object=True)
                return
            self.containers.drain_probe_events()
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
        if self.stage == PodStage.SETUP:
            self._setup()
        if self.stage in (PodStage.INIT, PodStage.RUN):
            self.containers.reap()
            self.containers.enforce_kills()
            self._refresh_volumes()
        if self.stage == PodStage.INIT:
            self._run_init()
        if self.stage == PodStage.RUN:
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
        self.stage = PodStage.INIT
        self.log.info("pod %s/%s: volumes and claims ready", self.namespace, self.name)

    def _setup_volumes(self) -> None:
        pod = self._pod()
        self.volumes = PodVolumes(self.rt.layout, pod, VolumeContext(
            host_ip=self.rt.node_ip, pod_ip=self.state.pod_ip, allocatable=self.rt.allocatable,
            get_configmap=self.rt.get_configmap, get_secret=self.rt.get_secret,
            request_token=self.rt.request_token))
        self.containers.volume_paths = self.volumes.setup()
        hosts = self.rt.layout.pod_hosts_file(self.uid)
        hosts.parent.mkdir(parents=True, exist_ok=True)
        if not hosts.exists():
            hosts.write_text(hosts_file(pod, self.state.pod_ip, self.rt.node_name))

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
            uids = [r.uid for r in refs]
            if client is None:
                log_call(self.rt.log, "NodePrepareResources", driver, None, uids, UNREGISTERED)
                raise DRAError(f"DRA driver {driver} is not registered on node {self.rt.node_name}")
            started = time.monotonic()
            try:
                result = client.prepare(refs, timeout=self.rt.options.prepare_timeout, cancel=self._going)
            except DRAError as exc:  # the call as a whole: its deadline, the connection, a bad answer
                self.rt.log.info("%s %s claims=%d errors=%d took_ms=%.1f outcome=%s", PREPARE_TIMING, driver,
                                 len(refs), len(refs), (time.monotonic() - started) * 1000, call_outcome(exc))
                log_call(self.rt.log, "NodePrepareResources", driver, client.plugin.endpoint, uids, call_outcome(exc))
                raise
            errors = [f"NodePrepareResources failed for ResourceClaim {ref.name}: {result[ref.uid].error}"
                      for ref in refs if result[ref.uid].error]
            self.rt.log.info("%s %s claims=%d errors=%d took_ms=%.1f outcome=%s", PREPARE_TIMING, driver, len(refs),
                             len(errors), (time.monotonic() - started) * 1000, "error" if errors else "ok")
            log_call(self.rt.log, "NodePrepareResources", driver, client.plugin.endpoint, uids,
                     "error" if errors else "ok")
            if errors:
                raise DRAError("; ".join(errors))
            for ref in refs:
                self.rt.claims.set_devices(ref, driver, result[ref.uid].devices)
        self.rt.claims.set_prepared([r for refs in batches.values() for r in refs])
        self.containers.prepared = {}
        for pod_claim, claim in claims:
            info = self.rt.claims.get(self.namespace, claim["metadata"]["name"])
            self.containers.prepared.setdefault(pod_claim, []).extend(info.all_devices() if info else [])

    # -- containers -------------------------------------------------------------------------------
    def _run_init(self) -> None:
        policy = self._spec().get("restartPolicy", "Always")
        for container in self.containers.specs(True):
            name = container["name"]
            record = self.containers.records[name]
            if sidecar(container):
                self.containers.maybe_start(container, "Always")
                if not (record.running and record.started):
                    return
                continue
            if record.succeeded:
                continue
            if record.running:
                return
            if record.terminated and policy == "Never":
                self.stage = PodStage.DONE
                self._finish()
                return
            self.containers.maybe_start(container, "OnFailure" if policy != "Never" else "Never")
            return
        self.initialized = True
        self.stage = PodStage.RUN

    def _run_main(self) -> None:
        policy = self._spec().get("restartPolicy", "Always")
        for container in self.containers.specs(True):
            if sidecar(container):
                self.containers.maybe_start(container, "Always")
        for container in self.containers.specs(False):
            self.containers.maybe_start(container, policy)
        mains = [self.containers.records[c["name"]] for c in self.containers.specs(False)]
        if all(r.terminated and not should_restart(policy, r.exit_code) for r in mains):
            self.stage = PodStage.DONE
            self._finish()

    def _finish(self) -> None:
        """All regular containers are done: stop sidecars, unprepare the claims."""
        self.containers.kill_all(self._grace())
        self._unprepare(retry=False)

    def _unprepare(self, retry: bool) -> bool:
        """Release the pod's claims (unprepare those it was the last user of); with `retry`,
        until that succeeds or the agent stops: as kubelet's pod worker keeps a terminating pod,
        even one whose object is gone, and retries its termination every 10 s until its claims
        are unprepared (a driver that was away gets the late Unprepare once it is back)."""
        failures = 0
        while True:
            errors = unprepare_pod_claims(self.rt, self.uid)
            if not errors:
                self.containers.prepared = {}
                return True
            failures += 1
            message = "; ".join(errors)
            self._event("Warning", "FailedUnprepareDynamicResources", message)
            self.log.warning("pod %s/%s: unprepare failed: %s", self.namespace, self.name, message)
            if not retry or self._shutdown:
                return False
            delay = min(backoff_delay(failures, self.rt.options.setup_retry_base, self.rt.options.setup_retry_max),
                        TERMINATING_RETRY_MAX)
            if self._wait_or_stop(max(delay, self.rt.options.setup_retry_base), until_deleted=False):
                return False

    def _wait_or_stop(self, seconds: float, until_deleted: bool = True) -> bool:
        """Sleep; True if the worker should stop waiting: the agent stops, or (`until_deleted`)
        the pod object is gone (the node's orphan cleanup retries from the saved state)."""
        deadline = time.monotonic() + seconds

        def stop() -> bool:
            return self._shutdown or (until_deleted and self._deleted)

        while time.monotonic() < deadline:
            if stop():
                return True
            time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
        return stop()

    # -- termination ------------------------------------------------------------------------------
    def _terminate(self, grace: float, delete_object: bool) -> None:
        self.log.info("pod %s/%s: terminating (grace %gs)", self.namespace, self.name, grace)
        self.containers.kill_all(grace)
        # as kubelet: unprepare after the containers stopped and before the final status
        if not self._unprepare(retry=True):
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
            host_ip=self.rt.node_ip, pod_ip=self.state.pod_ip, start_time=self.state.start_time,
            restart_policy=spec.get("restartPolicy", "Always"), sandbox_ready=self.sandbox_ready,
            initialized=self.initialized or not self.containers.specs(True),
            readiness_gates=[g.get("conditionType", "") for g in spec.get("readinessGates") or []],
            previous_conditions=prev)
        init = [self.containers.records[c["name"]] for c in self.containers.specs(True)]
        main = [self.containers.records[c["name"]] for c in self.containers.specs(False)]
        default = REASON_POD_INITIALIZING if init and not self.initialized else REASON_CREATING
        for r in init + main:
            if r.state == WAITING and not r.container_id and r.reason in (REASON_CREATING,
                                                                              REASON_POD_INITIALIZING):
                r.reason = default
        status = pod_status(view, init, main)
        if self.rt.options.resource_health:
            self._add_resource_health(pod, status)
        if self.stage == PodStage.DONE and (pod.get("status") or {}).get("phase") in (SUCCEEDED, FAILED) \
                and not self.containers.live and not any(r.container_id for r in self.containers.records.values()):
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


    def _add_resource_health(self, pod: dict, status: dict) -> None:
        """Each container's allocatedResourcesStatus: the health of the devices of its claims."""
        specs = {c["name"]: c for c in self.containers.specs(False)}
        names = dict(pod_claim_names(pod))
        for cs in status.get("containerStatuses") or []:
            spec = specs.get(cs.get("name"))
            found = allocated_resources_status(self.namespace, names, spec, self.rt.claims, self.rt.health) \
                if spec else []
            if found:
                cs["allocatedResourcesStatus"] = found


class _SetupWait(CdriverError):
    """A pod's setup must wait for something outside the node (claim creation, allocation)."""

    event_reason = "FailedPrepareDynamicResources"

    def __init__(self, message: str, event: bool = True) -> None:
        super().__init__(message)
        self.event = event
