"""`cdriver sim check-fabric|nvidia-smi|driver-root|topology`: the simulated GPU hardware.

`sim/cli.py` mounts these commands at the top of `cdriver sim`, so their names stay short.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NoReturn

import click

from cdriver.api import constants
from cdriver.errors import CdriverError
from cdriver.nvml.discover import IMEX_CHANNEL_COUNT
from cdriver.sim.gpu.topology import ENV_SIM_TOPOLOGY


def _fail(exc: CdriverError) -> NoReturn:
    click.echo(f"error: {exc}", err=True)
    sys.exit(1)


_driver_root_option = click.option(
    "--driver-root", type=click.Path(file_okay=False, path_type=Path), default=None, envvar=constants.ENV_DRIVER_ROOT,
    help="Load libnvidia-ml.so.1 from this driver root (env NVIDIA_DRIVER_ROOT); default: the system loader.")


@click.command("check-fabric")
@_driver_root_option
def check_fabric_cmd(driver_root: Path | None) -> None:
    """Print each GPU's clusterUuid, cliqueId and fabric state (exit 0 ok, 2 no fabric, 1 error)."""
    from cdriver.sim.gpu.check_fabric import run_check_fabric

    sys.exit(run_check_fabric(sys.stdout, sys.stderr, driver_root))


@click.command("nvidia-smi", hidden=True, context_settings={"ignore_unknown_options": True})
@_driver_root_option
@click.option("-L", "--list-gpus", is_flag=True, help="List GPUs (the default).")
@click.option("--version", "show_version", is_flag=True, help="Print the NVML and driver versions.")
@click.argument("rest", nargs=-1, type=click.UNPROCESSED)
def nvidia_smi_cmd(driver_root: Path | None, list_gpus: bool, show_version: bool, rest: tuple[str, ...]) -> None:
    """Minimal nvidia-smi for simulated nodes: lists GPUs, or prints versions."""
    from cdriver.sim.gpu.check_fabric import run_list_gpus, run_version

    if rest:
        click.echo(f"nvidia-smi (simulated): unsupported arguments {' '.join(rest)}; only -L and --version "
                   "are available", err=True)
        sys.exit(2)
    if show_version:
        sys.exit(run_version(sys.stdout, sys.stderr, driver_root))
    sys.exit(run_list_gpus(sys.stdout, sys.stderr, driver_root))


@click.command("driver-root")
@click.option("--root", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to lay the driver root out in (created if missing).")
@click.option("--node", "node_name", required=True, envvar=constants.ENV_NODE_NAME,
              help="Node name whose identity to use (env NODE_NAME).")
@click.option("--topology", type=click.Path(dir_okay=False, path_type=Path), envvar=ENV_SIM_TOPOLOGY,
              default=None, help="Topology document (env CDRIVER_SIM_TOPOLOGY); default: the demo topology.")
@click.option("--profile", default=None,
              help="GPU profile (gb200, gb300) [default: the topology domain's, else gb200].")
@click.option("--fabric-state", default="completed", show_default=True,
              type=click.Choice(["completed", "in_progress", "not_started", "not_supported"]),
              help="Fabric registration state every GPU reports.")
@click.option("--fabric-health", default="healthy", show_default=True,
              type=click.Choice(["healthy", "degraded_bandwidth", "route_unhealthy", "no_partition"]),
              help="Fabric health condition every GPU reports.")
@click.option("--gpus", "gpu_count", type=int, default=None,
              help="Number of GPUs [default: the topology domain's gpusPerNode, else the profile's].")
@click.option("--channels", "channel_count", type=int, default=IMEX_CHANNEL_COUNT, show_default=True,
              help="IMEX channel device nodes to create.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def driver_root_cmd(root: Path, node_name: str, topology: Path | None, profile: str | None, fabric_state: str,
                    fabric_health: str, gpu_count: int | None, channel_count: int, as_json: bool) -> None:
    """Lay out (or refresh) a simulated node's NVIDIA driver root."""
    from cdriver.sim.gpu.driver_root import create_driver_root
    from cdriver.sim.gpu.topology import clique_label, demo_topology_path

    try:
        dr = create_driver_root(root, node_name, topology or demo_topology_path(), profile,
                                fabric_state=fabric_state, fabric_health=fabric_health, gpu_count=gpu_count,
                                channel_count=channel_count)
    except CdriverError as exc:
        _fail(exc)
    label = clique_label(dr.identity) if dr.identity is not None else ""
    info = {"root": str(dr.root), "node": dr.node_name, "profile": dr.profile, "clique": label,
            "library": str(dr.nvml_library), "nvmlConfig": str(dr.nvml_config),
            "channelMajor": dr.channel_major, "capsMajor": dr.caps_major, "channels": dr.channel_count}
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"driver root for {dr.node_name} at {dr.root}: clique {label or '(none)'}, "
                   f"channels major {dr.channel_major} x{dr.channel_count}, caps major {dr.caps_major}")


@click.group("topology")
def topology_group() -> None:
    """Inspect topology documents."""


@topology_group.command("validate")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def topology_validate(path: Path) -> None:
    """Check a topology document; prints a summary or the first problem (exit 1)."""
    from cdriver.sim.gpu.topology import load_topology

    try:
        topo = load_topology(path)
    except CdriverError as exc:
        _fail(exc)
    cliques = sum(len(d.cliques) for d in topo.domains)
    click.echo(f"{path}: valid: {len(topo.domains)} domain(s), {cliques} clique(s), {len(topo.nodes())} node(s)")
    for domain in topo.domains:
        for clique in domain.cliques:
            click.echo(f"  {domain.uuid}.{clique.id}: {', '.join(clique.nodes)}")


@topology_group.command("identity")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--node", "node_name", required=True, envvar=constants.ENV_NODE_NAME, help="Node name (env NODE_NAME).")
def topology_identity(path: Path, node_name: str) -> None:
    """Print a node's clique label `<clusterUUID>.<cliqueId>`."""
    from cdriver.sim.gpu.topology import clique_label, load_topology

    try:
        click.echo(clique_label(load_topology(path).identity(node_name)))
    except CdriverError as exc:
        _fail(exc)


@topology_group.command("demo")
def topology_demo() -> None:
    """Print the packaged demo topology (4 nodes, two cliques)."""
    from cdriver.sim.gpu.topology import demo_topology_path

    click.echo(demo_topology_path().read_text(), nl=False)
