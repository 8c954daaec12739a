"""`cdriver controller`: the cluster-level ComputeDomain controller (run as a Deployment).

Every option has an environment twin; upstream's flag and variable names are kept where they
exist (``--namespace``/NAMESPACE, ``--image-name``/IMAGE_NAME, ``--http-endpoint``, the
``--leader-election-*`` group, ``--imex-mode``/IMEX_MODE, ...).
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import TYPE_CHECKING, Any

import click

from cdriver.api import constants
from cdriver.api.imex_mode import ENV_IMEX_ISOLATION, ENV_IMEX_MODE
from cdriver.durations import parse_duration
from cdriver.errors import CdriverError
from cdriver.imex.config import DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
from cdriver.roles.controller.settings import (
    DEFAULT_DAEMON_METRICS_PORT,
    DEFAULT_DAEMON_PRIORITY_CLASS,
    DEFAULT_KUBE_API_BURST,
    DEFAULT_KUBE_API_QPS,
    DEFAULT_LEASE_NAME,
)
from cdriver.roles.startup import (
    check_http_endpoint,
    install_signal_handlers,
    kube_api_options,
    rate_limiter,
    resolve_imex,
    root_options,
)
from cdriver.roles.startup_log import log_startup_configuration

if TYPE_CHECKING:
    from cdriver.roles.controller.main import Runner
    from cdriver.roles.controller.metrics import HttpServer

log = logging.getLogger(__name__)


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG",
              help="Kubeconfig file (default: the pod's service account).")
@kube_api_options(DEFAULT_KUBE_API_QPS, DEFAULT_KUBE_API_BURST)
@click.option("--namespace", default=constants.DEFAULT_DRIVER_NAMESPACE, envvar=constants.ENV_NAMESPACE,
              show_default=True, show_envvar=True,
              help="Driver namespace: daemon DaemonSets, daemon claim templates and cliques.")
@click.option("--pod-name", default="", envvar=constants.ENV_POD_NAME, show_envvar=True,
              help="This pod's name (leader-election identity; default: the host name).")
@click.option("--daemon-image", "--image-name", "daemon_image", default=None,
              envvar=["DAEMON_IMAGE", "IMAGE_NAME"], show_envvar=True,
              help="Image of the IMEX daemon pods (normally the controller's own image).")
@click.option("--daemon-image-pull-secrets", "--cd-daemon-image-pull-secret-names",
              "pull_secrets", default="", envvar="CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
              show_envvar=True, help="Comma-separated image pull Secret names for daemon pods.")
@click.option("--log-verbosity-cd-daemon", "daemon_verbosity", type=int, default=None,
              envvar="LOG_VERBOSITY_CD_DAEMON", show_envvar=True,
              help="Log verbosity of daemon pods (default: this process's).")
@click.option("--max-nodes-per-imex-domain", type=int,
              default=DEFAULT_MAX_NODES_PER_IMEX_DOMAIN, envvar=constants.ENV_MAX_NODES,
              show_default=True, show_envvar=True, help="Largest clique a daemon supports.")
@click.option("--daemon-priority-class", default=DEFAULT_DAEMON_PRIORITY_CLASS,
              envvar="DAEMON_PRIORITY_CLASS_NAME", show_default=True, show_envvar=True,
              help="PriorityClass of daemon pods, so they schedule ahead of the workloads "
                   "they serve ('' for none).")
@click.option("--daemon-cpu", default="", envvar="DAEMON_CPU", show_envvar=True,
              help="CPU request and limit of the daemon container; unset: none, as upstream "
                   "(set both this and --daemon-memory for Guaranteed QoS).")
@click.option("--daemon-memory", default="", envvar="DAEMON_MEMORY", show_envvar=True,
              help="Memory request and limit of the daemon container; unset: none, as upstream. "
                   "A real nvidia-imex plus the daemon need more than 128Mi; size it from "
                   "kubectl top on a running domain.")
@click.option("--daemon-metrics-port", type=int, default=DEFAULT_DAEMON_METRICS_PORT, envvar="DAEMON_METRICS_PORT",
              show_default=True, show_envvar=True,
              help="Port of the daemon pods' metrics endpoint (container port 'metrics', with prometheus.io "
                   "scrape annotations); 0: no endpoint.")
@click.option("--imex-mode", default="driverManaged", envvar=ENV_IMEX_MODE, show_default=True,
              show_envvar=True, help="driverManaged (daemons per domain) or hostManaged "
                                     "(host nvidia-imex service; needs gate "
                                     "HostManagedIMEXDaemon).")
@click.option("--imex-isolation", default="domain", envvar=ENV_IMEX_ISOLATION,
              show_default=True, show_envvar=True,
              help="IMEX isolation: domain (channel is reserved).")
@click.option("--http-endpoint", default="", envvar="HTTP_ENDPOINT", show_envvar=True,
              help="HOST:PORT or :PORT for /metrics and /healthz (empty: no HTTP server).")
@click.option("--metrics-path", default="/metrics", envvar="METRICS_PATH", show_default=True,
              show_envvar=True, help="Path of the Prometheus metrics (empty: none).")
@click.option("--workers", type=click.IntRange(1, 64), default=4, envvar="CONTROLLER_WORKERS",
              show_default=True, show_envvar=True, help="Parallel reconciles.")
@click.option("--cleanup-interval", default="10m", envvar="CLEANUP_INTERVAL",
              show_default=True, show_envvar=True,
              help="Period of the sweep for leftovers of deleted domains.")
@click.option("--leader-election-enabled/--no-leader-election-enabled", default=False,
              envvar="LEADER_ELECTION_ENABLED", show_envvar=True,
              help="Run only while holding a Lease (for several replicas).")
@click.option("--leader-election-lease-lock-namespace", "lease_namespace", default="",
              envvar="LEADER_ELECTION_LEASE_LOCK_NAMESPACE", show_envvar=True,
              help="Namespace of the Lease (default: --namespace).")
@click.option("--leader-election-lease-lock-name", "lease_name", default=DEFAULT_LEASE_NAME,
              envvar="LEADER_ELECTION_LEASE_LOCK_NAME", show_default=True, show_envvar=True)
@click.option("--leader-election-lease-duration", "lease_duration", default="15s",
              envvar="LEADER_ELECTION_LEASE_DURATION", show_default=True, show_envvar=True)
@click.option("--leader-election-renew-deadline", "renew_deadline", default="10s",
              envvar="LEADER_ELECTION_RENEW_DEADLINE", show_default=True, show_envvar=True)
@click.option("--leader-election-retry-period", "retry_period", default="2s",
              envvar="LEADER_ELECTION_RETRY_PERIOD", show_default=True, show_envvar=True)
@click.pass_context
def command(ctx: click.Context, **opts: Any) -> None:
    """Reconcile ComputeDomains: finalizer, claim templates, daemon DaemonSet, status, cleanup."""
    try:
        runner, http = _build(opts, root_options(ctx))
    except CdriverError as exc:
        _fail(str(exc))
        return
    install_signal_handlers(lambda _signum: runner.finish(0))
    if http is not None:
        http.start()
        log.info("serving /healthz and %s on port %d", opts["metrics_path"] or "(no metrics)",
                 http.port)
    runner.start()
    code = None
    while code is None:  # wake up regularly so signals are handled promptly
        code = runner.wait(0.5)
    if http is not None:
        http.stop()
    sys.exit(code)


def _build(opts: dict, root: dict) -> tuple[Runner, HttpServer | None]:
    from cdriver import featuregates
    from cdriver.kube.raw import RawClient
    from cdriver.roles.controller.main import ControllerConfig, LeaderConfig, Runner
    from cdriver.roles.controller.metrics import ControllerMetrics, HttpServer
    from cdriver.roles.controller.settings import DEFAULT_DAEMON_IMAGE, ControllerSettings, split_names

    imex = resolve_imex(opts["imex_mode"], opts["imex_isolation"], root.get("feature_gates", ""))
    verbosity = opts["daemon_verbosity"]
    settings = ControllerSettings(
        namespace=opts["namespace"],
        daemon_image=opts["daemon_image"] if opts["daemon_image"] is not None
        else DEFAULT_DAEMON_IMAGE,
        image_pull_secrets=split_names(opts["pull_secrets"]),
        daemon_log_verbosity=int(root.get("verbosity", 0) if verbosity is None else verbosity),
        max_nodes_per_imex_domain=opts["max_nodes_per_imex_domain"],
        feature_gates_env=imex.gates.to_env(),
        cliques_enabled=imex.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES),
        host_managed=imex.host_managed,
        daemon_priority_class=opts["daemon_priority_class"],
        daemon_cpu=opts["daemon_cpu"],
        daemon_metrics_port=opts["daemon_metrics_port"],
        daemon_memory=opts["daemon_memory"],
    )
    problems = settings.problems()
    if problems:
        raise CdriverError("invalid controller settings: " + "; ".join(problems))
    config = ControllerConfig(
        settings=settings, workers=opts["workers"],
        cleanup_interval_seconds=parse_duration(opts["cleanup_interval"], "--cleanup-interval"))
    leader = None
    if opts["leader_election_enabled"]:
        leader = LeaderConfig(
            namespace=opts["lease_namespace"] or settings.namespace, name=opts["lease_name"],
            lease_seconds=parse_duration(opts["lease_duration"],
                                         "--leader-election-lease-duration"),
            renew_seconds=parse_duration(opts["renew_deadline"],
                                         "--leader-election-renew-deadline"),
            retry_seconds=parse_duration(opts["retry_period"], "--leader-election-retry-period"))
        if not leader.renew_seconds < leader.lease_seconds:
            raise CdriverError("--leader-election-renew-deadline must be shorter than "
                               "--leader-election-lease-duration")
    check_http_endpoint(opts["http_endpoint"])
    limiter = rate_limiter(opts["kube_api_qps"], opts["kube_api_burst"])
    # Settings are valid: now load the (slow to import) Kubernetes client.
    from cdriver.kube.client import load_api_client

    metrics = ControllerMetrics()
    raw = RawClient(load_api_client(opts["kubeconfig"]), rate_limiter=limiter, metrics=metrics.api_client)
    identity = opts["pod_name"] or socket.gethostname()
    runner = Runner(raw, config, identity, leader, metrics)
    http = None
    if opts["http_endpoint"]:
        try:
            http = HttpServer(opts["http_endpoint"], metrics, opts["metrics_path"],
                              runner.healthy)
        except OSError as exc:
            raise CdriverError(f"cannot serve on --http-endpoint {opts['http_endpoint']!r} ({exc}); "
                               "choose a free port") from None
    log_startup_configuration("controller", opts, imex.gates, root)
    return runner, http
