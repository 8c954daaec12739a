"""`cdriver sim up` / `cdriver sim down`: a simulated cluster kept running in the background."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cdriver.sim.controlplane.pidfile import process_alive, read_pid

pytestmark = pytest.mark.e2e


def cdriver(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdriver", "sim", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_up_prints_how_to_use_it_and_down_stops_everything() -> None:
    base = Path(tempfile.mkdtemp(prefix="cdu", dir="/tmp"))
    try:
        up = cdriver("up", "--nodes", "2", "--base-dir", str(base))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "export KUBECONFIG=" in up.stdout and "cdriver sim down" in up.stdout
        state = json.loads((base / "world.json").read_text())
        pid = read_pid(base / "world.pid")
        assert process_alive(pid)
        nodes = subprocess.run([state["kubectl"], "--kubeconfig", state["kubeconfig"], "get", "nodes", "-o", "json"],
                               capture_output=True, text=True, timeout=60)
        assert nodes.returncode == 0, nodes.stderr
        ready = {n["metadata"]["name"]: next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
                 for n in json.loads(nodes.stdout)["items"]}
        assert ready == {"worker-1": "True", "worker-2": "True"}
        again = cdriver("up", "--nodes", "2", "--base-dir", str(base))
        assert again.returncode != 0 and "already running" in again.stderr

        down = cdriver("down", "--base-dir", str(base))
        assert down.returncode == 0, down.stderr
        assert not process_alive(pid)
        assert not (base / "world.json").exists()
        gone = subprocess.run([state["kubectl"], "--kubeconfig", state["kubeconfig"], "get", "nodes",
                               "--request-timeout=3s"], capture_output=True, text=True, timeout=30)
        assert gone.returncode != 0  # the API server is gone too
    finally:
        cdriver("down", "--base-dir", str(base), timeout=180)
        shutil.rmtree(base, ignore_errors=True)
