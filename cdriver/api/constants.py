"""Every externally visible name of the driver, in one place.

These strings are the upstream contract (CRD group, kinds, labels, finalizer, DeviceClass
names, driver name, CDI vendor/kinds, env vars); existing manifests depend on them.
"""

from __future__ import annotations

# --- API group and kinds -------------------------------------------------------------
GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND_COMPUTE_DOMAIN = "ComputeDomain"
KIND_COMPUTE_DOMAIN_CLIQUE = "ComputeDomainClique"
PLURAL_COMPUTE_DOMAINS = "computedomains"
PLURAL_COMPUTE_DOMAIN_CLIQUES = "computedomaincliques"
KIND_CHANNEL_CONFIG = "ComputeDomainChannelConfig"
KIND_DAEMON_CONFIG = "ComputeDomainDaemonConfig"

# --- DRA -----------------------------------------------------------------------------
DRIVER_NAME = "compute-domain.nvidia.com"
DEVICE_CLASS_DEFAULT_CHANNEL = "compute-domain-default-channel.nvidia.com"
DEVICE_CLASS_CHANNEL = "compute-domain-channel.nvidia.com"  # declared upstream, not shipped
DEVICE_CLASS_DAEMON = "compute-domain-daemon.nvidia.com"
DEVICE_TYPE_CHANNEL = "channel"
DEVICE_TYPE_DAEMON = "daemon"
DEVICE_CHANNEL_0 = "channel-0"
DEVICE_DAEMON_0 = "daemon-0"
ALLOCATION_MODE_SINGLE = "Single"
ALLOCATION_MODE_ALL = "All"
ALLOCATION_MODES = (ALLOCATION_MODE_SINGLE, ALLOCATION_MODE_ALL)

# --- Labels, finalizer ---------------------------------------------------------------
LABEL_COMPUTE_DOMAIN = "resource.nvidia.com/computeDomain"
LABEL_CLIQUE_ID = "resource.nvidia.com/computeDomain.cliqueID"
LABEL_TARGET = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON = "Daemon"
TARGET_WORKLOAD = "Workload"
FINALIZER = "resource.nvidia.com/computeDomain"
LABEL_NODE_CLIQUE = "nvidia.com/gpu.clique"

# --- Status --------------------------------------------------------------------------
STATUS_READY = "Ready"
STATUS_NOT_READY = "NotReady"

# --- Generated object names ----------------------------------------------------------
DAEMON_NAME_PREFIX = "computedomain-daemon-"
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"
DEFAULT_DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN = 18


def daemon_object_name(cd_uid: str) -> str:
    """Name of the daemon DaemonSet and of the daemon ResourceClaimTemplate for a CD."""
    return f"{DAEMON_NAME_PREFIX}{cd_uid}"


def clique_object_name(cd_uid: str, clique_id: str) -> str:
    """Name of the ComputeDomainClique object for (CD, clique)."""
    return f"{cd_uid}.{clique_id}"


# --- CDI -----------------------------------------------------------------------------
CDI_VENDOR = "k8s.compute-domain.nvidia.com"
CDI_CLASS_CLAIM = "claim"
CDI_CLASS_DEVICE = "device"
CDI_KIND_CLAIM = f"{CDI_VENDOR}/{CDI_CLASS_CLAIM}"
CDI_KIND_DEVICE = f"{CDI_VENDOR}/{CDI_CLASS_DEVICE}"
CDI_DYNAMIC_DIR = "/var/run/cdi"
CDI_STATIC_DIR = "/etc/cdi"

# --- Kubelet paths -------------------------------------------------------------------
KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGIN_DATA_DIR = f"{KUBELET_PLUGINS_DIR}/{DRIVER_NAME}"
DRA_SOCKET_NAME = "dra.sock"
REGISTRATION_SOCKET_NAME = f"{DRIVER_NAME}-reg.sock"
CHECKPOINT_FILE_NAME = "checkpoint.json"

# --- Devices -------------------------------------------------------------------------
IMEX_CHANNELS_DEVICE_NAME = "nvidia-caps-imex-channels"  # /proc/devices entry
NVIDIA_CAPS_DEVICE_NAME = "nvidia-caps"
IMEX_CHANNELS_DEV_DIR = "/dev/nvidia-caps-imex-channels"
FABRIC_MGMT_CAP_PATH = "/proc/driver/nvidia/capabilities/fabric-imex-mgmt"


def channel_device_path(channel: int) -> str:
    """Container path of IMEX channel N."""
    return f"{IMEX_CHANNELS_DEV_DIR}/channel{channel}"


