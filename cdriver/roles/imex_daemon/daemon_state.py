"""The daemon loop's inputs, what it remembers, and what one input changes (pure).

Watch handlers, the nvidia-imex supervisor, the READY probe and SIGTERM post typed events to
one queue; reconcile applies `NamesChanged` itself after it rewrote the hosts file.
`next_actions(state, event, imex_pid)` says what an event changes in the `DaemonState` and
which effects follow, in order; the shell (`main.Daemon`) runs them, then reconciles. Like the
controller's `deletion.plan_deletion`, it decides and does nothing.

nvidia-imex reads its own node ID (this daemon's index, the name its pod IP has in the hosts
file) only when it starts; a SIGUSR1 re-resolves its peers but keeps that ID. So a change of
the peers alone is a reload, a change of this daemon's own index a restart.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .health import Answer

# --- events: everything the loop reacts to, posted from other threads -------------------------


@dataclass(frozen=True)
class Started:
    """The watchers run: reconcile once even before the first watch event."""


@dataclass(frozen=True)
class MembersChanged:
    """The membership object (clique, or ComputeDomain in legacy mode) was added or updated."""

    obj: dict


@dataclass(frozen=True)
class MembersDeleted:
    """The membership object was deleted."""

    obj: dict


@dataclass(frozen=True)
class PodChanged:
    """This daemon's own Pod was added or updated."""

    pod: dict


@dataclass(frozen=True)
class PodDeleted:
    """This daemon's own Pod was deleted."""

    pod: dict


@dataclass(frozen=True)
class ImexReady:
    """nvidia-imex process ``pid`` answered READY to the self-probe."""

    pid: int


@dataclass(frozen=True)
class ImexAnswered:
    """nvidia-imex process ``pid`` answered the self-probe, READY or not, at ``at`` (monotonic):
    what the pod's probes decide from. No reconcile follows."""

    pid: int
    ready: bool
    at: float


@dataclass(frozen=True)
class ImexExited:
    """nvidia-imex exited with ``returncode``; ``expected`` when the daemon stopped it."""

    returncode: int
    expected: bool


@dataclass(frozen=True)
class NamesChanged:
    """DNS-name mode: the hosts file now maps new names; ``own_index`` is this daemon's index in
    it (None: its pod IP has no name there)."""

    own_index: int | None


@dataclass(frozen=True)
class Stop:
    """SIGTERM or SIGINT: leave the loop and shut down."""


Event = (Started | MembersChanged | MembersDeleted | PodChanged | PodDeleted | ImexReady | ImexAnswered
         | ImexExited | NamesChanged | Stop)


# --- state ----------------------------------------------------------------------------------------


@dataclass
class DaemonState:
    """What the daemon loop remembers between events."""

    #: this daemon's Pod as last seen (None: not seen yet, or deleted)
    pod: dict | None = None
    #: DNS-name mode: the name -> IP mapping last written to the hosts file
    mapping: dict[str, str] | None = None
    #: DNS-name mode: this daemon's index in the hosts file as last written
    own_index: int | None = None
    #: DNS-name mode: the index the running nvidia-imex read when it started (its node ID)
    imex_index: int | None = None
    #: IP mode: the peer list last written to nodes.cfg
    ip_peers: list[str] | None = None
    #: the nvidia-imex child that answered READY since its start
    ready_pid: int | None = None
    #: nvidia-imex's last answer to the self-probe (what the pod's probes decide from)
    answer: Answer | None = None
    #: a port conflict holds nvidia-imex back (the message says who holds the port)
    blocked: str | None = None
    #: the ComputeDomain is being deleted: never join again
    domain_ended: bool = False
    #: nvidia-imex could not be started (the message)
    start_error: str | None = None
    #: when a blocked or failed start is tried again (monotonic seconds)
    recheck_at: float = 0.0
    #: when a failed reconcile is retried (monotonic seconds; None: no retry due)
    retry_at: float | None = None
    #: reconciles failed in a row, and the last one's message
    failures: int = 0
    last_error: str = ""
    #: DNS-name mode: members that got no name, as last logged
    last_problems: list[str] = field(default_factory=list)
    #: IP mode: the last "waiting for all nodes" line logged
    last_wait_log: str = ""
    #: SIGUSR1s sent to nvidia-imex
    reloads: int = 0
    #: peers changed while nvidia-imex was still starting: signal it once it is READY
    reload_pending: bool = False
    #: start-up garbage was released (once, at the first Ready)
    trimmed: bool = False


