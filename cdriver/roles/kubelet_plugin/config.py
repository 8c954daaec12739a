"""Settings of one kubelet plugin process and the paths derived from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdriver import featuregates
from cdriver.api import constants
from cdriver.api.imex_mode import IMEX_ISOLATION_DOMAIN, IMEX_MODE_DRIVER_MANAGED, IMEX_MODE_HOST_MANAGED
from cdriver.cdi.model import CDI_STATIC_DIR
from cdriver.dra.registration import KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR
from cdriver.imex.ctl import DEFAULT_HOST_IMEX_SOCKET
from cdriver.imex.settings import DEFAULT_SETTINGS, ImexSettings
from cdriver.roles.kubelet_plugin import instances

DRA_SOCKET_NAME = "dra.sock"
REGISTRATION_SOCKET_NAME = f"{constants.DRIVER_NAME}-reg.sock"
CHECKPOINT_FILE_NAME = "checkpoint.json"
PLUGIN_DOMAINS_DIR_NAME = "domains"  # <plugin data dir>/domains/<cd uid>/: daemon config dirs

DEFAULT_PREPARE_TIMEOUT = 30.0  # below kubelet's 45 s per-call deadline
DEFAULT_CLEANUP_INTERVAL = 600.0
DEFAULT_HOST_PROBE_INTERVAL = 1.0
#: How long a stopping plugin waits for its in-flight Prepare/Unprepare calls (a Prepare waits
#: at most the prepare timeout); the chart's terminationGracePeriodSeconds leaves room for it.
DEFAULT_SHUTDOWN_GRACE = 35.0
#: Client-side limit of the plugin's API requests (``--kube-api-qps``/``--kube-api-burst``).
#: One plugin runs on every node, so the cluster-wide sum grows with the nodes: twice
#: upstream's client-go default (5/s, burst 10), so that a start (the served-version question,
#: four list+watch pairs, the ResourceSlice and the node label) and a node's worth of
#: Prepares at once fit into the burst and never wait.
DEFAULT_KUBE_API_QPS = 10.0
DEFAULT_KUBE_API_BURST = 20
DOMAINS_DIR_NAME = PLUGIN_DOMAINS_DIR_NAME


@dataclass(frozen=True)
class PluginConfig:
    """Everything the plugin needs to know about its node; paths are host paths."""

    node_name: str
    namespace: str = constants.DEFAULT_DRIVER_NAMESPACE
    kubeconfig: str | None = None
    cdi_root: Path = Path(CDI_STATIC_DIR)
    #: Driver root as the host (and the container runtime) sees it: CDI host paths use it.
    driver_root: Path = Path("/")
    #: Where this process reads the driver root (defaults to ``driver_root``).
    container_driver_root: Path | None = None
    registrar_dir: Path = Path(KUBELET_REGISTRY_DIR)
    plugins_dir: Path = Path(KUBELET_PLUGINS_DIR)
    healthcheck_port: int = -1
    #: Address the health service listens on ("" = every address; the chart passes the pod IP).
    healthcheck_address: str = ""
    http_endpoint: str = ""
    metrics_path: str = "/metrics"
    imex_mode: str = IMEX_MODE_DRIVER_MANAGED
    imex_isolation: str = IMEX_ISOLATION_DOMAIN
    imex_host_socket_path: str = DEFAULT_HOST_IMEX_SOCKET
    gpu_clique_label_enabled: bool = False
    #: Publish the channel for several claims of one ComputeDomain (several workload pods of a
    #: domain per node), where the API server serves allowMultipleAllocations.
    share_channels: bool = True
    #: Seconds a claim waiting in the scheduler's PreBind (gate ComputeDomainBindingConditions)
    #: may wait for this node's IMEX daemon before binding fails and the pod is placed again.
    binding_timeout: float = 120.0
    imex_config_template: Path | None = None
    prepare_timeout: float = DEFAULT_PREPARE_TIMEOUT
    #: The plugin pod's UID: when set, the sockets carry it, so that two instances (old and new
    #: pod of a rolling update) serve side by side on one node (kubelet 1.33+).
    pod_uid: str = ""
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    cleanup_interval: float = DEFAULT_CLEANUP_INTERVAL
    host_probe_interval: float = DEFAULT_HOST_PROBE_INTERVAL
    grpc_workers: int = 16
    kube_api_qps: float = DEFAULT_KUBE_API_QPS
    kube_api_burst: int = DEFAULT_KUBE_API_BURST
    gates: featuregates.FeatureGates = field(default_factory=featuregates.FeatureGates)
    #: nvidia-imex settings filled into the config template of every domain directory.
    imex_settings: ImexSettings = DEFAULT_SETTINGS

    @property
    def binding_conditions(self) -> bool:
        """Whether channels carry binding conditions (the gate; driver-managed mode only)."""
        return self.gates.enabled(featuregates.COMPUTE_DOMAIN_BINDING_CONDITIONS) and not self.host_managed

    @property
    def host_managed(self) -> bool:
        return self.imex_mode == IMEX_MODE_HOST_MANAGED

    @property
    def read_root(self) -> Path:
        """The driver root as readable by this process."""
        return self.container_driver_root or self.driver_root

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / constants.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / instances.dra_socket_name(self.pod_uid)

    @property
    def registration_socket(self) -> Path:
        return self.registrar_dir / instances.registration_socket_name(self.pod_uid)

    @property
    def checkpoint_path(self) -> Path:
        return self.plugin_dir / CHECKPOINT_FILE_NAME

    @property
    def domains_dir(self) -> Path:
        return self.plugin_dir / DOMAINS_DIR_NAME

    def domain_dir(self, domain_id: str) -> Path:
        return self.domains_dir / domain_id

    @property
    def dev_root(self) -> Path:
        """Host-side root of the device nodes: the driver root if it has a dev dir, else ``/``."""
        return self.driver_root if (self.read_root / "dev").is_dir() else Path("/")

    @property
    def use_cliques(self) -> bool:
        return self.gates.enabled(featuregates.COMPUTE_DOMAIN_CLIQUES)
