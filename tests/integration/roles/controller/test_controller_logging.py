"""`cdriver controller` as a process: at logVerbosity 0 it logs its start-up configuration once
and no API requests; at 6 each API request it sends (method, URL, status, latency)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cdriver.api.resources  # noqa: F401 - registers the driver's CRDs (the chart_crds fixture lists them)
from tests.support.waiting import wait_for

REQUEST = re.compile(r"cdriver\.kube\.requests: GET https?://\S+/apis/resource\.nvidia\.com/\S+ 200 in \d+ ms")


@pytest.fixture
def run_controller(cluster: Any, chart_crds: None, tmp_path: Path) -> Iterator:
    """Start the controller at a verbosity; returns its log file. Stopped afterwards."""
    procs: list[subprocess.Popen] = []

    def start(verbosity: int) -> Path:
        log = tmp_path / f"controller-v{verbosity}.log"
        argv = [sys.executable, "-m", "cdriver", "-v", str(verbosity), "controller",
                "--kubeconfig", str(cluster.kubeconfig), "--namespace", f"drv-{uuid.uuid4().hex[:8]}",
                "--daemon-image", "cdriver:test"]
        env = {k: v for k, v in os.environ.items() if k not in ("V", "LOG_VERBOSITY")}
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          env={**env, "PYTHONUNBUFFERED": "1"}))
        return log

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _text(log: Path) -> str:
    return log.read_text(errors="replace")


def test_at_0_the_start_up_configuration_is_logged_once_and_no_requests(run_controller) -> None:
    log = run_controller(0)
    wait_for("the controller to list and watch its objects", lambda: "controller started" in _text(log), 30)
    text = _text(log)
    starts = [line for line in text.splitlines() if "start-up configuration of controller" in line]
    assert len(starts) == 1, text
    assert "ComputeDomainCliques=true" in starts[0] and "; feature gates: " in starts[0]
    assert "daemon_image='cdriver:test'" in starts[0] and "log_verbosity=0" in starts[0]
    assert "cdriver.kube.requests" not in text and " D " not in text


def test_at_6_each_api_request_is_logged(run_controller) -> None:
    log = run_controller(6)
    wait_for("a logged API request", lambda: REQUEST.search(_text(log)) is not None, 30)
    assert _text(log).count("start-up configuration of controller") == 1
