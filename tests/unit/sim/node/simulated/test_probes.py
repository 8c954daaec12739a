"""Probe thresholds and single checks on simulated nodes."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

from cdriver.sim.node.simulated import probes


def test_tracker_honours_success_and_failure_thresholds() -> None:
    tracker = probes.ProbeTracker(probes.ProbeSettings(success_threshold=2, failure_threshold=3), initial=False)
    assert not tracker.record(True)
    assert tracker.record(True) and tracker.state is True
    assert not tracker.record(False) and not tracker.record(False)
    assert tracker.record(False) and tracker.state is False
    assert not tracker.record(False)  # no new transition


def test_initial_states_and_defaults() -> None:
    assert probes.initial_state(probes.LIVENESS) is True
    assert probes.initial_state(probes.READINESS) is False
    assert probes.initial_state(probes.STARTUP) is None
    s = probes.ProbeSettings.from_probe({"exec": {"command": ["true"]}})
    assert (s.period, s.timeout, s.failure_threshold, s.success_threshold) == (10, 1, 3, 1)


def test_check_exec_reports_output_and_timeouts() -> None:
    def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, timeout=timeout)

    assert probes.check_exec(run, ["sh", "-c", "echo fine"], 5) == (True, "fine")
    ok, message = probes.check_exec(run, ["sh", "-c", "echo broken >&2; exit 3"], 5)
    assert not ok and message == "broken"
    ok, message = probes.check_exec(run, ["sleep", "5"], 0.2)
    assert not ok and "timed out" in message


def test_tcp_and_http_checks_against_local_listeners() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        assert probes.check_tcp({"port": "web"}, "127.0.0.1", 1, {"web": port})[0]
    finally:
        server.close()
    assert not probes.check_tcp({"port": port}, "127.0.0.1", 1, {})[0]
    ok, message = probes.check_http({"port": port, "path": "/healthz"}, "127.0.0.1", 1, {})
    assert not ok and "healthz" in message
    with pytest.raises(ValueError, match="named container port"):
        probes.resolve_port("missing", {})


def test_worker_reports_changes_and_each_failure() -> None:
    results = iter([False, True, True, False])
    changes: list[tuple[str, bool]] = []
    failures: list[str] = []
    done = threading.Event()

    def check(timeout: float) -> tuple[bool, str]:
        try:
            return next(results), "msg"
        except StopIteration:
            done.set()
            return False, "end"

    worker = probes.ProbeWorker(probes.READINESS, {"periodSeconds": 0.01, "failureThreshold": 1},
                                check, lambda k, ok, m: changes.append((k, ok)), lambda k, m: failures.append(m))
    worker.settings.period = 0.01
    worker.start()
    assert done.wait(5)
    worker.stop()
    time.sleep(0.05)
    assert changes[:2] == [(probes.READINESS, True), (probes.READINESS, False)]
    assert failures[:2] == ["msg", "msg"]
