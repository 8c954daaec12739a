"""A simulated node's containers, launched without a cluster: each has its own root and PID
namespace, and everything it starts dies with it and with the process that started it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from cdriver.sim.node.simulated import logs
from cdriver.sim.node.simulated.container import ContainerProcess, LaunchSpec, run_in_container
from cdriver.sim.node.simulated.volumes import BindMount
from tests.support.waiting import wait_for

ENV = {"PATH": "/usr/bin:/bin"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def output(path: Path) -> list[str]:
    return [line for line in logs.render(logs.read_entries(path)).decode().split("\n") if line]


def test_a_killed_agent_process_leaves_no_container_process_behind(tmp_path: Path) -> None:
    """What a container started (a daemon holding a port, like the nvidia-imex stand-in) dies
    when the process running the node is SIGKILLed, so the next run finds the port free."""
    port = free_port()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "holder.py").write_text(
        f"import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', {port}))\ns.listen()\ntime.sleep(600)\n")
    agent = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from cdriver.sim.node.simulated.container import ContainerProcess, LaunchSpec
        from cdriver.sim.node.simulated.volumes import BindMount
        t = Path({str(tmp_path)!r})
        spec = LaunchSpec(argv=["sh", "-c", "{sys.executable} /scripts/holder.py & wait"], env={ENV!r},
                          mounts=[BindMount(str(t / "scripts"), "/scripts")], staging=str(t / "stage"))
        ContainerProcess(spec, t / "spec.json", t / "0.log", "holder").start()
        print("started", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", agent], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        wait_for("the container's daemon to listen", lambda: not port_free(port), 20)
    finally:
        proc.kill()
        proc.wait()
    wait_for("the port to be free once the agent process died", lambda: port_free(port), 10)


def test_container_has_its_own_root_and_pid_namespace(tmp_path: Path) -> None:
    """Missing mount points and writes land in the container's root, never on the machine;
    the command runs as PID 2 under the container's init, which passes SIGTERM on."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("volume-content")
    absent = f"/cdriver-absent-{uuid.uuid4().hex[:8]}"
    tool = f"/usr/bin/cdriver-absent-{uuid.uuid4().hex[:8]}"
    script = (f"echo pid=$$; cat {absent}/f; echo; test -f {tool} && echo file-mount; "
              f"echo private > /etc/cdriver-written-{uuid.uuid4().hex[:4]} && echo wrote-etc; "
              "echo ready; trap 'echo got-term; exit 3' TERM; sleep 600 & wait")
    spec = LaunchSpec(argv=["sh", "-c", script], env=ENV, hostname="pod-root",
                      mounts=[BindMount(str(data), absent, read_only=True), BindMount(str(data / "f"), tool)],
                      staging=str(tmp_path / "stage"))
    log = tmp_path / "logs" / "0.log"
    proc = ContainerProcess(spec, tmp_path / "spec.json", log, "t").start()
    try:
        wait_for("the container's script", lambda: log.exists() and "ready" in output(log), 10)
        inside = run_in_container(proc.init_pid, ["sh", "-c", f"ls {absent}; cat /proc/1/cmdline | tr '\\0' ' '; echo; "
                                                  "ls /proc | grep -c '^[0-9]'"], ENV, "/", 10)
        names = inside.stdout.decode().split("\n")
        assert names[0] == "f" and "launcher" in names[1]
        # init, the script, its sleep, and the exec'd shell with its ls/grep: nothing of the machine
        assert int(names[2]) <= 6
        assert not os.path.exists(absent) and not os.path.exists(tool)
        proc.signal(signal.SIGTERM)
        assert proc.wait(10) == 3
    finally:
        proc.kill_group()
        proc.wait(10)
        proc.close()
    assert output(log) == ["pid=2", "volume-content", "file-mount", "wrote-etc", "ready", "got-term"]
    assert not os.path.exists(absent) and not os.path.exists(tool)
    assert not [p for p in os.listdir("/etc") if p.startswith("cdriver-written-")]


def test_an_address_block_of_a_killed_cluster_process_is_free_again() -> None:
    """The lease is held by the owning process: SIGKILL ends it, no stale lock stays."""
    from cdriver.sim.node.addresses import try_lease

    owner = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              "from cdriver.sim.node.addresses import lease_block\n"
                              "b = lease_block(); print(b.prefix, flush=True); time.sleep(600)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        prefix = owner.stdout.readline().strip()
        assert prefix.startswith("127.") and try_lease(prefix) is None
    finally:
        owner.kill()
        owner.wait()
    block = wait_for("the dead owner's block to be free", lambda: try_lease(prefix), 10)
    block.release()


def test_a_cluster_start_finds_the_host_services_a_dead_run_of_its_directory_left(tmp_path: Path) -> None:
    """Processes marked as belonging below a cluster's directory (a host IMEX service runs
    outside any container) are found by that directory, not by a sibling's, and ended."""
    from cdriver.sim.controlplane.pidfile import OWNER_ENV
    from cdriver.sim.node.simulated.leftovers import kill_processes_below, processes_below

    def started(owner: Path) -> subprocess.Popen:
        return subprocess.Popen(["sleep", "600"], env={**ENV, OWNER_ENV: str(owner)})

    mine, sibling = started(tmp_path / "cde" / "nodes" / "n1"), started(tmp_path / "cde-other" / "nodes" / "n1")
    try:
        assert processes_below(tmp_path / "cde") == [mine.pid]
        assert kill_processes_below(tmp_path / "cde") == [mine.pid]
        assert mine.wait(10) == -signal.SIGKILL
        assert sibling.poll() is None and processes_below(tmp_path / "cde-other") == [sibling.pid]
    finally:
        for proc in (mine, sibling):
            proc.kill()
            proc.wait()
