"""`cdriver sim imex daemon|ctl`: the IMEX stand-ins from the command line.

Arguments pass through untouched so that the stand-ins parse flags the way the real tools
are called (`-c <cfg>`, `-q`, `--u=<socket>`, `-N -j`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

import click

_PASSTHROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _passthrough(name: str, target: str, help_text: str) -> click.Command:
    @click.command(name, context_settings=_PASSTHROUGH, add_help_option=False, help=help_text)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def run(ctx: click.Context, args: tuple[str, ...]) -> None:
        import importlib

        entry: Callable[[list[str]], int] = importlib.import_module(target).main
        ctx.exit(entry(list(args)))

    return run


_DAEMON_HELP = "nvidia-imex stand-in (NO GPU mode): nvidia-imex -c <config>. Try --help."
_CTL_HELP = "nvidia-imex-ctl stand-in: -q | -N [-j] with -c <config>, -u <socket> or -i <ip> <port>."

@click.group("imex")
def command() -> None:
    """IMEX stand-ins (nvidia-imex, nvidia-imex-ctl) for simulated nodes."""


command.add_command(_passthrough("daemon", "cdriver.sim.imex.daemon", _DAEMON_HELP))
command.add_command(_passthrough("ctl", "cdriver.sim.imex.ctl", _CTL_HELP))
