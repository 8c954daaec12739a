"""What one event changes in the IMEX daemon's loop state, and which effects follow."""

from __future__ import annotations

import pytest

from cdriver.roles.imex_daemon.daemon_state import (
    Action,
    DaemonState,
    ImexAnswered,
    ImexExited,
    ImexReady,
    MembersChanged,
    MembersDeleted,
    PodChanged,
    PodDeleted,
    Started,
    Step,
    next_actions,
)
from cdriver.roles.imex_daemon.health import Answer


def test_membership_events_go_to_the_store() -> None:
    state = DaemonState()
    obj = {"metadata": {"name": "uid.0"}}
    assert next_actions(state, MembersChanged(obj), None) == (state, (Step(Action.OBSERVE_MEMBERS, obj=obj),))
    assert next_actions(state, MembersDeleted(obj), None) == (state, (Step(Action.FORGET_MEMBERS),))


def test_own_pod_is_remembered_until_deleted() -> None:
    pod = {"metadata": {"name": "daemon-x"}}
    seen, steps = next_actions(DaemonState(), PodChanged(pod), None)
    assert seen.pod == pod and steps == ()
    gone, steps = next_actions(seen, PodDeleted(pod), None)
    assert gone.pod is None and steps == ()


def test_ready_counts_only_for_the_current_child_and_once() -> None:
    state = DaemonState()
    assert next_actions(state, ImexReady(7), imex_pid=8) == (state, ())  # an old child
    ready, steps = next_actions(state, ImexReady(8), imex_pid=8)
    assert ready.ready_pid == 8 and steps == (Step(Action.LOG_READY, pid=8),)
    assert next_actions(ready, ImexReady(8), imex_pid=8) == (ready, ())
    assert state.ready_pid is None  # the input state is not changed


def test_a_peer_change_held_back_during_start_is_signalled_once_ready() -> None:
    pending = DaemonState(reload_pending=True)
    ready, steps = next_actions(pending, ImexReady(3), imex_pid=3)
    assert steps == (Step(Action.LOG_READY, pid=3), Step(Action.RELOAD))
    assert not ready.reload_pending


def test_an_expected_exit_only_drops_the_pending_signal() -> None:
    state = DaemonState(ready_pid=5, reload_pending=True)
    after, steps = next_actions(state, ImexExited(0, expected=True), None)
    assert steps == () and after.ready_pid == 5 and not after.reload_pending


@pytest.mark.parametrize("ready_pid, was_ready", [(5, True), (None, False)])
def test_an_unexpected_exit_is_reported_as_crash_or_failed_start(ready_pid: int | None, was_ready: bool) -> None:
    after, steps = next_actions(DaemonState(ready_pid=ready_pid, reload_pending=True), ImexExited(1, False), None)
    assert steps == (Step(Action.REPORT_EXIT, returncode=1, was_ready=was_ready),)
    assert after.ready_pid is None and not after.reload_pending


def test_started_changes_nothing() -> None:
    state = DaemonState()
    assert next_actions(state, Started(), None) == (state, ())


def test_each_answer_of_nvidia_imex_is_remembered_without_effects() -> None:
    ready, _ = next_actions(DaemonState(), ImexReady(8), imex_pid=8)
    answered, steps = next_actions(ready, ImexAnswered(8, True, 5.0), imex_pid=8)
    assert answered.answer == Answer(8, True, 5.0) and answered.ready_pid == 8 and steps == ()
    later, steps = next_actions(answered, ImexAnswered(8, False, 15.0), imex_pid=8)
    # the pod's probes read the answer; the entry follows the pod's Ready condition
    assert later.answer == Answer(8, False, 15.0) and later.ready_pid == 8 and steps == ()
