"""The upstream contract: names that existing manifests, clusters and nodes depend on.

CRD group and kinds, labels, finalizer, driver and DeviceClass names, generated object names,
the names of the chart's Deployment, DaemonSet, Lease, containers and selector label,
CDI vendor and kinds, and the environment the chart, the controller's DaemonSet and the
kubelet plugin's CDI edits give the driver's containers. Every other constant lives with the
module that uses it (kubelet paths in `cdriver.dra.registration`, IMEX files and ports in
`cdriver.imex.config`, NVIDIA driver files in `cdriver.nvml.discover`, role settings in each
role).
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
#: Attribute of a shared channel device naming the ComputeDomain (UID) that holds its node.
ATTRIBUTE_COMPUTE_DOMAIN = "computeDomain"


def channel_domain_selector(domain_uid: str) -> str:
    """CEL selector of a domain's channel claims: a channel no domain holds, or this one's."""
    attrs = f'device.attributes["{DRIVER_NAME}"]'
    return f'!("{ATTRIBUTE_COMPUTE_DOMAIN}" in {attrs}) || {attrs}.{ATTRIBUTE_COMPUTE_DOMAIN} == "{domain_uid}"'
DEVICE_DAEMON_0 = "daemon-0"
ALLOCATION_MODE_SINGLE = "Single"
ALLOCATION_MODE_ALL = "All"
ALLOCATION_MODES = (ALLOCATION_MODE_SINGLE, ALLOCATION_MODE_ALL)

# --- Labels, finalizer ---------------------------------------------------------------
LABEL_COMPUTE_DOMAIN = "resource.nvidia.com/computeDomain"
LABEL_CLIQUE_ID = "resource.nvidia.com/computeDomain.cliqueID"
#: cdriver's label on each ComputeDomain it reconciles: the domain's own UID, so that a kubelet
#: plugin can watch the one domain its claims name instead of every domain of the cluster.
LABEL_DOMAIN_UID = "resource.nvidia.com/computeDomainUID"
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

# --- The chart's objects: upstream's names, which users' selectors and scripts use -----
UPSTREAM_CHART_NAME = "dra-driver-nvidia-gpu"
LABEL_COMPONENT = f"{UPSTREAM_CHART_NAME}-component"
COMPONENT_CONTROLLER = "controller"
COMPONENT_KUBELET_PLUGIN = "kubelet-plugin"
CONTROLLER_DEPLOYMENT = f"{UPSTREAM_CHART_NAME}-controller"  # also its leader-election Lease
KUBELET_PLUGIN_DAEMONSET = f"{UPSTREAM_CHART_NAME}-kubelet-plugin"
CONTAINER_CONTROLLER = "compute-domain"
CONTAINER_KUBELET_PLUGIN = "compute-domains"


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

# --- Environment of the driver's containers ------------------------------------------
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
