"""`cdriver kubelet-plugin`: the DRA node plugin (run as a DaemonSet on every GPU node).

Every option has an environment twin; upstream's flag and variable names are kept. Paths
(kubelet dirs, CDI root, driver root) are options so a simulated node can point them at its
own root directory.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cdriver.api import constants
from cdriver.api.imex_mode import ENV_IMEX_ISOLATION, ENV_IMEX_MODE, IMEX_ISOLATION_DOMAIN, IMEX_MODE_DRIVER_MANAGED
from cdriver.cdi.model import CDI_STATIC_DIR
from cdriver.dra.registration import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR
from cdriver.durations import parse_duration
from cdriver.errors import CdriverError
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.imex.settings import TUNABLES, ImexSettings
from cdriver.kube.ratelimit import limiter_for
from cdriver.roles.kubelet_plugin.config import DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS
from cdriver.roles.kubelet_plugin.instances import check_pod_uid
from cdriver.roles.startup import check_http_endpoint, kube_api_options, resolve_imex, root_options
from cdriver.roles.startup_log import log_startup_configuration

ENV_CDI_ROOT = "CDI_ROOT"
ENV_KUBELET_REGISTRAR_DIR = "KUBELET_REGISTRAR_DIRECTORY_PATH"
ENV_KUBELET_PLUGINS_DIR = "KUBELET_PLUGINS_DIRECTORY_PATH"
ENV_DRIVER_ROOT_CTR_PATH = "DRIVER_ROOT_CTR_PATH"
ENV_HEALTHCHECK_PORT = "HEALTHCHECK_PORT"
ENV_HEALTHCHECK_ADDRESS = "HEALTHCHECK_ADDRESS"
ENV_IMEX_HOST_SOCKET_PATH = "IMEX_HOST_SOCKET_PATH"
ENV_GPU_CLIQUE_LABEL_ENABLED = ("GPU_CLIQUE_LABEL_ENABLED", "OWN_CLIQUE_LABEL")
ENV_PREPARE_TIMEOUT = "PREPARE_TIMEOUT"

if TYPE_CHECKING:
    from cdriver.roles.kubelet_plugin.config import PluginConfig

log = logging.getLogger(__name__)


def _opt(*names: str, **kw: Any) -> Callable[[Any], Any]:
    kw.setdefault("show_envvar", True)
    return click.option(*names, **kw)


def _imex_setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per tunable nvidia-imex setting (chart `imex.daemonConfig.*`)."""
    for tunable in reversed(TUNABLES):
        command = _opt(
            tunable.flag, f"imex_{tunable.variable}", default=None, envvar=tunable.env,
            help=f"{tunable.key} of every IMEX daemon's config: {tunable.allowed} (default {tunable.default}).",
        )(command)
    return command


def imex_settings(opts: dict) -> ImexSettings:
    """The tuned nvidia-imex settings of these options (ImexSettingError names the flag)."""
    return ImexSettings.parse({t.key: opts.get(f"imex_{t.variable}") for t in TUNABLES}, lambda t: t.option)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@_opt("--node-name", envvar=constants.ENV_NODE_NAME, required=True, help="This node's name (also the pool name).")
