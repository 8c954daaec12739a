"""`cdriver sim node ...`: simulated Kubernetes nodes from the command line.

``run`` starts one node (``--name``, ``--ip`` 127.0.1.N, ``--root``), ``up`` starts N nodes
``<prefix>-1..N`` at 127.X.Y.1..N (a block leased for them, see `cdriver.sim.node.addresses`)
below a base directory; both run until SIGINT/SIGTERM and
then stop their pods. ``launch`` is the in-namespace container launcher a node runs (hidden;
used by packaged builds that have no separate Python).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import click

from cdriver.errors import CdriverError


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: use KEY=VALUE, e.g. nvidia.com/gpu.present=true",
                                     param_hint="--label")
        out[key] = val
    return out


def _kubeconfig(value: str | None) -> str:
    if value:
        return value
    from cdriver.sim.controlplane.cli import default_base_dir

    local = default_base_dir() / "cluster" / "admin.kubeconfig"
    if local.is_file():
        return str(local)
    raise click.UsageError("no kubeconfig: pass --kubeconfig (or set KUBECONFIG), or start a local cluster "
                           "with `cdriver sim cluster up`")


def _pki_dir(value: Path | None) -> Path | None:
    """The cluster PKI for the kubelet API: the given dir, else the local cluster's if present."""
    if value is not None:
        if not (value / "ca.key").is_file():
            raise click.BadParameter(f"{value} holds no ca.key; pass the cluster's pki directory",
                                     param_hint="--pki-dir")
        return value
    from cdriver.sim.controlplane.cli import default_base_dir

    local = default_base_dir() / "cluster" / "pki"
    return local if (local / "ca.key").is_file() else None


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


def _options(fast: bool):
    from cdriver.sim.node.simulated.runtime import NodeOptions

    return NodeOptions.fast() if fast else NodeOptions()


kubeconfig_option = click.option("--kubeconfig", envvar="KUBECONFIG", default=None,
                                 help="Admin kubeconfig of the cluster [default: $KUBECONFIG, else the local "
                                      "cluster of `cdriver sim cluster up`].")
label_option = click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
                            help="Extra Node label (repeatable), e.g. nvidia.com/gpu.present=true.")
fast_option = click.option("--fast", is_flag=True, help="Short heartbeats, backoffs and retries (for tests).")
topology_option = click.option("--topology", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                               default=None, help="Topology file: also lay out a simulated driver root "
                                                  "(<root>/run/nvidia/driver) for the node.")
pki_option = click.option("--pki-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                          help="Cluster PKI directory (ca.crt, ca.key): serve the kubelet API for kubectl "
                               "logs/exec [default: the local cluster's, if present; else no kubelet API].")
delete_option = click.option("--delete-node/--keep-node", default=True, show_default=True,
                             help="Delete the Node object on exit.")


@click.group("node")
def command() -> None:
    """Simulated nodes: a kubelet and container-runtime stand-in running pods as processes."""


@command.command("run")
@click.option("--name", required=True, help="Node name.")
@click.option("--ip", required=True, help="The node's own loopback address, e.g. 127.0.1.1.")
@click.option("--root", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The node's root directory (kubelet, CDI, dev dirs, logs); keep it short.")
@kubeconfig_option
@label_option
@topology_option
@click.option("--profile", default="gb200", show_default=True, help="Driver-root hardware profile.")
@click.option("--fabric-state", default="completed", show_default=True, help="Driver-root fabric state.")
@fast_option
@pki_option
@delete_option
def run_cmd(name: str, ip: str, root: Path, kubeconfig: str | None, labels: tuple[str, ...],
            topology: Path | None, profile: str, fabric_state: str, fast: bool, pki_dir: Path | None,
            delete_node: bool) -> None:
    """Run one simulated node until interrupted."""
    from cdriver.sim.node.simulated.agent import NodeAgent

    try:
        agent = NodeAgent(_kubeconfig(kubeconfig), name, ip, root, labels=_labels(labels), options=_options(fast),
                          topology=topology, profile=profile, fabric_state=fabric_state,
                          pki_dir=_pki_dir(pki_dir))
        agent.start()
    except CdriverError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"node {name} ({ip}) is up; root {agent.layout.root}, log {agent.layout.node_log}", err=True)
    try:
        _wait_for_signal()
    finally:
        agent.stop(delete_node=delete_node)


@command.command("up")
@click.option("--count", type=click.IntRange(1, 254), default=2, show_default=True, help="Number of nodes.")
@click.option("--base-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Parent of the node roots (<base-dir>/<prefix>-<i>); keep it short.")
@click.option("--prefix", default="node", show_default=True, help="Node name prefix.")
@click.option("--first-index", type=click.IntRange(1, 254), default=1, show_default=True,
              help="Index of the first node (name suffix and last octet of its address 127.X.Y.N).")
@kubeconfig_option
@label_option
@fast_option
@pki_option
@delete_option
def up_cmd(count: int, base_dir: Path, prefix: str, first_index: int, kubeconfig: str | None,
           labels: tuple[str, ...], fast: bool, pki_dir: Path | None, delete_node: bool) -> None:
    """Run COUNT simulated nodes in this process until interrupted."""
    from cdriver.sim.node.simulated.agent import start_nodes

    if first_index + count - 1 > 254:
        raise click.BadParameter(f"nodes {first_index}..{first_index + count - 1} exceed the last address 127.X.Y.254",
                                 param_hint="--count")
    try:
        agents = start_nodes(_kubeconfig(kubeconfig), count, base_dir, prefix=prefix, first_index=first_index,
                             labels=_labels(labels), options=_options(fast), pki_dir=_pki_dir(pki_dir))
    except CdriverError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for agent in agents:
        click.echo(f"{agent.name}\t{agent.ip}\t{agent.layout.root}")
    sys.stdout.flush()
    try:
        _wait_for_signal()
    finally:
        for agent in agents:
            agent.stop(delete_node=delete_node)


@command.command("launch", hidden=True)
@click.argument("spec")
@click.argument("status_fd")
def launch_cmd(spec: str, status_fd: str) -> None:
    """Start a container from SPEC (used by the node itself)."""
    from cdriver.sim.node.simulated.launcher import main

    sys.exit(main([spec, status_fd]))
