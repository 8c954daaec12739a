"""Names diagnose reads that are the driver's own, not the upstream contract: IMEX modes, Event
reasons the roles record, container and service names, and the channel device directory."""

from __future__ import annotations

IMEX_MODE_DRIVER_MANAGED = "driverManaged"
IMEX_MODE_HOST_MANAGED = "hostManaged"
CONDITION_READY = "Ready"
CONDITION_READY_TO_START = "PodReadyToStartContainers"  # kubelet's: the pod's sandbox exists
REASON_DELETION_WAITS = "DeletionWaitsForWorkloads"  # the controller's Ready reason
#: What the kubelet plugin answers for a channel claim of a domain being deleted (or gone).
PREPARE_DOMAIN_DELETING = "is being deleted; delete the pods that use its channel claim"
PREPARE_DOMAIN_GONE = "not found; it was deleted"

# Event reasons the roles record.
EVENT_IMEX_START_FAILED = "IMEXDaemonStartFailed"
EVENT_IMEX_PORT_CONFLICT = "IMEXPortConflict"
EVENT_IMEX_RESTARTED = "IMEXDaemonRestarted"
EVENT_CHANNEL_NOT_INJECTED = "IMEXChannelNotInjected"
EVENT_WAITING_FOR_DAEMON = "WaitingForIMEXDaemon"
EVENT_HOST_IMEX_NOT_READY = "HostIMEXDaemonNotReady"
EVENT_FAILED_PREPARE = "FailedPrepareDynamicResources"  # kubelet's
EVENT_FAILED_SCHEDULING = "FailedScheduling"  # kube-scheduler's

DAEMON_CONTAINER = "compute-domain-daemon"
HOST_IMEX_SERVICE = "nvidia-imex.service"
IMEX_CTL = "nvidia-imex-ctl"
CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
CHANNEL_0_PATH = f"{CHANNELS_DIR}/channel0"
