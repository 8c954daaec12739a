"""Pod status from container states, computed the way kubelet does (pure functions).

`ContainerRecord` is what the node knows about one container (state, restarts, readiness);
`pod_status` turns the records of a pod into the `status` written through pods/status:
phase, conditions, container statuses, IPs and start time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

WAITING = "waiting"
RUNNING = "running"
TERMINATED = "terminated"

PENDING = "Pending"
RUNNING_PHASE = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"

REASON_CREATING = "ContainerCreating"
REASON_POD_INITIALIZING = "PodInitializing"
REASON_CRASH_LOOP = "CrashLoopBackOff"
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_START_ERROR = "StartError"
REASON_CONFIG_ERROR = "CreateContainerConfigError"

#: Conditions this node writes; others (PodScheduled, DisruptionTarget, ...) are kept.
OWN_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
CONTAINER_ID_SCHEME = "cdriver-sim://"


def rfc3339(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class ContainerRecord:
    """Observed state of one container of a pod."""

    name: str
    image: str = ""
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always
    state: str = WAITING
    reason: str = REASON_CREATING
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    signal: int = 0
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str = ""
    last_terminated: dict[str, Any] | None = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def terminated(self) -> bool:
        return self.state == TERMINATED

    @property
    def succeeded(self) -> bool:
        return self.state == TERMINATED and self.exit_code == 0

    def set_waiting(self, reason: str, message: str = "") -> None:
        if self.state == TERMINATED:
            self.last_terminated = self.terminated_dict()
        self.state, self.reason, self.message = WAITING, reason, message
        self.ready = self.started = False

    def set_running(self, container_id: str, started_at: str) -> None:
        if self.state == TERMINATED:
            self.last_terminated = self.terminated_dict()
        self.state, self.reason, self.message = RUNNING, "", ""
        self.container_id, self.started_at, self.finished_at = container_id, started_at, ""
        self.exit_code = self.signal = 0
        self.ready = self.started = False

    def set_terminated(self, exit_code: int, finished_at: str, reason: str = "", message: str = "",
                       signal: int = 0) -> None:
        self.state = TERMINATED
        self.exit_code, self.signal, self.finished_at = exit_code, signal, finished_at
        self.reason = reason or (REASON_COMPLETED if exit_code == 0 else REASON_ERROR)
        self.message = message
        self.ready = self.started = False

    def terminated_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": self.exit_code, "reason": self.reason,
                               "startedAt": self.started_at or None,
                               "finishedAt": self.finished_at or None,
                               "containerID": self.container_id or None}
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        return {k: v for k, v in out.items() if v is not None}

    def state_dict(self) -> dict[str, Any]:
        if self.state == RUNNING:
            return {"running": {"startedAt": self.started_at}}
        if self.state == TERMINATED:
            return {"terminated": self.terminated_dict()}
        waiting: dict[str, Any] = {"reason": self.reason}
        if self.message:
            waiting["message"] = self.message
        return {"waiting": waiting}

    def to_status(self) -> dict[str, Any]:
        """The ContainerStatus dict."""
        out: dict[str, Any] = {
            "name": self.name,
            "state": self.state_dict(),
            "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
            "ready": self.ready,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": "",
            "started": self.started,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def pod_phase(init: list[ContainerRecord], main: list[ContainerRecord], restart_policy: str,
              initialized: bool) -> str:
    """Kubelet's phase rules (getPhase)."""
    if restart_policy == "Never" and any(c.terminated and not c.succeeded and not c.sidecar for c in init):
        return FAILED
    if not initialized:
        return PENDING
    running = waiting = stopped = succeeded = 0
    for c in main:
        if c.running:
            running += 1
        elif c.terminated:
            stopped += 1
            succeeded += int(c.succeeded)
        elif c.last_terminated is not None:
            stopped += 1  # waiting to restart after having run
        else:
            waiting += 1
    if waiting:
        return PENDING
    if running:
        return RUNNING_PHASE
    if stopped:
        if restart_policy == "Always":
            return RUNNING_PHASE
        if stopped == succeeded:
            return SUCCEEDED
        if restart_policy == "Never":
            return FAILED
        return RUNNING_PHASE
    return PENDING


