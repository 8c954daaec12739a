"""Daemon inputs: CDI-injected identity, downward-API env and flags, turned into settings.

Pure validation: every problem names the variable, the value and the fix, and all problems
are reported at once.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cdriver import featuregates
from cdriver.api.constants import (
    DEVICE_CLASS_DAEMON,
    ENV_CD_NAME,
    ENV_CD_NAMESPACE,
    ENV_CD_UUID,
    ENV_CLIQUE_ID,
    ENV_MAX_NODES,
    ENV_NODE_NAME,
    ENV_POD_IP,
    ENV_POD_NAME,
    ENV_POD_NAMESPACE,
    ENV_POD_UID,
    clique_object_name,
)
from cdriver.errors import CdriverError
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.imex.config import (
    DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
    IMEX_CTL_BINARY,
    IMEX_DAEMON_BINARY,
    IMEXD_CONFIG_NAME,
    IMEXD_DIR,
    IMEXD_NODES_CONFIG_NAME,
    IMEXD_TEMPLATE_NAME,
)
from cdriver.imex.hosts import HOSTS_FILE
from cdriver.kube.ratelimit import RateLimitSettingError, limiter_for

IMEXD_STATE_NAME = "daemon-state.json"  # written by `imex-daemon run`, read by `check`

#: Client-side limit of the daemon's API requests (``--kube-api-qps``/``--kube-api-burst``).
#: Upstream's daemon has no such flags and runs at client-go's default (5/s, burst 10). A
#: daemon runs on every node of a domain, so the cluster-wide sum grows with the nodes: as the
#: kubelet plugin, twice client-go's default, so that a start (pod label, clique entry, two
#: list+watch pairs) and the conflict retries of a full clique joining at once fit the burst.
DEFAULT_KUBE_API_QPS = 10.0
DEFAULT_KUBE_API_BURST = 20
#: The daemon's metrics port (``--http-endpoint``): next to the controller's 8080 and the kubelet
#: plugin's 8081. The controller renders ``$(POD_IP):<port>`` into daemon pods, so daemons that
#: share a network (simulated nodes) never take each other's port.
DEFAULT_HTTP_PORT = 8082
DEFAULT_HTTP_ENDPOINT = f":{DEFAULT_HTTP_PORT}"
DEFAULT_METRICS_PATH = "/metrics"
#: How long a new clique entry waits for the controller's index (it usually comes within a
#: second; a daemon whose controller is down or older takes one itself after this).
DEFAULT_INDEX_WAIT = 10.0

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class InputError(CdriverError):
    """The daemon's environment or flags are unusable; the message lists every problem."""


@dataclass(frozen=True)
class RawInputs:
    """Inputs as they arrive (strings from env vars or flags), before validation."""

    clique_id: str = ""
    cd_uid: str = ""
    cd_name: str = ""
    cd_namespace: str = "default"
    node_name: str = ""
    pod_ip: str = ""
    pod_name: str = ""
    pod_namespace: str = ""
    pod_uid: str = ""
    max_nodes: str = ""
    feature_gates: str = ""
    imexd_dir: str = IMEXD_DIR
    hosts_file: str = HOSTS_FILE
    imex_binary: str = IMEX_DAEMON_BINARY
    ctl_binary: str = IMEX_CTL_BINARY
    kubeconfig: str | None = None
    kube_api_qps: float = DEFAULT_KUBE_API_QPS
    kube_api_burst: int = DEFAULT_KUBE_API_BURST
    max_backoff: float = 30.0
    recheck_seconds: float = 5.0
    stop_grace: float = 10.0
    http_endpoint: str = DEFAULT_HTTP_ENDPOINT
    metrics_path: str = DEFAULT_METRICS_PATH
    index_wait: float = DEFAULT_INDEX_WAIT


@dataclass(frozen=True)
class Paths:
    """Files the daemon reads and writes inside the /imexd mount and the container."""

    imexd_dir: Path
    hosts_file: Path

    @property
    def template(self) -> Path:
        """Config template the kubelet plugin copied in when it prepared the daemon claim."""
        return self.imexd_dir / IMEXD_TEMPLATE_NAME

    @property
    def config(self) -> Path:
        return self.imexd_dir / IMEXD_CONFIG_NAME

    @property
    def nodes_config(self) -> Path:
        return self.imexd_dir / IMEXD_NODES_CONFIG_NAME

    @property
    def state(self) -> Path:
        """Daemon state shared with `check` (e.g. a port conflict that blocks start-up)."""
        return self.imexd_dir / IMEXD_STATE_NAME


