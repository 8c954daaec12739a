"""`cdriver imex-daemon [run|check]`: the container command and the probe of a daemon pod.

Identity options come from the environment as the DaemonSet and CDI set it (CLIQUE_ID,
COMPUTE_DOMAIN_*, NODE_NAME, POD_*, MAX_NODES_PER_IMEX_DOMAIN); flags override. `run` is the
default subcommand. `check` stays light: it imports neither the Kubernetes client nor jinja2.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from cdriver.api import constants
from cdriver.errors import CdriverError
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.imex.config import IMEX_CTL_BINARY, IMEX_DAEMON_BINARY, IMEXD_DIR
from cdriver.imex.hosts import HOSTS_FILE
from cdriver.roles.startup import kube_api_options, root_options
from cdriver.roles.startup_log import log_startup_configuration

from .inputs import (
    DEFAULT_HTTP_ENDPOINT,
    DEFAULT_INDEX_WAIT,
    DEFAULT_KUBE_API_BURST,
    DEFAULT_KUBE_API_QPS,
    DEFAULT_METRICS_PATH,
    RawInputs,
)

ENV_IMEXD_DIR = "IMEXD_DIR"
ENV_IMEX_HOSTS_FILE = "IMEX_HOSTS_FILE"
IMEX_CHECK_NOOP_MESSAGE = "check succeeded (noop, clique ID is empty)"
#: Pause between two questions of `check --wait`.
CHECK_RETRY_SECONDS = 0.25


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


@click.group(invoke_without_command=True)
@click.option("--cliqueid", "clique_id", default="", envvar=constants.ENV_CLIQUE_ID, show_envvar=True,
              help="NVLink clique ID <clusterUUID>.<cliqueId> (injected by CDI; empty on non-fabric nodes).")
@click.option("--compute-domain-uuid", "cd_uid", default="", envvar=constants.ENV_CD_UUID, show_envvar=True,
              help="ComputeDomain UID (injected by CDI).")
@click.option("--compute-domain-name", "cd_name", default="", envvar=constants.ENV_CD_NAME, show_envvar=True,
              help="ComputeDomain name (injected by CDI).")
@click.option("--compute-domain-namespace", "cd_namespace", default="default", envvar=constants.ENV_CD_NAMESPACE,
              show_envvar=True, help="ComputeDomain namespace (injected by CDI).")
@click.option("--node-name", default="", envvar=constants.ENV_NODE_NAME, show_envvar=True,
              help="This node's name (downward API spec.nodeName).")
@click.option("--pod-ip", default="", envvar=constants.ENV_POD_IP, show_envvar=True,
              help="This pod's IP (downward API status.podIP): IMEX command bind IP and advertised IP.")
@click.option("--pod-name", default="", envvar=constants.ENV_POD_NAME, show_envvar=True,
              help="This pod's name (downward API metadata.name).")
@click.option("--pod-namespace", default="", envvar=constants.ENV_POD_NAMESPACE, show_envvar=True,
              help="This pod's namespace, the driver namespace (downward API metadata.namespace).")
@click.option("--pod-uid", default="", envvar=constants.ENV_POD_UID, show_envvar=True,
              help="This pod's UID (downward API metadata.uid), for the clique's owner reference.")
@click.option("--max-nodes-per-imex-domain", "max_nodes", default="", envvar=constants.ENV_MAX_NODES, show_envvar=True,
              help="Maximum members of one clique: bounds indices and the DNS-name peer list.")
@click.option("--imexd-dir", default=IMEXD_DIR, envvar=ENV_IMEXD_DIR, show_envvar=True, show_default=True,
              help="Directory mounted by CDI with the config template; imexd.cfg and nodes.cfg go here.")
@click.option("--hosts-file", default=HOSTS_FILE, envvar=ENV_IMEX_HOSTS_FILE, show_envvar=True,
              show_default=True, help="Hosts file that maps peer DNS names to IPs (DNS-name mode).")
@click.option("--imex-binary", default=IMEX_DAEMON_BINARY, show_default=True,
              help="nvidia-imex executable (looked up on PATH).")
@click.option("--imex-ctl-binary", "ctl_binary", default=IMEX_CTL_BINARY, show_default=True,
              help="nvidia-imex-ctl executable (looked up on PATH).")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG",
              help="Kubeconfig file (default: the pod's service account).")
@kube_api_options(DEFAULT_KUBE_API_QPS, DEFAULT_KUBE_API_BURST)
@click.pass_context
def command(ctx: click.Context, **options: Any) -> None:
    """Per-ComputeDomain IMEX daemon: join the clique, run nvidia-imex, report readiness."""
    gates = root_options(ctx).get("feature_gates") or os.environ.get(ENV_FEATURE_GATES, "")
    ctx.obj = RawInputs(feature_gates=gates, **options)
    if ctx.invoked_subcommand is None:
        ctx.invoke(run_command)


@command.command("run")
@click.option("--max-restart-backoff", type=float, default=30.0, show_default=True,
              help="Upper bound in seconds of the delay before restarting a crashed nvidia-imex.")
@click.option("--recheck-interval", type=float, default=5.0, show_default=True,
              help="Seconds between checks whether a blocked IMEX port became free.")
@click.option("--stop-grace", type=float, default=10.0, show_default=True,
              help="Seconds nvidia-imex gets to exit after SIGTERM before SIGKILL.")
@click.option("--index-wait", type=float, default=DEFAULT_INDEX_WAIT, show_default=True,
              help="Seconds a new clique entry waits for the controller to assign its index before the daemon "
                   "takes the lowest free one itself (0: always itself, by optimistic writes of the whole list).")
@click.option("--http-endpoint", default=DEFAULT_HTTP_ENDPOINT, envvar="HTTP_ENDPOINT", show_default=True,
              show_envvar=True, help="HOST:PORT or :PORT to serve metrics and the pod's probes on (/startupz, "
                   "/readyz, /livez: what `check` decides, without a process per probe; empty: off).")
@click.option("--metrics-path", default=DEFAULT_METRICS_PATH, envvar="METRICS_PATH", show_default=True,
              show_envvar=True, help="Metrics HTTP path.")
@click.pass_obj
def run_command(raw: RawInputs, max_restart_backoff: float = 30.0, recheck_interval: float = 5.0,
                stop_grace: float = 10.0, http_endpoint: str = DEFAULT_HTTP_ENDPOINT,
                metrics_path: str = DEFAULT_METRICS_PATH, index_wait: float = DEFAULT_INDEX_WAIT) -> None:
    """Run the daemon until SIGTERM (the default subcommand)."""
    from dataclasses import asdict, replace

    from .inputs import parse_settings

    try:
        given = replace(raw, max_backoff=max_restart_backoff, recheck_seconds=recheck_interval, stop_grace=stop_grace,
                        http_endpoint=http_endpoint, metrics_path=metrics_path, index_wait=index_wait)
        settings = parse_settings(given)
        log_startup_configuration("imex-daemon", asdict(given), settings.gates,
                                  root_options(click.get_current_context()))
        from .main import run

        code = run(settings)
    except CdriverError as exc:
        _fail(str(exc))
    except Exception as exc:  # never a traceback on the terminal; the details go to the debug log
        logging.getLogger(__name__).debug("unexpected failure", exc_info=True)
        _fail(f"unexpected failure ({type(exc).__name__}: {exc}); run with -v 4 for details")
    sys.exit(code)


#: How long the probe command waits for nvidia-imex-ctl: just below the daemon pods' probe
#: timeoutSeconds (10), so a slow but correct answer on a busy node still counts.
CHECK_TIMEOUT = 9.0


@command.command("check")
@click.option("--timeout", type=float, default=CHECK_TIMEOUT, show_default=True,
              help="Seconds to wait for nvidia-imex-ctl (keep it below the probe's timeoutSeconds).")
@click.option("--wait", type=float, default=0.0, show_default=True,
              help="Seconds to keep asking until nvidia-imex answers READY (a startup probe that passes "
                   "on its first run instead of recording failures while the daemon starts).")
@click.pass_obj
def check_command(raw: RawInputs, timeout: float, wait: float) -> None:
    """Probe: succeed only if the local nvidia-imex answers exactly READY.

    The DaemonSet uses it only for daemons without an HTTP endpoint; with one, the running
    daemon answers the same question at /readyz (`health`)."""
    import time

    from cdriver.imex import ctl

    from . import failures
    from .inputs import parse_check_settings
    from .readiness import probe_passed

    settings = parse_check_settings(raw, timeout)
    if not settings.clique_id:
        click.echo(IMEX_CHECK_NOOP_MESSAGE)
        return
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        state = failures.read_state(settings.paths.state)
        if state is not None:
            _fail(f"IMEX daemon check failed: {state.get('message') or state['phase']}")
        remaining = deadline - time.monotonic()
        result = ctl.probe_ready(settings.ctl_binary, config_path=str(settings.paths.config),
                                 timeout=timeout if remaining <= 0 else max(0.5, min(timeout, remaining)))
        if probe_passed(result.returncode, result.output):
            return
        if time.monotonic() + CHECK_RETRY_SECONDS >= deadline:
            break
        time.sleep(CHECK_RETRY_SECONDS)
    output = result.output.strip() or "<no output>"
    if result.returncode != 0:
        _fail(f"IMEX daemon check failed: error running {IMEX_CTL_BINARY} (exit {result.returncode}): {output}")
    _fail(f"IMEX daemon not ready: {result.output!r}")