def _condition(ctype: str, ok: bool, stamp: str, reason: str = "", message: str = "",
               previous: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    status = "True" if ok else "False"
    old = (previous or {}).get(ctype)
    transition = old.get("lastTransitionTime") if old and old.get("status") == status else None
    out: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None,
                           "lastTransitionTime": transition or stamp}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


@dataclass
class PodView:
    """Inputs of `pod_status` besides the container records."""

    host_ip: str
    pod_ip: str
    start_time: str
    restart_policy: str = "Always"
    sandbox_ready: bool = False
    initialized: bool = False
    readiness_gates: list[str] = field(default_factory=list)
    previous_conditions: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    reason: str = ""


def pod_status(view: PodView, init: list[ContainerRecord], main: list[ContainerRecord],
               stamp: str | None = None) -> dict[str, Any]:
    """The pod's status as this node reports it (own conditions only; merge by type)."""
    stamp = stamp or rfc3339(now_utc())
    previous = {c.get("type", ""): c for c in view.previous_conditions}
    phase = pod_phase(init, main, view.restart_policy, view.initialized)
    done = phase in (SUCCEEDED, FAILED)
    pending_init = [c.name for c in init if not c.succeeded and not (c.sidecar and c.started)]
    unready = [c.name for c in [*[i for i in init if i.sidecar], *main] if not c.ready]
    conditions = [
        _condition("PodReadyToStartContainers", view.sandbox_ready and not done, stamp,
                   previous=previous),
    ]
    if view.initialized or done:
        conditions.append(_condition("Initialized", True, stamp,
                                     "PodCompleted" if done and not init else "", previous=previous))
    else:
        conditions.append(_condition(
            "Initialized", False, stamp, "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]", previous=previous))
    gates_ok = all((previous.get(g) or {}).get("status") == "True" for g in view.readiness_gates)
    if done:
        containers_ready = _condition("ContainersReady", False, stamp, "PodCompleted",
                                      previous=previous)
        ready = _condition("Ready", False, stamp, "PodCompleted", previous=previous)
    elif unready:
        message = f"containers with unready status: [{' '.join(unready)}]"
        containers_ready = _condition("ContainersReady", False, stamp, "ContainersNotReady", message,
                                      previous)
        ready = _condition("Ready", False, stamp, "ContainersNotReady", message, previous)
    else:
        containers_ready = _condition("ContainersReady", True, stamp, previous=previous)
        if gates_ok:
            ready = _condition("Ready", True, stamp, previous=previous)
        else:
            ready = _condition("Ready", False, stamp, "ReadinessGatesNotReady",
                               "the status of pod readiness gates is not \"True\"", previous)
    conditions += [containers_ready, ready]
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": view.host_ip,
        "hostIPs": [{"ip": view.host_ip}],
        "podIP": view.pod_ip,
        "podIPs": [{"ip": view.pod_ip}],
        "startTime": view.start_time,
        "containerStatuses": [c.to_status() for c in main],
    }
    if init:
        status["initContainerStatuses"] = [c.to_status() for c in init]
    if view.reason:
        status["reason"] = view.reason
    if view.message:
        status["message"] = view.message
    return status


def merge_conditions(existing: list[dict[str, Any]], own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`existing` with this node's conditions replaced by `own` (others kept in order)."""
    own_types = {c["type"] for c in own}
    return [c for c in existing if c.get("type") not in own_types] + own


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    """`status` without timestamps that change on every computation (for change detection)."""
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k not in ("lastTransitionTime", "lastProbeTime")}
                         for c in status.get("conditions") or []]
    return out
