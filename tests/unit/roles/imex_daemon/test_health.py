"""The daemon pod's probes as the running daemon answers them: the same decisions as `check`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cdriver.roles.imex_daemon.health import (
    ANSWER_STALE_SECONDS,
    NOOP_TEXT,
    Answer,
    HealthView,
    liveness,
    readiness,
    startup,
)

NOW = 1000.0
#: nvidia-imex pid 42 answered READY a moment ago
READY = HealthView(in_clique=True, stopping=False, blocked=None, imex_pid=42, ready_pid=42,
                   answer=Answer(42, True, NOW - 1), now=NOW)
PROBES = (readiness, liveness, startup)


@pytest.mark.parametrize("probe", PROBES)
def test_a_ready_nvidia_imex_passes_every_probe(probe) -> None:
    assert probe(READY) == (True, "nvidia-imex (pid 42) answers READY")


@pytest.mark.parametrize("probe", PROBES)
def test_off_the_fabric_every_probe_passes_as_a_noop(probe) -> None:
    view = replace(READY, in_clique=False, imex_pid=None, ready_pid=None, answer=None)
    assert probe(view) == (True, NOOP_TEXT)


@pytest.mark.parametrize("probe", PROBES)
@pytest.mark.parametrize(("change", "why"), [
    ({"imex_pid": None, "ready_pid": None}, "nvidia-imex is not running"),
    ({"ready_pid": None, "answer": Answer(42, False, NOW - 1)}, "nvidia-imex (pid 42) has not answered READY yet"),
    # restarted: the old child's READY does not count for the new one
    ({"imex_pid": 43}, "nvidia-imex (pid 43) has not answered READY yet"),
    ({"answer": Answer(42, False, NOW - 3)}, "nvidia-imex (pid 42) stopped answering READY (3s ago)"),
    ({"blocked": "IMEX port 50000 on pod IP 10.0.0.1 is already in use"},
     "IMEX daemon check failed: IMEX port 50000 on pod IP 10.0.0.1 is already in use"),
])
def test_what_fails_check_fails_the_probes(probe, change, why) -> None:
    assert probe(replace(READY, **change)) == (False, why)


@pytest.mark.parametrize("probe", PROBES)
def test_an_answer_too_old_means_a_stuck_daemon(probe) -> None:
    fresh = replace(READY, answer=Answer(42, True, NOW - ANSWER_STALE_SECONDS))
    assert probe(fresh)[0]
    stale = replace(READY, answer=Answer(42, True, NOW - ANSWER_STALE_SECONDS - 1))
    ok, why = probe(stale)
    assert not ok and "probe or loop is stuck" in why


def test_a_stopping_daemon_is_not_ready_but_stays_live() -> None:
    stopping = replace(READY, stopping=True)
    assert readiness(stopping) == (False, "the IMEX daemon is stopping")
    assert startup(stopping)[0] is False
    assert liveness(stopping) == (True, "nvidia-imex (pid 42) answers READY")
