"""`cdriver sim up|down|demo`: the local simulated cluster with the driver installed.

`up` starts the control plane, the simulated nodes and the chart in a background process and
prints how to use the cluster; `down` stops it. `demo` does both around the narrated
ComputeDomain scenario and exits 0 only if every check passed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.atomic import atomic_write
from cdriver.sim.controlplane.pidfile import process_alive, read_pid, stop_process

UP_TIMEOUT = 1800.0  # includes a first, cold build of the control plane
#: added for --driver-platform: a first arm64 image is packaged under emulation (about 40 min on 2 cores)
FOREIGN_IMAGE_TIMEOUT = 3600.0


def default_base_dir() -> Path:
    """Short on purpose: Unix socket paths under a node's root are limited to 107 bytes."""
    return Path(os.environ.get("CDRIVER_SIM_DIR") or f"/tmp/cdriver-sim-{os.getuid()}")


def _files(base: Path) -> tuple[Path, Path, Path]:
    return base / "world.pid", base / "world.json", base / "world.log"




def _settings(base: Path, nodes: int, topology: Path | None, host_managed: bool, real_nodes: int = 0,
              driver: str = "cdriver", driver_platform: str = ""):
    from cdriver.sim.world.world import WorldSettings

    return WorldSettings(base_dir=base, nodes=nodes, topology=topology, real_nodes=real_nodes, driver=driver,
                         imex_mode=IMEX_MODE_HOST_MANAGED if host_managed else IMEX_MODE_DRIVER_MANAGED,
                         driver_platform=driver_platform)


def _echo_err(msg: str) -> None:
    click.echo(msg, err=True)


nodes_option = click.option("--nodes", type=click.IntRange(1), default=None,
                            help="Number of nodes, the topology's first ones [default: all of the topology's].")
real_nodes_option = click.option("--real-nodes", default=0, show_default=True, type=click.IntRange(0, 250),
                                 help="How many of the nodes run a real kubelet, containerd and runc "
                                      "(root; builds them on first use).")
topology_option = click.option("--topology", default=None, metavar="NAME|FILE",
                               help="Topology: a shipped one by name (demo, gb200-nvl72, gb200-nvl72x4, "
                                    "gb300-nvl72, gb300-nvl72x4) or a document's path [default: demo].")
base_option = click.option("--base-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                           help="Where the cluster keeps its files [default: /tmp/cdriver-sim-<uid>, "
                                "env CDRIVER_SIM_DIR].")


@click.command("up")
@base_option
@nodes_option
@real_nodes_option
@topology_option
@click.option("--host-managed", is_flag=True, help="Install in host-managed IMEX mode.")
@click.option("--driver", type=click.Choice(["cdriver", "upstream"]), default="cdriver", show_default=True,
              help="Which driver to install: cdriver's chart, or the upstream Go driver (built by `make peer`).")
@click.option("--driver-platform", type=click.Choice(["linux/amd64", "linux/arm64"]), default=None,
              help="Run the driver image of this platform on the simulated nodes (linux/arm64, as on Grace "
                   "nodes, runs under emulation; its first build takes tens of minutes) [default: this "
                   "checkout's cdriver, natively].")
@click.option("--foreground", is_flag=True, help="Run in this process until Ctrl-C instead of detaching.")
def up(base_dir: Path | None, nodes: int | None, real_nodes: int, topology: str | None, host_managed: bool,
       driver: str, driver_platform: str | None, foreground: bool) -> None:
    """Start a local cluster: control plane, GB200 nodes (simulated, or real with --real-nodes), and the
    driver's chart (cdriver's, or the upstream driver's with --driver upstream)."""
    topology_path, nodes = _topology_and_nodes(topology, nodes)
    if real_nodes > nodes:
        raise click.BadParameter(f"{real_nodes} real nodes of {nodes}: --real-nodes must not exceed --nodes",
                                 param_hint="--real-nodes")
    if driver_platform and (real_nodes or driver != "cdriver"):
        raise click.BadParameter("a driver image of another platform runs on simulated nodes with cdriver only "
                                 "(a real node's runc cannot run it under emulation)", param_hint="--driver-platform")
    base = base_dir or default_base_dir()
    pid_file, state_file, log_file = _files(base)
    if process_alive(read_pid(pid_file)):
        raise click.ClickException(f"a simulated cluster is already running (pid {read_pid(pid_file)}); "
                                   "stop it with `cdriver sim down`")
    if not foreground:
        base.mkdir(parents=True, exist_ok=True)
        state_file.unlink(missing_ok=True)
        argv = [*_self_argv(), "up", "--foreground", "--base-dir", str(base), "--nodes", str(nodes),
                "--real-nodes", str(real_nodes), "--topology", str(topology_path)]
        if host_managed:
            argv.append("--host-managed")
        argv += ["--driver", driver]
        if driver_platform:
            argv += ["--driver-platform", driver_platform]
        with open(log_file, "wb") as logf:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        _echo_err(f"starting the simulated cluster (progress: {log_file}) ...")
        shown = 0
        timeout = UP_TIMEOUT + (FOREIGN_IMAGE_TIMEOUT if driver_platform else 0)
        deadline = time.monotonic() + timeout
        while not state_file.exists():
            lines = log_file.read_text(errors="replace").splitlines()
            for line in lines[shown:]:
                if line.startswith(("==>", "    ", "[build")):
                    _echo_err(line)
            shown = len(lines)
            if child.poll() is not None:
                raise click.ClickException(f"the simulated cluster failed to start (exit {child.returncode}); "
                                           f"last lines of {log_file}:\n" + "\n".join(lines[-40:]))
            if time.monotonic() > deadline:
                child.terminate()
                raise click.ClickException(f"not ready after {timeout:.0f} s; see {log_file}")
            time.sleep(0.5)
        state = json.loads(state_file.read_text())
        _print_usage(state)
        return

    from cdriver.sim.world.world import SimWorld, WorldError

    base.mkdir(parents=True, exist_ok=True)
    for sub in ("cluster", "nodes", "driver-image"):
        shutil.rmtree(base / sub, ignore_errors=True)
    pid_file.write_text(f"{os.getpid()}\n")
    stopping = {"flag": False}

    def on_signal(signum: int, _frame: object) -> None:
        stopping["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    world = SimWorld(_settings(base, nodes, topology_path, host_managed, real_nodes, driver, driver_platform or ""),
                     progress=lambda m: click.echo(m, err=True))
    try:
        try:
            world.start()
        except WorldError as e:
            raise click.ClickException(str(e)) from None
        state = {"kubeconfig": str(world.kubeconfig), "server": world.cluster.server,
                 "kubectl": str(world.kubectl), "helm": str(world.helm), "pid": os.getpid(),
                 "nodes": [{"name": n.name, "ip": n.ip, "clique": n.clique, "real": n.real} for n in world.nodes]}
        atomic_write(state_file, json.dumps(state, indent=2))
        click.echo("simulated cluster is up", err=True)
        while not stopping["flag"]:
            time.sleep(1.0)
    finally:
        world.stop()
        state_file.unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)
        click.echo("simulated cluster stopped", err=True)


