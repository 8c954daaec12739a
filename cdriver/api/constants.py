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
