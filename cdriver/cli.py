"""The `cdriver` command: one click group, one subcommand per role.

Subcommands are imported lazily so `cdriver version` starts fast and a role's
dependencies (grpc, kubernetes) load only when that role runs.
"""

from __future__ import annotations

import platform
import sys

import click

from cdriver import KUBERNETES_VERSION, __version__
from cdriver.lazy_group import LazyGroup
from cdriver.logs import LOG_FORMATS, setup_logging

#: subcommand name -> "module:attribute" of its click command. A role appears in the CLI
#: when its module is part of the package.
LAZY_COMMANDS: dict[str, str] = {
    "controller": "cdriver.roles.controller.cli:command",
    "kubelet-plugin": "cdriver.roles.kubelet_plugin.cli:command",
    "imex-daemon": "cdriver.roles.imex_daemon.cli:command",
    "host-check": "cdriver.roles.host_check:command",
    "sim": "cdriver.sim.cli:command",
    "diagnose": "cdriver.diagnose.cli:command",
    "crds": "cdriver.roles.crd_apply:command",
}


class RoleGroup(LazyGroup):
    """The top-level group: one lazily imported subcommand per role."""

    lazy_commands = LAZY_COMMANDS


@click.group(cls=RoleGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
              envvar="LOG_FORMAT", help="Log line format (env LOG_FORMAT).")
@click.option("-v", "--verbosity", type=int, default=0, show_default=True, envvar=["V", "LOG_VERBOSITY"],
              help="Log verbosity; 4 or more enables debug logs (env V / LOG_VERBOSITY).")
@click.option("--feature-gates", default="", envvar="FEATURE_GATES",
              help="Comma-separated Name=bool pairs (env FEATURE_GATES).")
@click.pass_context
def cli(ctx: click.Context, log_format: str, verbosity: int, feature_gates: str) -> None:
    """cdriver: the ComputeDomain DRA driver for Kubernetes (IMEX channels on NVLink racks)."""
    setup_logging(log_format, verbosity)
    ctx.ensure_object(dict)
    ctx.obj["feature_gates"] = feature_gates
    ctx.obj["verbosity"] = verbosity
    ctx.obj["log_format"] = log_format


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def version(as_json: bool) -> None:
    """Print the cdriver version, Python version and targeted Kubernetes API version."""
    info = {
        "cdriver": __version__,
        "python": platform.python_version(),
        "kubernetes": KUBERNETES_VERSION,
        "frozen": bool(getattr(sys, "frozen", False)),
        # the architecture the process runs as (aarch64 on Grace nodes, and under emulation)
        "machine": platform.machine(),
    }
    if as_json:
        import json

        click.echo(json.dumps(info))
    else:
        click.echo(f"cdriver {info['cdriver']} (python {info['python']}, kubernetes {info['kubernetes']})")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="cdriver")


if __name__ == "__main__":
    main()
