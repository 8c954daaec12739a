"""The objects a ComputeDomain should have, rendered from jinja2 templates (pure).

Driver-managed: a workload ResourceClaimTemplate in the domain's namespace, a daemon
ResourceClaimTemplate and a DaemonSet ``computedomain-daemon-<uid>`` in the driver namespace.
Host-managed: the workload template only, with allocationMode forced to Single.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Protocol

import jinja2
import yaml

from cdriver.api import constants
from cdriver.checkout import TEMPLATES_DIR
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.httpserve import LIVEZ, READYZ, STARTUPZ
from cdriver.imex.config import IMEX_CMD_PORT, IMEX_SERVER_PORT
from cdriver.kube.objects import being_deleted, finalizers_of, labels_of
from cdriver.roles.controller import daemon_gates
from cdriver.roles.controller.settings import ControllerSettings

DAEMON_CONTAINER_NAME = "compute-domain-daemon"
DAEMON_POD_CLAIM_NAME = "compute-domain-daemon"
DAEMON_REQUEST_NAME = "daemon"
CHANNEL_REQUEST_NAME = "channel"

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available

TEMPLATE_DIR = TEMPLATES_DIR / "controller"
WORKLOAD_TEMPLATE = "workload-claim-template.yaml.j2"
DAEMON_CLAIM_TEMPLATE = "daemon-claim-template.yaml.j2"
DAEMONSET_TEMPLATE = "daemonset.yaml.j2"

#: Daemon container command and its probe command (`cdriver imex-daemon check`).
DAEMON_RUN_COMMAND = ("cdriver", "imex-daemon", "run")
DAEMON_CHECK_COMMAND = ("cdriver", "imex-daemon", "check")
#: Seconds the startup probe waits for READY: below its timeoutSeconds (10), above a normal
#: start, so a starting daemon records no "Startup probe failed" Warning.
DAEMON_STARTUP_WAIT_SECONDS = 8
DAEMON_STARTUP_CHECK_COMMAND = (*DAEMON_CHECK_COMMAND, "--wait", str(DAEMON_STARTUP_WAIT_SECONDS))
#: Where daemon pods serve their metrics (the daemon's ``--metrics-path`` default).
DAEMON_METRICS_PATH = "/metrics"
#: Paths of the probes a daemon with an HTTP endpoint answers itself (`imex_daemon.health`).
DAEMON_PROBE_PATHS = {"startup": STARTUPZ, "readiness": READYZ, "liveness": LIVEZ}
#: Seconds before the first HTTP startup probe: the daemon's process starts and binds its
#: endpoint (a refused connection would record a "Startup probe failed" Warning).
DAEMON_HTTP_STARTUP_DELAY_SECONDS = 3
#: Env vars daemon pods take from the downward API: (name, fieldPath).
DOWNWARD_ENV = (
    (constants.ENV_NODE_NAME, "spec.nodeName"),
    (constants.ENV_POD_IP, "status.podIP"),
    (constants.ENV_POD_NAME, "metadata.name"),
    (constants.ENV_POD_NAMESPACE, "metadata.namespace"),
    (constants.ENV_POD_UID, "metadata.uid"),
)


class DomainLike(Protocol):
    """The ComputeDomain fields the generated objects depend on."""

    name: str
    namespace: str
    uid: str
    channel_template_name: str
    allocation_mode: str


@dataclass(frozen=True)
class DesiredObjects:
    """What a domain should have; daemon objects are None in host-managed mode."""

    workload_template: dict
    daemon_template: dict | None
    daemon_set: dict | None


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
    )


def render(template: str, **values: object) -> dict:
    """Render one template and parse it into the object dict."""
    text = _environment().get_template(template).render(**values)
    obj = yaml.load(text, Loader=_LOADER)
    if not isinstance(obj, dict):  # pragma: no cover - a broken template is a bug
        raise ValueError(f"template {template} did not render to an object")
    return obj


_SLOT = "__cdriver_slot_{}__"
_SLOT_RE = re.compile(r"__cdriver_slot_([a-z_]+)__")


@functools.lru_cache(maxsize=64)
def _skeleton(template: str, static_json: str, slots: tuple[str, ...]) -> dict:
    values = json.loads(static_json)
    values.update({name: _SLOT.format(name) for name in slots})
    return render(template, **values)


def _fill(node: object, values: dict[str, str]) -> object:
    if isinstance(node, dict):
        return {_fill(k, values): _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str) and "__cdriver_slot_" in node:
        return _SLOT_RE.sub(lambda m: values[m.group(1)], node)
    return node


def render_cached(template: str, per_domain: dict[str, str], **static: object) -> dict:
    """`render`, parsing each template once per set of ``static`` values: ``per_domain``
    strings (uid, names, ...) are filled into the parsed skeleton. Same result, a fraction
    of the cost when thousands of domains share the settings."""
    skeleton = _skeleton(template, json.dumps(static, sort_keys=True), tuple(sorted(per_domain)))
    return _fill(skeleton, per_domain)  # type: ignore[return-value]


def channel_allocation_mode(requested: str, host_managed: bool) -> str:
    """allocationMode for the channel config: host-managed supports channel 0 only."""
    if host_managed or not requested:
        return constants.ALLOCATION_MODE_SINGLE
    return requested


def allocation_mode_forced(requested: str, host_managed: bool) -> bool:
    """True when the domain asked for more than host-managed mode can give (an Event)."""
    return host_managed and requested == constants.ALLOCATION_MODE_ALL


def _common(target: str) -> dict[str, object]:
    return {
        "finalizer": constants.FINALIZER,
        "label_domain": constants.LABEL_COMPUTE_DOMAIN,
        "label_target": constants.LABEL_TARGET,
        "target": target,
        "driver": constants.DRIVER_NAME,
        "api_version": constants.API_VERSION,
    }


def workload_claim_template(cd: DomainLike, settings: ControllerSettings) -> dict:
    """The channel ResourceClaimTemplate workload pods reference."""
    return render_cached(
        WORKLOAD_TEMPLATE,
        {"domain_uid": cd.uid, "name": cd.channel_template_name, "namespace": cd.namespace,
         "allocation_mode": channel_allocation_mode(cd.allocation_mode, settings.host_managed),
         "domain_selector": constants.channel_domain_selector(cd.uid)},
        **_common(constants.TARGET_WORKLOAD),
        request_name=CHANNEL_REQUEST_NAME,
        device_class=constants.DEVICE_CLASS_DEFAULT_CHANNEL,
        config_kind=constants.KIND_CHANNEL_CONFIG,
    )


def daemon_claim_template(cd: DomainLike, settings: ControllerSettings) -> dict:
    """The daemon ResourceClaimTemplate the daemon DaemonSet's pods use."""
    return render_cached(
        DAEMON_CLAIM_TEMPLATE,
        {"domain_uid": cd.uid, "name": constants.daemon_object_name(cd.uid)},
        **_common(constants.TARGET_DAEMON),
        namespace=settings.namespace,
        request_name=DAEMON_REQUEST_NAME,
        device_class=constants.DEVICE_CLASS_DAEMON,
        config_kind=constants.KIND_DAEMON_CONFIG,
    )


