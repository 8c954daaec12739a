"""`cdriver sim ...`: mounts the command lines of the simulation kit's parts.

Each part owns its `cli.py`; this group only names them and loads each on first use, like
the top-level CLI (a subcommand appears when its module is part of the package).
"""

from __future__ import annotations

import click

from cdriver.lazy_group import LazyGroup

#: subcommand name -> "module:attribute" of its click command.
LAZY_COMMANDS: dict[str, str] = {
    # simulated GPU hardware
    "check-fabric": "cdriver.sim.gpu.cli:check_fabric_cmd",
    "nvidia-smi": "cdriver.sim.gpu.cli:nvidia_smi_cmd",
    "driver-root": "cdriver.sim.gpu.cli:driver_root_cmd",
    "topology": "cdriver.sim.gpu.cli:topology_group",
    # local control plane
    "cluster": "cdriver.sim.controlplane.cli:command",
    # nodes
    "node": "cdriver.sim.node.cli:command",
    # IMEX stand-ins and the host-managed IMEX service
    "imex": "cdriver.sim.imex.cli:command",
    "host-imex": "cdriver.sim.imex.cli:host_command",
    # images for real nodes
    "images": "cdriver.sim.images.cli:command",
    # the whole simulated cluster
    "up": "cdriver.sim.world.cli:up",
    "down": "cdriver.sim.world.cli:down",
    "demo": "cdriver.sim.world.cli:demo",
}


class SimGroup(LazyGroup):
    """Imports subcommands on first use."""

    lazy_commands = LAZY_COMMANDS


@click.group(cls=SimGroup, context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Simulation kit: simulated GB200 nodes (NVML, IMEX, channel devices) and a local cluster."""
