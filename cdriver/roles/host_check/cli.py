"""The `cdriver host-check` command: report table or JSON, exit 0 pass / 1 fail / 2 could not run."""

from __future__ import annotations

import json
import logging
import sys

import click

from cdriver.api.imex_mode import IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.roles.startup import root_options
from cdriver.roles.startup_log import log_startup_configuration

log = logging.getLogger(__name__)

EXIT_COULD_NOT_RUN = 2


def render_table(results: list, mode: str, driver_root: str) -> str:
    """Human report: one row per check, then the fix lines of failed checks."""
    lines = [f"host-check: mode={mode} driver-root={driver_root}", ""]
    width = max(len(r.name) for r in results)
    for r in results:
        lines.append(f"{r.status:<5} {r.name:<{width}}  {r.evidence}")
    fixes = [r for r in results if r.status == "FAIL"]
    if fixes:
        lines.append("")
        lines.append("To fix:")
        lines += [f"  {r.name}: {r.fix}" for r in fixes]
    return "\n".join(lines)


def error_document(message: str) -> str:
    """The --json output when the checks could not run."""
    return json.dumps({"error": message, "checks": []})


class HostCheckCommand(click.Command):
    """With --json, a usage error is reported as JSON too (still exit 2)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        as_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            if not as_json:
                raise
            click.echo(error_document(f"host-check could not run: {e.format_message()}"))
            ctx.exit(EXIT_COULD_NOT_RUN)


def _absolute_socket(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not value.startswith("/"):
        raise click.BadParameter(f"{value!r} must be an absolute path as seen on the host (below the driver "
                                 f"root), e.g. {DEFAULT_HOST_IMEX_SOCKET}", ctx, param)
    return value


@click.command("host-check", cls=HostCheckCommand)
@click.option("--driver-root", default="/", show_default=True, envvar=["NVIDIA_DRIVER_ROOT"],
              help="Root of the NVIDIA driver install (env NVIDIA_DRIVER_ROOT).")
@click.option("--socket", "socket_path", default=DEFAULT_HOST_IMEX_SOCKET, show_default=True,
              envvar="IMEX_HOST_SOCKET_PATH", callback=_absolute_socket,
              help="IMEX command socket the driver uses, inside the driver root (env IMEX_HOST_SOCKET_PATH).")
@click.option("--mode", type=click.Choice([IMEX_MODE_HOST_MANAGED, IMEX_MODE_DRIVER_MANAGED]),
              default=IMEX_MODE_HOST_MANAGED, show_default=True, envvar="IMEX_MODE",
              help="IMEX lifecycle mode of this node (env IMEX_MODE).")
@click.option("--only-config-under-driver-root", "only_under_root", is_flag=True,
              envvar="HOST_CHECK_ONLY_CONFIG_UNDER_DRIVER_ROOT",
              help="Count only nvidia-imex daemons whose config file lies below the driver root. For "
                   "several simulated nodes sharing one machine; on a real node every nvidia-imex outside "
                   "Kubernetes pods is the host service (env HOST_CHECK_ONLY_CONFIG_UNDER_DRIVER_ROOT).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document instead of the table.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=5.0, show_default=True,
              help="Seconds to wait for nvidia-imex-ctl.")
def command(driver_root: str, socket_path: str, mode: str, only_under_root: bool, as_json: bool,
            timeout: float) -> None:
    """Check this node's IMEX prerequisites: driver, channel devices, fabric, host IMEX service.

    Each check prints PASS, FAIL or SKIP with its evidence and, on failure, a one-line fix.
    Exit code: 0 all passed, 1 a check failed, 2 the checks could not run (bad options
    included).

    \b
    --json prints one object:
      {"mode", "driverRoot", "socket", "passed": bool,
       "checks": [{"name", "status": "PASS"|"FAIL"|"SKIP", "evidence", "fix"}]}
    or, when the checks could not run, {"error": "...", "checks": []}.
    Check names: driver-root, channel-major, channel-device, nvlink-fabric,
    imex-service, imex-config, imex-socket.
    """
    from cdriver.roles.host_check import checks, facts

    log_startup_configuration(
        "host-check", {"driver_root": driver_root, "socket": socket_path, "mode": mode,
                       "only_config_under_driver_root": only_under_root, "json": as_json, "timeout": timeout},
        None, root_options(click.get_current_context()))
    try:
        node = facts.gather(mode, driver_root, socket_path, probe_timeout=timeout,
                            only_config_under_driver_root=only_under_root)
        results = checks.run_checks(node)
    except Exception as e:  # the report is the product; a crash here is "could not run"
        msg = f"host-check could not run: {type(e).__name__}: {e}"
        if as_json:
            click.echo(error_document(msg))
        else:
            click.echo(msg, err=True)
        sys.exit(EXIT_COULD_NOT_RUN)
    code = checks.exit_code(results)
    if as_json:
        doc = {"mode": mode, "driverRoot": node.driver_root, "socket": node.expected_socket,
               "passed": code == 0, "checks": [r.to_dict() for r in results]}
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(render_table(results, mode, node.driver_root))
    sys.exit(code)
