"""Controller settings: what the generated objects and the control loops depend on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdriver import __version__
from cdriver.api import constants
from cdriver.imex.config import DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
from cdriver.roles.controller.daemon_gates import start_stamp
from cdriver.roles.imex_daemon.inputs import DEFAULT_HTTP_PORT

DEFAULT_DAEMON_PRIORITY_CLASS = "system-node-critical"
DEFAULT_LEASE_NAME = "cdriver-controller"
#: Client-side limit of the controller's API requests (``--kube-api-qps``/``--kube-api-burst``).
#: Upstream keeps client-go's 5/s, burst 10: 500 domains created at once take it about five
#: minutes. One controller serves the whole cluster, as kube-scheduler does, so it takes
#: kube-scheduler's defaults, 50/s and burst 100: 10 new domains a second sustained (a domain
#: costs 5 writes; its reads come from watches), 500 at once in about 48 s (10.5 s without
#: the limit, bench/controller.py), and a runaway loop cannot flood the API server.
DEFAULT_KUBE_API_QPS = 50.0
DEFAULT_KUBE_API_BURST = 100

DEFAULT_DAEMON_IMAGE = f"cdriver:{__version__}"
#: The daemon pods' metrics port (the daemon's own default).
DEFAULT_DAEMON_METRICS_PORT = DEFAULT_HTTP_PORT

# A Kubernetes resource quantity (e.g. 100m, 0.5, 256Mi, 1G, 1e3).
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class ControllerSettings:
    """Inputs of the generated objects (pure data; see `desired`)."""

    #: Driver namespace: daemon DaemonSets, daemon claim templates, daemon pods, cliques.
    namespace: str = constants.DEFAULT_DRIVER_NAMESPACE
    daemon_image: str = DEFAULT_DAEMON_IMAGE
    image_pull_secrets: tuple[str, ...] = ()
    daemon_log_verbosity: int = 0
    max_nodes_per_imex_domain: int = DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    #: FEATURE_GATES for daemon pods: the controller's effective gates, every known gate.
    feature_gates_env: str = ""
    cliques_enabled: bool = True
    host_managed: bool = False
    #: Priority class of daemon pods ("" = none).
    daemon_priority_class: str = DEFAULT_DAEMON_PRIORITY_CLASS
    #: CPU and memory of the daemon container, each used as both request and limit; "" leaves
    #: it unset (the default, as upstream: nvidia-imex is never throttled or OOM-killed by it).
    daemon_cpu: str = ""
    daemon_memory: str = ""
    #: Port of the daemon pods' metrics endpoint, annotated for Prometheus; 0: no endpoint.
    daemon_metrics_port: int = DEFAULT_DAEMON_METRICS_PORT
    #: When this controller started (`daemon_gates.start_stamp`): the stamp of the daemon
    #: feature gates it sets, so that an older controller never sets them back.
    started_at: str = field(default_factory=start_stamp)

    def problems(self) -> list[str]:
        """Every invalid setting, each naming the flag, the value and the fix."""
        out = []
        if not _DNS_LABEL.match(self.namespace) or len(self.namespace) > 63:
            out.append(f"--namespace {self.namespace!r} is not a valid namespace name "
                       "(lowercase letters, digits and '-', at most 63 characters)")
        if not self.daemon_image.strip():
            out.append("--daemon-image is empty: give the image daemon pods run "
                       "(the controller's own image)")
        for secret in self.image_pull_secrets:
            if not _DNS_SUBDOMAIN.match(secret):
                out.append(f"--daemon-image-pull-secrets entry {secret!r} is not a valid "
                           "Secret name")
        if self.max_nodes_per_imex_domain < 1:
            out.append(f"--max-nodes-per-imex-domain {self.max_nodes_per_imex_domain} must "
                       "be at least 1 (default 18, the NVL72 rack size)")
        if self.daemon_priority_class and not _DNS_SUBDOMAIN.match(self.daemon_priority_class):
            out.append(f"--daemon-priority-class {self.daemon_priority_class!r} is not a "
                       "valid PriorityClass name (use '' for none)")
        if not 0 <= self.daemon_metrics_port <= 65535:
            out.append(f"--daemon-metrics-port {self.daemon_metrics_port} is not a port: use 1..65535, or 0 for "
                       f"no metrics endpoint (default {DEFAULT_DAEMON_METRICS_PORT})")
        for flag, value, example in (("--daemon-cpu", self.daemon_cpu, "100m"),
                                     ("--daemon-memory", self.daemon_memory, "256Mi")):
            if value and not _QUANTITY.match(value):
                out.append(f"{flag} {value!r} is not a Kubernetes quantity (e.g. {example})")
        return out


def split_names(text: str) -> tuple[str, ...]:
    """Parse a comma/space separated list of names (blank entries dropped)."""
    return tuple(part for part in re.split(r"[\s,]+", text.strip()) if part)