def _topology_and_nodes(topology: str | None, nodes: int | None) -> tuple[Path, int]:
    """The topology file (`--topology` by name or path) and how many of its nodes to start."""
    from cdriver.sim.gpu.topology import TopologyError, demo_topology_path, load_topology, resolve_topology

    try:
        path = resolve_topology(topology) if topology else demo_topology_path()
        listed = len(load_topology(path).nodes())
    except TopologyError as e:
        raise click.BadParameter(str(e), param_hint="--topology") from None
    if nodes is None:
        return path, listed
    if nodes > listed:
        raise click.BadParameter(f"the topology {path.name} lists {listed} nodes; ask for at most that many",
                                 param_hint="--nodes")
    return path, nodes


def _self_argv() -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "sim"]
    return [sys.executable, "-m", "cdriver", "sim"]


def _print_usage(state: dict) -> None:
    nodes = "\n".join(f"  {n['name']:<10} {n['ip']:<11} clique {n['clique'] or '-'}"
                      f"{'  (real: kubelet + containerd)' if n.get('real') else ''}" for n in state["nodes"])
    click.echo(f"""The simulated cluster is up.

  export KUBECONFIG={state['kubeconfig']}
  alias kubectl={state['kubectl']}
  kubectl get nodes -L nvidia.com/gpu.clique
  kubectl get computedomains -A
  kubectl get pods -n cdriver-system

Nodes:
{nodes}

Stop it with: cdriver sim down""")


@click.command("down")
@base_option
@click.option("--timeout", default=120.0, show_default=True, help="Seconds to wait for the stop.")
def down(base_dir: Path | None, timeout: float) -> None:
    """Stop the simulated cluster started by `cdriver sim up`."""
    base = base_dir or default_base_dir()
    pid_file, _, _ = _files(base)
    pid = read_pid(pid_file)
    if not process_alive(pid):
        pid_file.unlink(missing_ok=True)
        _echo_err("no simulated cluster is running")
        return
    assert pid is not None
    if not stop_process(pid, timeout):
        raise click.ClickException(f"the cluster process {pid} did not stop in {timeout:.0f} s; kill -9 {pid}")
    _echo_err("simulated cluster stopped")


@click.command("demo")
@base_option
@click.option("--keep", is_flag=True, help="Leave the cluster running after the demo (stop with Ctrl-C).")
@real_nodes_option
def demo(base_dir: Path | None, keep: bool, real_nodes: int) -> None:
    """Bring up a 4-node simulated cluster, run the narrated ComputeDomain demo, tear it down.

    Exits 0 only if every check passed.
    """
    from cdriver.sim.world.demo import run_demo
    from cdriver.sim.world.world import SimWorld, WorldError

    base = (base_dir or default_base_dir()) / "demo"
    shutil.rmtree(base, ignore_errors=True)
    start = time.monotonic()
    world = SimWorld(_settings(base, 4, None, False, real_nodes), progress=lambda m: click.echo(m))
    try:
        try:
            world.start()
        except WorldError as e:
            raise click.ClickException(str(e)) from None
        click.echo(f"cluster ready in {time.monotonic() - start:.1f} s; KUBECONFIG={world.kubeconfig}\n")
        report = run_demo(world, echo=click.echo)
        total = time.monotonic() - start
        if report.ok:
            click.echo(f"\nDEMO PASSED: {len(report.steps)} checks in {total:.1f} s")
        if keep:
            click.echo("cluster left running; Ctrl-C stops it")
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    finally:
        world.stop()
    if not report.ok:
        raise click.ClickException(f"demo failed: {report.error}")
