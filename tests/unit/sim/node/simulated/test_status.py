"""Pod status of simulated nodes: kubelet's phase and condition rules."""

from __future__ import annotations

import pytest

from cdriver.sim.node.simulated.status import (
    REASON_CRASH_LOOP,
    ContainerRecord,
    PodView,
    comparable,
    merge_conditions,
    pod_phase,
    pod_status,
)


def running(name: str = "main", ready: bool = True) -> ContainerRecord:
    r = ContainerRecord(name)
    r.set_running("cdriver-sim://x", "2026-01-01T00:00:00Z")
    r.started = True
    r.ready = ready
    return r


def exited(name: str, code: int, init: bool = False) -> ContainerRecord:
    r = ContainerRecord(name, init=init)
    r.set_running("cdriver-sim://x", "2026-01-01T00:00:00Z")
    r.set_terminated(code, "2026-01-01T00:00:05Z")
    return r


def view(**kw: object) -> PodView:
    base = dict(host_ip="127.0.1.1", pod_ip="127.0.1.1", start_time="2026-01-01T00:00:00Z",
                sandbox_ready=True, initialized=True)
    base.update(kw)
    return PodView(**base)  # type: ignore[arg-type]


def conditions(status: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


@pytest.mark.parametrize(("policy", "codes", "phase"), [
    ("Always", [0], "Running"),       # restarting after success
    ("OnFailure", [0], "Succeeded"),
    ("OnFailure", [1], "Running"),    # will be restarted
    ("Never", [0, 0], "Succeeded"),
    ("Never", [0, 2], "Failed"),
])
def test_phase_of_stopped_containers_follows_the_restart_policy(policy: str, codes: list[int], phase: str) -> None:
    main = [exited(f"c{i}", code) for i, code in enumerate(codes)]
    assert pod_phase([], main, policy, initialized=True) == phase


def test_waiting_container_that_never_ran_keeps_the_pod_pending_but_a_restarting_one_does_not() -> None:
    fresh = ContainerRecord("main")
    assert pod_phase([], [fresh], "Always", True) == "Pending"
    crashed = exited("main", 1)
    crashed.set_waiting(REASON_CRASH_LOOP, "back-off")
    assert crashed.last_terminated is not None and crashed.last_terminated["exitCode"] == 1
    assert pod_phase([], [crashed], "Always", True) == "Running"


def test_failed_init_container_fails_the_pod_only_with_restart_policy_never() -> None:
    init = [exited("init", 1, init=True)]
    assert pod_phase(init, [ContainerRecord("main")], "Never", initialized=False) == "Failed"
    assert pod_phase(init, [ContainerRecord("main")], "Always", initialized=False) == "Pending"


def test_ready_conditions_name_the_unready_containers() -> None:
    status = pod_status(view(), [], [running("a"), running("b", ready=False)])
    assert conditions(status) == {"PodReadyToStartContainers": "True", "Initialized": "True",
                                  "ContainersReady": "False", "Ready": "False"}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ContainersNotReady" and "[b]" in ready["message"]
    assert status["podIP"] == "127.0.1.1" and status["podIPs"] == [{"ip": "127.0.1.1"}]
    assert status["hostIPs"] == [{"ip": "127.0.1.1"}]


def test_all_ready_but_a_readiness_gate_false_keeps_the_pod_unready() -> None:
    gate = {"type": "example.com/gate", "status": "False"}
    status = pod_status(view(readiness_gates=["example.com/gate"], previous_conditions=[gate]), [], [running()])
    assert conditions(status)["ContainersReady"] == "True"
    assert conditions(status)["Ready"] == "False"
    gate["status"] = "True"
    status = pod_status(view(readiness_gates=["example.com/gate"], previous_conditions=[gate]), [], [running()])
    assert conditions(status)["Ready"] == "True"


def test_pending_init_containers_are_listed_in_initialized_condition() -> None:
    init = [ContainerRecord("setup", init=True)]
    status = pod_status(view(initialized=False), init, [ContainerRecord("main")])
    cond = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert cond["status"] == "False" and "[setup]" in cond["message"]
    assert status["initContainerStatuses"][0]["name"] == "setup"


def test_started_sidecar_counts_as_initialized() -> None:
    sidecar = ContainerRecord("proxy", init=True, sidecar=True)
    sidecar.set_running("id", "t")
    sidecar.started = True
    status = pod_status(view(initialized=False), [sidecar], [ContainerRecord("main")])
    cond = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert "proxy" not in cond.get("message", "")


def test_transition_time_is_kept_while_the_status_does_not_change() -> None:
    first = pod_status(view(), [], [running()], stamp="2026-01-01T00:00:00Z")
    again = pod_status(view(previous_conditions=first["conditions"]), [], [running()],
                          stamp="2026-01-01T00:05:00Z")
    assert {c["lastTransitionTime"] for c in again["conditions"]} == {"2026-01-01T00:00:00Z"}
    flipped = pod_status(view(previous_conditions=first["conditions"]), [], [running(ready=False)],
                            stamp="2026-01-01T00:06:00Z")
    ready = next(c for c in flipped["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:06:00Z"


def test_container_status_shapes() -> None:
    r = exited("main", 137)
    r.signal = 9
    r.restart_count = 2
    status = r.to_status()
    assert status["state"] == {"terminated": {"exitCode": 137, "reason": "Error", "signal": 9,
                                              "startedAt": "2026-01-01T00:00:00Z",
                                              "finishedAt": "2026-01-01T00:00:05Z",
                                              "containerID": "cdriver-sim://x"}}
    assert status["restartCount"] == 2 and status["ready"] is False and status["lastState"] == {}
    r.set_running("cdriver-sim://y", "2026-01-01T00:00:06Z")
    assert r.to_status()["lastState"]["terminated"]["exitCode"] == 137
    assert ContainerRecord("w").to_status()["state"] == {"waiting": {"reason": "ContainerCreating"}}


def test_comparable_ignores_timestamps_and_merge_keeps_foreign_conditions() -> None:
    a = pod_status(view(), [], [running()], stamp="2026-01-01T00:00:00Z")
    b = pod_status(view(), [], [running()], stamp="2026-01-02T00:00:00Z")
    assert comparable(a) == comparable(b)
    merged = merge_conditions([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
                                 a["conditions"])
    assert [c["type"] for c in merged][0] == "PodScheduled"
    assert sum(c["type"] == "Ready" for c in merged) == 1