# --- IMEX ----------------------------------------------------------------------------
IMEX_SERVER_PORT = 50000
IMEX_CMD_PORT = 50005
IMEXD_DIR = "/imexd"
IMEXD_CONFIG = f"{IMEXD_DIR}/imexd.cfg"
IMEXD_NODES_CONFIG = f"{IMEXD_DIR}/nodes.cfg"
IMEX_CONFIG_TEMPLATE_NAME = "imexd.tmpl.cfg"
IMEX_DAEMON_BINARY = "nvidia-imex"
IMEX_CTL_BINARY = "nvidia-imex-ctl"
DNS_NAME_PREFIX = "compute-domain-daemon-"
HOSTS_BLOCK_HEADER = "# Compute Domain Daemon mappings"
DEFAULT_HOST_IMEX_SOCKET = "/etc/nvidia-imex/imex_ctrl.sock"


def dns_name(index: int) -> str:
    """Synthetic peer hostname for clique index N (compute-domain-daemon-0000 ...)."""
    return f"{DNS_NAME_PREFIX}{index:04d}"


# --- Env vars ------------------------------------------------------------------------
ENV_FEATURE_GATES = "FEATURE_GATES"
ENV_NODE_NAME = "NODE_NAME"
ENV_NAMESPACE = "NAMESPACE"
ENV_POD_IP = "POD_IP"
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
ENV_POD_UID = "POD_UID"
ENV_CLIQUE_ID = "CLIQUE_ID"
ENV_CD_UUID = "COMPUTE_DOMAIN_UUID"
ENV_CD_NAME = "COMPUTE_DOMAIN_NAME"
ENV_CD_NAMESPACE = "COMPUTE_DOMAIN_NAMESPACE"
ENV_MAX_NODES = "MAX_NODES_PER_IMEX_DOMAIN"
ENV_DRIVER_ROOT = "NVIDIA_DRIVER_ROOT"

# --- IMEX modes (host-managed) -------------------------------------------------------
IMEX_MODE_DRIVER_MANAGED = "driverManaged"
IMEX_MODE_HOST_MANAGED = "hostManaged"
IMEX_ISOLATION_DOMAIN = "domain"
IMEX_ISOLATION_CHANNEL = "channel"

# --- imex-daemon role ----------------------------------------------------------------
IMEXD_TEMPLATE_NAME = "imexd.cfg.tmpl"  # placed in the domain dir by the kubelet plugin
IMEXD_CONFIG_NAME = "imexd.cfg"
IMEXD_NODES_CONFIG_NAME = "nodes.cfg"
IMEXD_STATE_NAME = "daemon-state.json"  # written by `imex-daemon run`, read by `check`
ENV_IMEXD_DIR = "IMEXD_DIR"
ENV_IMEX_HOSTS_FILE = "IMEX_HOSTS_FILE"
IMEX_CHECK_NOOP_MESSAGE = "check succeeded (noop, clique ID is empty)"
EVENT_REASON_IMEX_START_FAILED = "IMEXDaemonStartFailed"
EVENT_REASON_IMEX_PORT_CONFLICT = "IMEXPortConflict"
EVENT_REASON_IMEX_RESTARTED = "IMEXDaemonRestarted"
HOST_IMEX_SERVICE = "nvidia-imex.service"

# --- controller role -----------------------------------------------------------------
DAEMON_CONTAINER_NAME = "compute-domain-daemon"
DAEMON_POD_CLAIM_NAME = "compute-domain-daemon"
DAEMON_REQUEST_NAME = "daemon"
CHANNEL_REQUEST_NAME = "channel"
DEFAULT_DAEMON_PRIORITY_CLASS = "system-node-critical"
DEFAULT_DAEMON_CPU = "100m"
DEFAULT_DAEMON_MEMORY = "256Mi"
DEFAULT_LEASE_NAME = "cdriver-controller"
CONTROLLER_COMPONENT = "cdriver-controller"
CONDITION_READY = "Ready"
ENV_IMEX_MODE = "IMEX_MODE"
ENV_IMEX_ISOLATION = "IMEX_ISOLATION"

