"""`cdriver sim cluster up|down|status`: the local control plane from the command line.

``up`` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler and prints the
admin kubeconfig path on stdout, so ``export KUBECONFIG=$(cdriver sim cluster up --detach)``
makes kubectl talk to it. Without ``--detach`` it runs until Ctrl-C.

Files under the base directory (default ``${XDG_STATE_HOME:-~/.local/state}/cdriver``):
``cluster/`` the run directory (PKI, etcd data, kubeconfig, logs), ``cluster.pid`` the process
holding the cluster, ``cluster.log`` its output when detached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

from cdriver.errors import CdriverError
from cdriver.sim.controlplane.pidfile import process_alive, read_pid, stop_process

DETACH_TIMEOUT = 600.0


def default_base_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cdriver"


def _paths(base: Path) -> tuple[Path, Path, Path]:
    """(run dir, pid file, detached log) under `base`."""
    return base / "cluster", base / "cluster.pid", base / "cluster.log"




def _up_argv() -> list[str]:
    """How to run `up` in a child process (from a frozen binary or the Python package)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "sim", "cluster", "up"]
    return [sys.executable, "-m", "cdriver.sim.controlplane.cli", "up"]


base_option = click.option(
    "--base-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Directory holding the cluster's run dir, pid file and log "
         "[default: ${XDG_STATE_HOME:-~/.local/state}/cdriver].")


@click.group("cluster")
def command() -> None:
    """A real local Kubernetes control plane (etcd + kube-apiserver + controller-manager +
    scheduler on 127.0.0.1), built from Go modules on first use."""


def _prepare_base(base: Path) -> tuple[Path, Path, Path]:
    run_dir, pid_file, log_file = _paths(base)
    pid = read_pid(pid_file)
    if process_alive(pid):
        raise click.ClickException(
            f"a local cluster is already running (pid {pid}, kubeconfig {run_dir / 'admin.kubeconfig'}); "
            "stop it with `cdriver sim cluster down` or pick another --base-dir")
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)  # left over from a cluster whose process is gone
    pid_file.unlink(missing_ok=True)
    base.mkdir(parents=True, exist_ok=True)
    return run_dir, pid_file, log_file


def _detach(base: Path, keep: bool, run_dir: Path, log_file: Path) -> None:
    argv = [*_up_argv(), "--base-dir", str(base)]
    if keep:
        argv.append("--keep")
    with open(log_file, "wb") as logf:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    state = run_dir / "cluster.json"
    deadline = time.monotonic() + DETACH_TIMEOUT
    click.echo(f"starting the local control plane (log: {log_file}) ...", err=True)
    while not state.exists():
        if child.poll() is not None:
            from cdriver.sim.controlplane.cluster import tail_lines

            raise click.ClickException(
                f"the local cluster failed to start (exit {child.returncode}); last lines of "
                f"{log_file}:\n{tail_lines(log_file, 30)}")
        if time.monotonic() > deadline:
            child.terminate()
            raise click.ClickException(f"the local cluster was not ready after {DETACH_TIMEOUT:.0f} s; "
                                       f"see {log_file}")
        time.sleep(0.2)
    click.echo(str(run_dir / "admin.kubeconfig"))


@command.command()
@base_option
@click.option("--detach", is_flag=True, help="Start in the background, print the kubeconfig path and return.")
@click.option("--keep", is_flag=True,
              help="Keep the run directory (logs, etcd data) after the cluster stops.")
def up(base_dir: Path | None, detach: bool, keep: bool) -> None:
    """Start the control plane and print the admin kubeconfig path."""
    base = base_dir or default_base_dir()
    run_dir, pid_file, log_file = _prepare_base(base)
    if detach:
        _detach(base, keep, run_dir, log_file)
        return

    from cdriver.sim.controlplane.cluster import LocalCluster

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    pid_file.write_text(f"{os.getpid()}\n")
    cluster = LocalCluster(run_dir=run_dir, keep=keep)
    try:
        try:
            cluster.start()  # Ctrl-C here interrupts a build or start-up; `finally` cleans up
        except CdriverError as exc:
            raise click.ClickException(str(exc)) from None
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        click.echo(str(cluster.kubeconfig))
        click.echo(f"kube-apiserver at {cluster.server}; export KUBECONFIG={cluster.kubeconfig} "
                   "to use kubectl. Ctrl-C (or `cdriver sim cluster down`) stops it.", err=True)
        while not stop.wait(2.0):
            restarted = cluster.ensure_healthy() if cluster.dead_components() else []
            for name in restarted:
                click.echo(f"{name} had exited; restarted it", err=True)
    finally:
        cluster.stop()
        pid_file.unlink(missing_ok=True)
        click.echo("local cluster stopped", err=True)


@command.command()
@base_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for the stop.")
def down(base_dir: Path | None, timeout: float) -> None:
    """Stop a cluster started with `up` (SIGTERM to its process; it stops every component)."""
    base = base_dir or default_base_dir()
    run_dir, pid_file, _ = _paths(base)
    pid = read_pid(pid_file)
    if not process_alive(pid):
        pid_file.unlink(missing_ok=True)
        click.echo(f"no local cluster is running (no live process in {pid_file})", err=True)
        return
    assert pid is not None
    if not stop_process(pid, timeout):
        raise click.ClickException(f"the cluster process {pid} did not stop within {timeout:.0f} s; "
                                   f"kill it with `kill -9 {pid}` and remove {run_dir}")
    click.echo("local cluster stopped", err=True)


@command.command()
@base_option
def status(base_dir: Path | None) -> None:
    """Show whether the cluster runs, its API server, kubeconfig and component processes."""
    import ssl

    from cdriver.sim.controlplane.cluster import ClusterError, probe, read_state

    base = base_dir or default_base_dir()
    run_dir, pid_file, _ = _paths(base)
    pid = read_pid(pid_file)
    if not process_alive(pid):
        click.echo("stopped")
        sys.exit(1)
    try:
        state = read_state(run_dir)
    except ClusterError:
        click.echo(f"starting (pid {pid})")
        sys.exit(1)
    ctx = ssl.create_default_context(cafile=str(run_dir / "pki" / "ca.crt"))
    ready, detail = probe(f"{state['server']}/readyz", ctx)
    click.echo(f"{'ready' if ready else 'not ready'} (pid {pid})")
    click.echo(f"server: {state['server']}")
    click.echo(f"kubeconfig: {state['kubeconfig']}")
    if state.get("kubectl"):
        click.echo(f"kubectl: {state['kubectl']}")
    for name, cpid in state.get("pids", {}).items():
        click.echo(f"{name}: pid {cpid} {'running' if process_alive(cpid) else 'exited'}")
    if not ready:
        click.echo(f"readyz: {detail}")
        sys.exit(1)


if __name__ == "__main__":
    command(prog_name="cdriver sim cluster")