@_opt(
    "--namespace",
    default=constants.DEFAULT_DRIVER_NAMESPACE,
    envvar=constants.ENV_NAMESPACE,
    show_default=True,
    help="Driver namespace (where ComputeDomainCliques live).",
)
@_opt("--kubeconfig", default=None, envvar="KUBECONFIG", help="Kubeconfig file (default: in-cluster account).")
@kube_api_options(DEFAULT_KUBE_API_QPS, DEFAULT_KUBE_API_BURST)
@_opt(
    "--cdi-root",
    default=CDI_STATIC_DIR,
    envvar=ENV_CDI_ROOT,
    show_default=True,
    help="Directory for CDI spec files (one the container runtime reads).",
)
@_opt(
    "--nvidia-driver-root",
    "--host-driver-root",
    "driver_root",
    default="/",
    envvar=[constants.ENV_DRIVER_ROOT, "HOST_DRIVER_ROOT"],
    show_default=True,
    help="Root of the NVIDIA driver installation on the host (CDI host paths use it).",
)
@_opt(
    "--container-driver-root",
    default="",
    envvar=ENV_DRIVER_ROOT_CTR_PATH,
    help="Where this process sees the driver root (default: --nvidia-driver-root).",
)
@_opt(
    "--kubelet-registrar-directory-path",
    "registrar_dir",
    default=KUBELET_REGISTRY_DIR,
    envvar=ENV_KUBELET_REGISTRAR_DIR,
    show_default=True,
    help="Kubelet's plugin registry directory.",
)
@_opt(
    "--kubelet-plugins-directory-path",
    "plugins_dir",
    default=KUBELET_PLUGINS_DIR,
    envvar=ENV_KUBELET_PLUGINS_DIR,
    show_default=True,
    help="Parent of the plugin's data directory.",
)
@_opt(
    "--healthcheck-port",
    type=int,
    default=-1,
    envvar=ENV_HEALTHCHECK_PORT,
    show_default=True,
    help="TCP port of the gRPC health service (0: any free port, <0: off).",
)
@_opt(
    "--healthcheck-address",
    default="",
    envvar=ENV_HEALTHCHECK_ADDRESS,
    help="Address the gRPC health service listens on (empty: every address). The chart passes the "
    "pod IP, which kubelet's probes dial.",
)
@_opt("--http-endpoint", default="", envvar="HTTP_ENDPOINT", help="HOST:PORT or :PORT for metrics (empty: off).")
@_opt("--metrics-path", default="/metrics", envvar="METRICS_PATH", show_default=True, help="Metrics HTTP path.")
@_opt(
    "--imex-mode",
    default=IMEX_MODE_DRIVER_MANAGED,
    envvar=ENV_IMEX_MODE,
    show_default=True,
    help="driverManaged (a daemon per domain) or hostManaged (host nvidia-imex; gate HostManagedIMEXDaemon).",
)
@_opt(
    "--imex-isolation",
    default=IMEX_ISOLATION_DOMAIN,
    envvar=ENV_IMEX_ISOLATION,
    show_default=True,
    help="IMEX isolation: domain (channel is reserved).",
)
@_opt(
    "--imex-host-socket-path",
    default=DEFAULT_HOST_IMEX_SOCKET,
    envvar=ENV_IMEX_HOST_SOCKET_PATH,
    show_default=True,
    help="Host nvidia-imex command socket, inside the driver root (hostManaged only).",
)
@_opt(
    "--gpu-clique-label-enabled/--no-gpu-clique-label-enabled",
    default=False,
    envvar=list(ENV_GPU_CLIQUE_LABEL_ENABLED),
    help=f"Own the node label {constants.LABEL_NODE_CLIQUE} (do not also run GFD).",
)
@_opt(
    "--share-channels/--no-share-channels",
    default=True,
    envvar="SHARE_CHANNELS",
    show_default=True,
    help="Publish the node's channel for several claims of one ComputeDomain (several workload pods of a "
    "domain on a node; Kubernetes 1.36+, DRAConsumableCapacity). Other domains' claims select nodes "
    "that no domain holds.",
)
@_opt(
    "--binding-timeout",
    default="120s",
    envvar="BINDING_TIMEOUT",
    show_default=True,
    help="With gate ComputeDomainBindingConditions: how long a claim waiting in scheduling may wait for "
    "this node's IMEX daemon before binding fails and the pod is placed again.",
)
@_opt(
    "--imex-config-template",
    default=None,
    envvar="IMEX_CONFIG_TEMPLATE",
    help="IMEX config template copied into each domain directory (default: the bundled one).",
)
@_imex_setting_options
@_opt(
    "--prepare-timeout",
    default="30s",
    envvar=ENV_PREPARE_TIMEOUT,
    show_default=True,
    help="How long one Prepare waits for local readiness (keep it below kubelet's 45s).",
)
@_opt(
    "--cleanup-interval",
    default="10m",
    envvar="CLEANUP_INTERVAL",
    show_default=True,
    help="Period of the stale-claim and domain-directory sweeps.",
)
@_opt(
    "--host-probe-interval",
    default="1s",
    envvar="HOST_PROBE_INTERVAL",
    show_default=True,
    help="Pause between host nvidia-imex probes while a Prepare waits (hostManaged).",
)
@_opt(
    "--pod-uid",
    default="",
    envvar="POD_UID",
    help="This plugin pod's UID: the sockets carry it, so that the old and the new pod of a rolling "
         "update serve side by side (kubelet 1.33+). Empty: fixed socket names, one instance per node.",
)
@_opt(
    "--shutdown-grace",
    default="35s",
    envvar="SHUTDOWN_GRACE",
    show_default=True,
    help="On SIGTERM, how long in-flight Prepare/Unprepare calls may take before the sockets go.",
)
@click.pass_context
def command(ctx: click.Context, **opts: Any) -> None:
    """Serve the DRA node API for IMEX channels and daemons on this node."""
    root = root_options(ctx)
    try:
        config = build_config(opts, root.get("feature_gates", ""))
    except click.BadParameter:
        raise
    except CdriverError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    log_startup_configuration("kubelet-plugin", {**opts, "imex_daemon_config": config.imex_settings.describe()},
                              config.gates, root)
    from cdriver.roles.kubelet_plugin.main import run

    try:
        run(config)
    except CdriverError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)