# --- cdriver.imex and the IMEX stand-ins (cdriver.sim.imex) --------------------------
HOSTS_FILE = "/etc/hosts"
DEFAULT_IMEX_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_IMEX_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
IMEX_READY_OUTPUT = "READY"  # what `nvidia-imex-ctl -q` prints for a ready daemon
IMEX_NO_GPU_VERSION = "NO_GPU"  # node version IMEX reports in NO GPU mode
IMEX_DOMAIN_UP = "UP"
IMEX_DOMAIN_DEGRADED = "DEGRADED"
IMEX_DOMAIN_DOWN = "DOWN"
IMEX_NODE_READY = "READY"
IMEX_NODE_UNAVAILABLE = "UNAVAILABLE"
ENV_SIM_HOSTS_FILE = "CDRIVER_SIM_HOSTS_FILE"  # hosts file the stand-ins resolve names in
ENV_SIM_IMEX_HEARTBEAT = "CDRIVER_SIM_IMEX_HEARTBEAT_S"
ENV_SIM_IMEX_PEER_TIMEOUT = "CDRIVER_SIM_IMEX_PEER_TIMEOUT_S"
ENV_SIM_IMEX_RETRY_INITIAL = "CDRIVER_SIM_IMEX_RETRY_INITIAL_S"
ENV_SIM_IMEX_RETRY_MAX = "CDRIVER_SIM_IMEX_RETRY_MAX_S"

# --- cdriver.checkpoint ---------------------------------------------------------------
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"  # changes on every boot

# --- cdriver.nvml (discovery) and cdriver.sim (driver root, simulated NVML) ----------
NVML_LIBRARY_NAME = "libnvidia-ml.so.1"
#: Where libnvidia-ml.so.1 is looked up below a driver root, in order.
NVML_LIBRARY_SEARCH_DIRS = ("/", "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                            "/lib64", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu")
NVIDIA_SMI_BINARY = "nvidia-smi"
#: Where nvidia-smi is looked up below a driver root, in order.
NVIDIA_SMI_SEARCH_DIRS = ("/", "/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
PROC_DEVICES_PATH = "/proc/devices"
IMEX_CHANNEL_COUNT = 2048  # channels per node (fixed by the NVIDIA driver)
#: GPUs with these names are not counted (display devices of DGX stations).
NVML_IGNORED_GPU_NAMES = ("DGX Display", "NVIDIA DGX Display")
ENV_SIM_NVML_CONFIG = "CDRIVER_SIM_NVML_CONFIG"  # simulated NVML: path of its per-node config
SIM_NVML_CONFIG_NAME = "nvml-sim.conf"  # default config next to the simulated library
ENV_SIM_TOPOLOGY = "CDRIVER_SIM_TOPOLOGY"  # topology document of the simulation

# --- kubelet-plugin role --------------------------------------------------------------
PLUGIN_DOMAINS_DIR_NAME = "domains"  # <plugin data dir>/domains/<cd uid>/: daemon config dirs
CDI_BASE_SPEC_ID = "base"  # transient id of the node's base spec (device "all")
CDI_BASE_DEVICE = "all"
IMEXD_MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")
NVIDIA_VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
ENV_CDI_ROOT = "CDI_ROOT"
ENV_KUBELET_REGISTRAR_DIR = "KUBELET_REGISTRAR_DIRECTORY_PATH"
ENV_KUBELET_PLUGINS_DIR = "KUBELET_PLUGINS_DIRECTORY_PATH"
ENV_DRIVER_ROOT_CTR_PATH = "DRIVER_ROOT_CTR_PATH"
ENV_HEALTHCHECK_PORT = "HEALTHCHECK_PORT"
ENV_IMEX_HOST_SOCKET_PATH = "IMEX_HOST_SOCKET_PATH"
ENV_GPU_CLIQUE_LABEL_ENABLED = ("GPU_CLIQUE_LABEL_ENABLED", "OWN_CLIQUE_LABEL")
ENV_PREPARE_TIMEOUT = "PREPARE_TIMEOUT"
EVENT_REASON_CHANNEL_NOT_INJECTED = "IMEXChannelNotInjected"  # non-fabric node
EVENT_REASON_WAITING_FOR_DAEMON = "WaitingForIMEXDaemon"
EVENT_REASON_HOST_IMEX_NOT_READY = "HostIMEXDaemonNotReady"

# --- cdriver.kube (API connection settings) --------------------------------------------
ENV_KUBECONFIG = "KUBECONFIG"
ENV_KUBERNETES_SERVICE_HOST = "KUBERNETES_SERVICE_HOST"  # set in every pod: the API Service
ENV_KUBERNETES_SERVICE_PORT = "KUBERNETES_SERVICE_PORT"
#: A pod's mounted service account: ``token`` (projected, rotated by the kubelet), ``ca.crt``.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_TOKEN_NAME = "token"
SERVICE_ACCOUNT_CA_NAME = "ca.crt"
#: Seconds a bearer token read from a file is reused before the file is read again.
TOKEN_FILE_REFRESH_SECONDS = 60.0