@dataclass(frozen=True)
class Settings:
    """Validated inputs of `imex-daemon run`."""

    clique_id: str
    cd_uid: str
    cd_name: str
    cd_namespace: str
    node_name: str
    pod_ip: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    max_nodes: int
    gates: featuregates.FeatureGates
    paths: Paths
    imex_binary: str
    ctl_binary: str
    kubeconfig: str | None = None
    kube_api_qps: float = DEFAULT_KUBE_API_QPS
    kube_api_burst: int = DEFAULT_KUBE_API_BURST
    max_backoff: float = 30.0
    recheck_seconds: float = 5.0
    stop_grace: float = 10.0
    #: seconds a new entry waits for the controller to assign its index before the daemon takes
    #: the lowest free one itself; 0: always itself (optimistic writes of the whole list)
    index_wait: float = DEFAULT_INDEX_WAIT
    #: where metrics are served ("" or an empty path: nowhere)
    http_endpoint: str = DEFAULT_HTTP_ENDPOINT
    metrics_path: str = DEFAULT_METRICS_PATH

    @property
    def dns_names(self) -> bool:
        """Static DNS-name peer list + hosts block + SIGUSR1 (else raw IPs + restart)."""
        return self.gates.enabled(featuregates.IMEX_DAEMONS_WITH_DNS_NAMES)

    @property
    def cliques(self) -> bool:
        """Publish in a ComputeDomainClique (else in ComputeDomain.status.nodes)."""
        return self.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)

    @property
    def clique_name(self) -> str:
        return clique_object_name(self.cd_uid, self.clique_id)

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"


@dataclass(frozen=True)
class CheckSettings:
    """Inputs of `imex-daemon check` (the probe): only what the probe needs."""

    clique_id: str
    paths: Paths
    ctl_binary: str
    timeout: float = 5.0


def cdi_missing_message() -> str:
    """Why a daemon without its CDI identity cannot run, and what to check."""
    return (
        f"{ENV_CD_UUID} is empty: the CDI container edits of the daemon claim were not applied "
        f"to this container (they carry {ENV_CD_UUID}, {ENV_CD_NAME}, {ENV_CD_NAMESPACE}, "
        f"{ENV_CLIQUE_ID} and the {IMEXD_DIR} mount). Check that the container runtime has CDI "
        "enabled (containerd: enable_cdi = true; CRI-O enables it by default) and that the pod "
        f"requests its ResourceClaim of DeviceClass {DEVICE_CLASS_DAEMON}."
    )


def _required(problems: list[str], env: str, value: str, hint: str) -> None:
    if not value:
        problems.append(f"{env} is empty; {hint}")


def _parse_max_nodes(problems: list[str], text: str) -> int:
    value = text.strip()
    try:
        number = int(value)
    except ValueError:
        problems.append(
            f"{ENV_MAX_NODES}={value!r} is not an integer; set it to the maximum number of nodes "
            f"per IMEX domain (the controller renders {DEFAULT_MAX_NODES_PER_IMEX_DOMAIN} by default)"
        )
        return 0
    if number < 1:
        problems.append(
            f"{ENV_MAX_NODES}={number} leaves no index for any daemon; set it to at least 1 "
            f"(the controller renders {DEFAULT_MAX_NODES_PER_IMEX_DOMAIN} by default)"
        )
    return number


def _parse_gates(problems: list[str], text: str) -> featuregates.FeatureGates | None:
    try:
        return featuregates.FeatureGates.parse(text)
    except featuregates.FeatureGateError as exc:
        problems.append(f"{ENV_FEATURE_GATES}={text!r}: {exc}")
        return None


def _check_clique_id(problems: list[str], clique_id: str) -> None:
    if len(clique_id) > 63 or not _LABEL_VALUE.match(clique_id):
        problems.append(
            f"{ENV_CLIQUE_ID}={clique_id!r} is not a valid label value (<clusterUUID>.<cliqueId>, "
            "at most 63 characters); it comes from the kubelet plugin's NVML fabric discovery, "
            "check the plugin's log on this node"
        )