# --- decision ---------------------------------------------------------------------------------------


class Action(enum.Enum):
    OBSERVE_MEMBERS = "observe-members"  # the store takes the object as the current one
    FORGET_MEMBERS = "forget-members"  # the object is gone: forget it, ask whether the domain ends
    LOG_READY = "log-ready"  # say that nvidia-imex (pid) answers READY
    RELOAD = "reload"  # SIGUSR1 to nvidia-imex: re-resolve the peers
    RESTART = "restart"  # stop and start nvidia-imex: its own index changed; report it (Event)
    REPORT_EXIT = "report-exit"  # an unexpected exit: diagnose (port conflict?), event, probe again


@dataclass(frozen=True)
class Step:
    action: Action
    obj: dict = field(default_factory=dict)
    pid: int = 0
    returncode: int = 0
    #: REPORT_EXIT: the process had answered READY (a crash, not a failed start)
    was_ready: bool = False
    #: RESTART: the index the running nvidia-imex has, and the one the new process reads
    old_index: int | None = None
    new_index: int | None = None


def next_actions(state: DaemonState, event: Event, imex_pid: int | None) -> tuple[DaemonState, tuple[Step, ...]]:
    """The state after `event` and the effects to run for it, in order; `imex_pid` is the
    current nvidia-imex child (None when none runs). `state` itself is not changed."""
    match event:
        case MembersChanged(obj=obj):
            return state, (Step(Action.OBSERVE_MEMBERS, obj=obj),)
        case MembersDeleted():
            return state, (Step(Action.FORGET_MEMBERS),)
        case PodChanged(pod=pod):
            return replace(state, pod=pod), ()
        case PodDeleted():
            return replace(state, pod=None), ()
        case ImexReady(pid=pid):
            if pid != imex_pid or state.ready_pid == pid:
                return state, ()
            steps = [Step(Action.LOG_READY, pid=pid)]
            if state.reload_pending:
                steps.append(Step(Action.RELOAD))
            return replace(state, ready_pid=pid, reload_pending=False), tuple(steps)
        case ImexAnswered(pid=pid, ready=ready, at=at):
            return replace(state, answer=Answer(pid, ready, at)), ()
        case ImexExited(returncode=returncode, expected=expected):
            # the next process reads the current hosts file: no signal pending any more
            if expected:
                return replace(state, reload_pending=False, imex_index=state.own_index), ()
            after = replace(state, reload_pending=False, ready_pid=None, imex_index=state.own_index)
            return after, (Step(Action.REPORT_EXIT, returncode=returncode, was_ready=state.ready_pid is not None),)
        case NamesChanged(own_index=own_index):
            return names_changed(state, own_index, imex_pid)
    return state, ()


def names_changed(state: DaemonState, own_index: int | None,
                  imex_pid: int | None) -> tuple[DaemonState, tuple[Step, ...]]:
    """The hosts file changed: restart nvidia-imex if this daemon's own index changed, else
    signal it to re-resolve its peers (once it is READY: a signal during start-up kills it)."""
    after = replace(state, own_index=own_index)
    if imex_pid is None:
        return replace(after, imex_index=own_index), ()  # the next process reads the new file
    old = state.imex_index
    if own_index is not None and old is not None and own_index != old:
        after = replace(after, imex_index=own_index, ready_pid=None, reload_pending=False)
        return after, (Step(Action.RESTART, old_index=old, new_index=own_index),)
    if state.ready_pid == imex_pid:
        return after, (Step(Action.RELOAD),)
    return replace(after, reload_pending=True), ()