def daemon_set(cd: DomainLike, settings: ControllerSettings, claim_template_name: str) -> dict:
    """The IMEX daemon DaemonSet; ``claim_template_name`` is the daemon template in use."""
    return render_cached(
        DAEMONSET_TEMPLATE,
        {"domain_uid": cd.uid, "name": constants.daemon_object_name(cd.uid),
         "claim_template_name": claim_template_name},
        **_common(constants.TARGET_DAEMON),
        namespace=settings.namespace,
        service_account=constants.DAEMON_SERVICE_ACCOUNT,
        priority_class=settings.daemon_priority_class,
        image_pull_secrets=list(settings.image_pull_secrets),
        claim_name=DAEMON_POD_CLAIM_NAME,
        container_name=DAEMON_CONTAINER_NAME,
        image=settings.daemon_image,
        run_command=list(DAEMON_RUN_COMMAND),
        check_command=list(DAEMON_CHECK_COMMAND),
        startup_check_command=list(DAEMON_STARTUP_CHECK_COMMAND),
        probe_paths=DAEMON_PROBE_PATHS,
        http_startup_delay=DAEMON_HTTP_STARTUP_DELAY_SECONDS,
        downward_env=[list(pair) for pair in DOWNWARD_ENV],
        log_verbosity=settings.daemon_log_verbosity,
        env_max_nodes=constants.ENV_MAX_NODES,
        max_nodes=settings.max_nodes_per_imex_domain,
        env_feature_gates=ENV_FEATURE_GATES,
        feature_gates=settings.feature_gates_env,
        cpu=settings.daemon_cpu,
        memory=settings.daemon_memory,
        metrics_port=settings.daemon_metrics_port,
        metrics_path=DAEMON_METRICS_PATH,
        env_pod_ip=constants.ENV_POD_IP,
        reserved_ports=f"{IMEX_SERVER_PORT},{IMEX_CMD_PORT}",
        update_strategy=daemon_gates.UPDATE_STRATEGY,
        annotation_gates_stamp=daemon_gates.ANNOTATION_GATES_SET_AT,
        gates_stamp=settings.started_at,
    )


def desired_objects(cd: DomainLike, settings: ControllerSettings) -> DesiredObjects:
    """Everything the domain should have in the configured IMEX mode."""
    workload = workload_claim_template(cd, settings)
    if settings.host_managed:
        return DesiredObjects(workload, None, None)
    daemon_template = daemon_claim_template(cd, settings)
    return DesiredObjects(
        workload, daemon_template,
        daemon_set(cd, settings, daemon_template["metadata"]["name"]),
    )


# --- ownership ---------------------------------------------------------------------------

def domain_uid_of(obj: dict) -> str:
    """The ComputeDomain UID an object is labelled with ("" if none)."""
    return str(labels_of(obj).get(constants.LABEL_COMPUTE_DOMAIN) or "")


def owned_by(obj: dict, uid: str) -> bool:
    """True if ``obj`` carries this domain's label: it is ours to adopt and manage."""
    return domain_uid_of(obj) == uid


def has_finalizer(obj: dict) -> bool:
    return constants.FINALIZER in finalizers_of(obj)


def is_terminating(obj: dict) -> bool:
    return being_deleted(obj)
