"""Readiness: pod Ready condition and nvidia-imex state -> entry status."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.roles.imex_daemon import readiness


def pod(phase: str = "Running", ready: str | None = "True", deleting: bool = False) -> dict:
    conds = [{"type": "PodScheduled", "status": "True"}]
    if ready is not None:
        conds.append({"type": "Ready", "status": ready})
    meta = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "conditions": conds}}


def test_pod_ready_needs_running_and_ready_true() -> None:
    assert readiness.pod_is_ready(pod())
    assert not readiness.pod_is_ready(pod(phase="Pending"))
    assert not readiness.pod_is_ready(pod(ready="False"))
    assert not readiness.pod_is_ready(pod(ready=None))
    assert not readiness.pod_is_ready(None)
    assert not readiness.pod_is_ready({"metadata": {}})


def test_entry_is_ready_only_with_pod_ready_imex_running_and_nothing_blocking() -> None:
    assert readiness.desired_status(True, True, False) == constants.STATUS_READY
    assert readiness.desired_status(False, True, False) == constants.STATUS_NOT_READY
    assert readiness.desired_status(True, False, False) == constants.STATUS_NOT_READY
    assert readiness.desired_status(True, True, True) == constants.STATUS_NOT_READY


def test_the_inputs_of_the_decision_are_described_in_words() -> None:
    assert readiness.describe_inputs(True, False, False) == "pod Ready, nvidia-imex not READY"
    assert readiness.describe_inputs(False, True, True) == "pod not Ready, nvidia-imex READY, its start blocked"


def test_deletion_timestamp_marks_a_leaving_pod() -> None:
    assert readiness.pod_being_deleted(pod(deleting=True))
    assert not readiness.pod_being_deleted(pod())


def test_probe_passes_only_on_exit_zero_and_exactly_ready() -> None:
    assert readiness.probe_passed(0, "READY\n")
    assert readiness.probe_passed(0, "READY")
    assert not readiness.probe_passed(1, "READY\n")
    assert not readiness.probe_passed(0, "READY\nREADY\n")
    assert not readiness.probe_passed(0, "NOT READY\n")
    assert not readiness.probe_passed(0, " READY\n")
    assert not readiness.probe_passed(0, "")
