"""A change of this daemon's own index restarts nvidia-imex (it reads its node ID only at
start); a change of the peers alone stays a SIGUSR1 reload."""

from __future__ import annotations

from cdriver.imex.names import dns_name
from cdriver.roles.imex_daemon.daemon_state import (
    Action,
    DaemonState,
    ImexExited,
    NamesChanged,
    Step,
    next_actions,
)
from cdriver.roles.imex_daemon.dnsnames import dns_mapping, own_index

PID = 41
UID = "6a1b2c3d-0000-4000-8000-00000000abcd"


def running(index: int, ready: bool = True) -> DaemonState:
    """nvidia-imex (PID) started when the hosts file gave this daemon ``index``."""
    return DaemonState(own_index=index, imex_index=index, ready_pid=PID if ready else None)


def test_a_new_own_index_restarts_and_reports_instead_of_reloading():
    after, steps = next_actions(running(2), NamesChanged(0), imex_pid=PID)
    assert steps == (Step(Action.RESTART, old_index=2, new_index=0),)
    assert (after.own_index, after.imex_index, after.ready_pid, after.reload_pending) == (0, 0, None, False)


def test_a_new_own_index_restarts_a_process_still_starting_too():
    after, steps = next_actions(running(2, ready=False), NamesChanged(3), imex_pid=PID)
    assert steps == (Step(Action.RESTART, old_index=2, new_index=3),)
    assert not after.reload_pending


def test_peers_alone_changing_is_a_reload():
    after, steps = next_actions(running(1), NamesChanged(1), imex_pid=PID)
    assert steps == (Step(Action.RELOAD),)
    assert after == running(1)


def test_peers_changing_during_start_reload_once_ready():
    after, steps = next_actions(running(1, ready=False), NamesChanged(1), imex_pid=PID)
    assert steps == () and after.reload_pending


def test_without_a_running_process_the_next_start_reads_the_new_index():
    after, steps = next_actions(running(2, ready=False), NamesChanged(0), imex_pid=None)
    assert steps == () and (after.own_index, after.imex_index) == (0, 0)


def test_losing_the_own_name_is_no_restart():
    after, steps = next_actions(running(2), NamesChanged(None), imex_pid=PID)
    assert steps == (Step(Action.RELOAD),)
    assert (after.own_index, after.imex_index) == (None, 2)  # the process still has index 2


def test_after_a_crash_the_respawned_process_reads_the_current_index():
    crashed, _ = next_actions(DaemonState(own_index=3, imex_index=1, ready_pid=PID), ImexExited(1, False), None)
    assert crashed.imex_index == 3
    stopped, _ = next_actions(DaemonState(own_index=3, imex_index=1), ImexExited(0, True), None)
    assert stopped.imex_index == 3


def test_own_index_is_the_name_the_hosts_file_gives_this_node():
    entries = [{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 2},
               {"nodeName": "n2", "ipAddress": "10.0.0.2", "cliqueID": "c", "index": 0}]
    mapping, _ = dns_mapping(entries, "c", UID, 4)
    assert mapping[dns_name(UID, 2)] == "10.0.0.1"
    assert own_index(entries, "n1", mapping, UID) == 2 and own_index(entries, "n2", mapping, UID) == 0
    assert own_index(entries, "n3", mapping, UID) is None
    outside = [{**entries[0], "index": 9}, entries[1]]
    assert own_index(outside, "n1", dns_mapping(outside, "c", UID, 4)[0], UID) is None
    legacy = [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c", "index": 1}]
    assert own_index(legacy, "n1", dns_mapping(legacy, "c", UID, 4)[0], UID, key="name") == 1