def build_config(opts: dict, feature_gates: str) -> PluginConfig:
    """Validate options (IMEX mode, isolation, gates, durations, rate limit) into a PluginConfig
    (an option left out takes its default)."""
    from cdriver.roles.kubelet_plugin.config import PluginConfig

    imex = resolve_imex(opts["imex_mode"], opts["imex_isolation"], feature_gates)
    check_http_endpoint(opts["http_endpoint"])
    prepare_timeout = parse_duration(opts["prepare_timeout"], "--prepare-timeout")
    qps = opts.get("kube_api_qps", DEFAULT_KUBE_API_QPS)
    burst = opts.get("kube_api_burst", DEFAULT_KUBE_API_BURST)
    limiter_for(qps, burst)  # refuses an impossible limit
    settings = imex_settings(opts)
    pod_uid = opts.get("pod_uid") or ""
    check_pod_uid(pod_uid)
    if prepare_timeout >= 45:
        raise click.BadParameter("must be below kubelet's 45s call timeout", param_hint="--prepare-timeout")
    config = PluginConfig(
        node_name=opts["node_name"],
        namespace=opts["namespace"],
        kubeconfig=opts["kubeconfig"],
        kube_api_qps=qps,
        kube_api_burst=burst,
        cdi_root=Path(opts["cdi_root"]),
        driver_root=Path(opts["driver_root"]),
        container_driver_root=Path(opts["container_driver_root"]) if opts["container_driver_root"] else None,
        registrar_dir=Path(opts["registrar_dir"]),
        plugins_dir=Path(opts["plugins_dir"]),
        healthcheck_port=opts["healthcheck_port"],
        healthcheck_address=opts.get("healthcheck_address") or "",
        http_endpoint=opts["http_endpoint"],
        metrics_path=opts["metrics_path"],
        imex_mode=imex.mode,
        imex_isolation=imex.isolation,
        imex_host_socket_path=opts["imex_host_socket_path"],
        gpu_clique_label_enabled=opts["gpu_clique_label_enabled"],
        share_channels=opts.get("share_channels", True),
        binding_timeout=parse_duration(opts.get("binding_timeout") or "120s", "--binding-timeout"),
        imex_config_template=Path(opts["imex_config_template"]) if opts["imex_config_template"] else None,
        prepare_timeout=prepare_timeout,
        cleanup_interval=parse_duration(opts["cleanup_interval"], "--cleanup-interval"),
        host_probe_interval=parse_duration(opts["host_probe_interval"], "--host-probe-interval"),
        pod_uid=pod_uid,
        shutdown_grace=parse_duration(opts.get("shutdown_grace") or "35s", "--shutdown-grace"),
        gates=imex.gates,
        imex_settings=settings,
    )
    return config
