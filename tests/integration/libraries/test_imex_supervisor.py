"""The process supervisor with real child processes (no Kubernetes needed)."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import psutil
import pytest

from cdriver.imex.supervisor import ProcessSupervisor, SupervisorError
from tests.support.waiting import wait_for


def child(code: str) -> list[str]:
    """argv of a Python child running `code`, unbuffered."""
    return [sys.executable, "-u", "-c", code]


CRASHER = "print('boom: config broken'); raise SystemExit(3)"
SERVER = """
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print('reloaded', flush=True))
print('serving', flush=True)
while True:
    time.sleep(0.05)
"""
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('serving', flush=True)
while True:
    time.sleep(0.05)
"""


def serving(sup: ProcessSupervisor) -> bool:
    return "serving" in sup.last_output_lines(5)


def test_crashing_child_is_restarted_with_logged_count_and_output(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="cdriver.imex.supervisor")
    exits: list[tuple[int, bool]] = []
    log_path = tmp_path / "imex.log"
    sup = ProcessSupervisor(child(CRASHER), log_path=log_path, initial_backoff=0.02, max_backoff=0.1,
                            on_exit=lambda rc, expected: exits.append((rc, expected)), name="crasher")
    sup.start()
    try:
        wait_for("three restarts", lambda: sup.restart_count >= 3, 20)
    finally:
        sup.stop(grace=2)
    assert exits[:3] == [(3, False)] * 3
    assert "boom: config broken" in sup.last_output_lines(1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("restart #1" in w and "code 3" in w and "boom: config broken" in w for w in warnings)
    assert any("restart #3" in w for w in warnings)
    assert log_path.read_text().count("boom: config broken") >= 3
    assert not sup.active


def test_stop_sends_sigterm_first(tmp_path: Path) -> None:
    exits: list[tuple[int, bool]] = []
    sup = ProcessSupervisor(child(SERVER), on_exit=lambda rc, expected: exits.append((rc, expected)))
    sup.start()
    wait_for("the child to serve", lambda: serving(sup), 10)
    assert sup.stop(grace=5) == -signal.SIGTERM
    assert exits == [(-signal.SIGTERM, True)]
    assert sup.restart_count == 0
    assert sup.stop() == -signal.SIGTERM  # idempotent


def test_stop_escalates_to_sigkill_after_grace(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="cdriver.imex.supervisor")
    sup = ProcessSupervisor(child(STUBBORN), name="stubborn")
    sup.start()
    wait_for("the child to serve", lambda: serving(sup), 10)
    pid = sup.pid
    assert sup.stop(grace=0.3) == -signal.SIGKILL
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert any("SIGKILL" in r.getMessage() for r in caplog.records)


def test_reload_sends_sigusr1() -> None:
    sup = ProcessSupervisor(child(SERVER))
    with pytest.raises(SupervisorError):
        sup.reload()
    sup.start()
    try:
        wait_for("the child to serve", lambda: serving(sup), 10)
        pid = sup.pid
        sup.reload()
        wait_for("the reload", lambda: "reloaded" in sup.last_output_lines(5), 10)
        assert sup.pid == pid
        assert sup.restart_count == 0
    finally:
        sup.stop(grace=2)
    with pytest.raises(SupervisorError):
        sup.reload()


def test_restart_replaces_the_child_and_ensure_started_is_idempotent() -> None:
    sup = ProcessSupervisor(child(SERVER))
    assert sup.ensure_started() is True
    try:
        assert sup.ensure_started() is False
        wait_for("the child to serve", lambda: serving(sup), 10)
        first = sup.pid
        with pytest.raises(SupervisorError):
            sup.start()
        sup.restart(grace=2)
        assert sup.restart_count == 1
        assert sup.pid not in (None, first)
    finally:
        sup.stop(grace=2)


def test_missing_binary_is_a_clear_start_error(tmp_path: Path) -> None:
    sup = ProcessSupervisor([str(tmp_path / "nvidia-imex"), "-c", "/imexd/imexd.cfg"])
    with pytest.raises(SupervisorError) as err:
        sup.start()
    assert "not found" in str(err.value)
    assert not sup.active
