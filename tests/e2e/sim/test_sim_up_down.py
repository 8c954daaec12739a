"""`cdriver sim up` / `cdriver sim down`: a simulated cluster kept running in the background."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cdriver.sim.controlplane.pidfile import process_alive, read_pid


def cdriver(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cdriver", "sim", *args], capture_output=True, text=True,
                          timeout=timeout)


def start_up(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cdriver", "sim", "up", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_clusters_come_up_at_once_and_down_stops_everything() -> None:
    """Two clusters on one machine: each bootstraps (controller and every plugin ready) on
    addresses of its own; `down` stops one without touching the other."""
    base = Path(tempfile.mkdtemp(prefix="cdu", dir="/tmp"))
    other = Path(tempfile.mkdtemp(prefix="cdv", dir="/tmp"))
    try:
        starts = [start_up("--nodes", "2", "--base-dir", str(base)), start_up("--nodes", "1", "--base-dir", str(other))]
        (out, err), (other_out, other_err) = (p.communicate(timeout=900) for p in starts)
        assert starts[0].returncode == 0, out + err
        assert starts[1].returncode == 0, other_out + other_err
        assert "export KUBECONFIG=" in out and "cdriver sim down" in out
        state = json.loads((base / "world.json").read_text())
        other_state = json.loads((other / "world.json").read_text())
        assert not {n["ip"] for n in state["nodes"]} & {n["ip"] for n in other_state["nodes"]}
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
        still = subprocess.run([other_state["kubectl"], "--kubeconfig", other_state["kubeconfig"], "get", "nodes",
                                "-o", "name"], capture_output=True, text=True, timeout=60)
        assert still.returncode == 0 and still.stdout.split() == ["node/worker-1"], still.stderr
    finally:
        cdriver("down", "--base-dir", str(base), timeout=180)
        cdriver("down", "--base-dir", str(other), timeout=180)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
