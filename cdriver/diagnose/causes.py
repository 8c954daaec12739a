"""Likely causes per boundary: the troubleshooting table, keyed by link.

Each entry says what usually breaks at that boundary; the link checks add the specific
evidence and a next command.
"""

from __future__ import annotations

CAUSES: dict[str, list[str]] = {
    "installation": [
        "the chart was installed without resources.computeDomains.enabled, or not at all",
        "the controller Deployment is scaled to 0, crashing, or not scheduled",
        "a DeviceClass or CRD is missing or served at another API version",
    ],
    "resourceslices": [
        "the kubelet plugin is not running or not registered on that node",
        "IMEX channel discovery failed (no nvidia-caps-imex-channels in the driver's /proc/devices)",
        "the plugin DaemonSet's nodeSelector/affinity leaves the node out",
    ],
    "computedomain": [
        "the controller has not reconciled the ComputeDomain (controller down, RBAC)",
        "spec.numNodes is larger than the nodes that can ever join (set numNodes: 0)",
        "deletion is held by a finalizer another party owns",
        "the domain is being deleted: pods whose channel claim was not prepared before get none (delete them)",
    ],
    "template": [
        "a ResourceClaimTemplate with the same name already exists in the namespace (name conflict)",
        "the controller lacks RBAC to create templates, or failed rendering them",
        "the ComputeDomain is being deleted (finalizer state)",
    ],
    "workload": [
        "no pod refers to the ComputeDomain's ResourceClaimTemplate",
        "the pod lists the claim in spec.resourceClaims but no container lists it in resources.claims",
    ],
    "allocation": [
        "the scheduler found no node whose ResourceSlice offers channel-0 (pool, node affinity)",
        "every node the pod may use is held by another ComputeDomain (its shared channel-0 names that domain "
        "in the computeDomain attribute)",
        "the DeviceClass the template asks for is missing",
        "the pod landed on a node that is not attached to an NVLink fabric (no nvidia.com/gpu.clique)",
    ],
    "node-label": [
        "Prepare has not run yet on the node (expected while the pod is being set up)",
        "the node label was removed by hand, or another ComputeDomain holds the node",
    ],
    "daemon": [
        "zero daemon pods is expected until a workload Prepare labels a node",
        "a node-label/selector mismatch after allocation",
        "the daemon claim could not be prepared (CDI, daemon DeviceClass, ResourceSlice daemon-0)",
        "nvidia-imex failed at start (port in use, bad config) or the pod crash-loops",
    ],
    "clique": [
        "clique ID discovery or the daemon's API access (RBAC) failed",
        "peer configuration, the nvidia-imex process or its readiness probe failed",
        "a stale entry of a replaced daemon",
    ],
    "host-socket": [
        "the host nvidia-imex service is not running or not READY",
        "the plugin looks for the command socket at another path (imex.hostSocketPath) or driver root",
    ],
    "cdi": [
        "global Ready is not local readiness: Prepare waits for the node's own daemon or host socket",
        "the node is not fabric-attached, so the claim was prepared without channel devices",
        "another claim holds the same channel on this node (node-local checkpoint ownership)",
        "the runtime does not apply CDI edits",
    ],
    "device": [
        "non-fabric placement, or the container does not reference the claim",
        "the CDI spec is not visible to the runtime, or the runtime lacks CDI support",
    ],
}