def _check_pod_ip(problems: list[str], pod_ip: str) -> None:
    if not pod_ip:
        problems.append(f"{ENV_POD_IP} is empty; set it from the downward API field status.podIP")
        return
    try:
        ipaddress.ip_address(pod_ip)
    except ValueError:
        problems.append(f"{ENV_POD_IP}={pod_ip!r} is not an IP address; set it from status.podIP")


def _fail(problems: list[str]) -> None:
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise InputError(f"invalid imex-daemon inputs:\n{lines}")


def parse_settings(raw: RawInputs) -> Settings:
    """Validate `run` inputs; raise InputError naming every bad value and its fix."""
    if not raw.cd_uid.strip():
        raise InputError(cdi_missing_message())
    problems: list[str] = []
    gates = _parse_gates(problems, raw.feature_gates)
    clique_id = raw.clique_id.strip()
    downward = "set it from the downward API in the daemon pod spec"
    _required(problems, ENV_POD_NAME, raw.pod_name, f"{downward} (metadata.name)")
    _required(problems, ENV_POD_NAMESPACE, raw.pod_namespace, f"{downward} (metadata.namespace)")
    max_nodes = 0
    if clique_id:
        _check_clique_id(problems, clique_id)
        _required(problems, ENV_NODE_NAME, raw.node_name, f"{downward} (spec.nodeName)")
        _required(problems, ENV_POD_UID, raw.pod_uid, f"{downward} (metadata.uid)")
        _check_pod_ip(problems, raw.pod_ip)
        max_nodes = _parse_max_nodes(problems, raw.max_nodes)
        if gates is not None and not gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES):
            _required(problems, ENV_CD_NAME, raw.cd_name,
                      "it is injected by CDI with the ComputeDomain identity; re-create the daemon pod")
            _required(problems, ENV_CD_NAMESPACE, raw.cd_namespace,
                      "it is injected by CDI with the ComputeDomain identity; re-create the daemon pod")
    elif raw.max_nodes.strip():
        max_nodes = _parse_max_nodes(problems, raw.max_nodes)
    for name, value in (("--max-restart-backoff", raw.max_backoff),
                        ("--recheck-interval", raw.recheck_seconds), ("--stop-grace", raw.stop_grace)):
        if value <= 0:
            problems.append(f"{name}={value} must be a positive number of seconds")
    if not raw.index_wait >= 0:
        problems.append(f"--index-wait={raw.index_wait} must be 0 (the daemon takes its index itself) or a "
                        "positive number of seconds")
    try:
        limiter_for(raw.kube_api_qps, raw.kube_api_burst)
    except RateLimitSettingError as exc:
        problems.append(str(exc))
    if raw.http_endpoint.strip():
        from cdriver.httpserve import parse_endpoint  # keeps `check` (the probe) free of prometheus

        try:
            parse_endpoint(raw.http_endpoint.strip())
        except ValueError as exc:
            problems.append(f"{exc} (empty: no metrics endpoint)")
    _fail(problems)
    assert gates is not None
    return Settings(
        clique_id=clique_id,
        cd_uid=raw.cd_uid.strip(),
        cd_name=raw.cd_name.strip(),
        cd_namespace=raw.cd_namespace.strip() or "default",
        node_name=raw.node_name.strip(),
        pod_ip=raw.pod_ip.strip(),
        pod_name=raw.pod_name.strip(),
        pod_namespace=raw.pod_namespace.strip(),
        pod_uid=raw.pod_uid.strip(),
        max_nodes=max_nodes,
        gates=gates,
        paths=Paths(Path(raw.imexd_dir), Path(raw.hosts_file)),
        imex_binary=raw.imex_binary,
        ctl_binary=raw.ctl_binary,
        kubeconfig=raw.kubeconfig or None,
        kube_api_qps=raw.kube_api_qps,
        kube_api_burst=raw.kube_api_burst,
        max_backoff=raw.max_backoff,
        recheck_seconds=raw.recheck_seconds,
        index_wait=raw.index_wait,
        stop_grace=raw.stop_grace,
        http_endpoint=raw.http_endpoint.strip(),
        metrics_path=raw.metrics_path.strip(),
    )


def parse_check_settings(raw: RawInputs, timeout: float = 5.0) -> CheckSettings:
    """Settings of the probe; never fails on identity (an empty clique is a no-op success)."""
    return CheckSettings(
        clique_id=raw.clique_id.strip(),
        paths=Paths(Path(raw.imexd_dir), Path(raw.hosts_file)),
        ctl_binary=raw.ctl_binary,
        timeout=timeout,
    )
