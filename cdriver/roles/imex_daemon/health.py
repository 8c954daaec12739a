"""The daemon pod's probes answered by the running daemon (``/startupz``, ``/readyz``,
``/livez`` on its HTTP endpoint), so kubelet starts no process per probe.

They decide what `cdriver imex-daemon check` decides, from what the daemon already knows: the
check passes only while nvidia-imex answers exactly READY and no port conflict holds it back.
The daemon asks nvidia-imex itself (until READY after each start, then every
`READY_RECHECK_SECONDS`) and its loop records each answer; an answer that is too old means the
asking or the loop is stuck, and counts as no answer. All functions here are pure.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds between the daemon's questions to a READY nvidia-imex: the readiness probe's period.
READY_RECHECK_SECONDS = 10.0
#: An answer older than this counts as none (the daemon's probe or its loop is stuck). Generous:
#: a loop busy retrying API writes must not flip a healthy pod to NotReady.
ANSWER_STALE_SECONDS = 120.0
#: How long ``/startupz`` holds a request until READY (as `check --wait`): below the startup
#: probe's timeoutSeconds (10), above a normal start, so a starting daemon records no failures.
STARTUP_WAIT_SECONDS = 8.0

NOOP_TEXT = "ok (noop, clique ID is empty)"

Verdict = tuple[bool, str]


@dataclass(frozen=True)
class Answer:
    """What nvidia-imex process ``pid`` answered (READY or not) at ``at`` (monotonic seconds)."""

    pid: int
    ready: bool
    at: float


@dataclass(frozen=True)
class HealthView:
    """What the probes decide from, read from the daemon at request time."""

    #: this node is in an NVLink clique (False: no nvidia-imex runs here; every probe passes)
    in_clique: bool
    #: the daemon got SIGTERM and is leaving its clique
    stopping: bool
    #: a port conflict holds nvidia-imex back (the message says who holds the port)
    blocked: str | None
    #: the supervised nvidia-imex child (None: none runs)
    imex_pid: int | None
    #: the child that answered READY since its start, as the daemon loop recorded it
    ready_pid: int | None
    #: nvidia-imex's last answer as the daemon loop recorded it
    answer: Answer | None
    now: float


def readiness(view: HealthView, stale_after: float = ANSWER_STALE_SECONDS) -> Verdict:
    """``/readyz``: nvidia-imex, as the daemon last asked it, answers READY."""
    if not view.in_clique:
        return True, NOOP_TEXT
    if view.stopping:
        return False, "the IMEX daemon is stopping"
    return _imex_ready(view, stale_after)


def liveness(view: HealthView, stale_after: float = ANSWER_STALE_SECONDS) -> Verdict:
    """``/livez``: the readiness decision while the daemon runs (the exec liveness probe runs the
    same check; kubelet's failure threshold makes "long enough"); a stopping daemon stays live."""
    if not view.in_clique:
        return True, NOOP_TEXT
    return _imex_ready(view, stale_after)


def startup(view: HealthView, stale_after: float = ANSWER_STALE_SECONDS) -> Verdict:
    """``/startupz``: nvidia-imex answered READY (the endpoint holds the request a while first)."""
    return readiness(view, stale_after)


def _imex_ready(view: HealthView, stale_after: float) -> Verdict:
    if view.blocked:
        return False, f"IMEX daemon check failed: {view.blocked}"
    pid = view.imex_pid
    if pid is None:
        return False, "nvidia-imex is not running"
    answer = view.answer
    if view.ready_pid != pid or answer is None or answer.pid != pid:
        return False, f"nvidia-imex (pid {pid}) has not answered READY yet"
    age = view.now - answer.at
    if not answer.ready:
        return False, f"nvidia-imex (pid {pid}) stopped answering READY ({age:.0f}s ago)"
    if age > stale_after:
        return False, (f"nvidia-imex (pid {pid}) was last asked {age:.0f}s ago (more than {stale_after:g}s): "
                       "the IMEX daemon's probe or loop is stuck")
    return True, f"nvidia-imex (pid {pid}) answers READY"
