"""Snapshots for the diagnose unit tests: a healthy driver-managed domain on three fabric nodes
(two workload pods, one per node of the clique) that each test breaks at one boundary."""

from __future__ import annotations

import copy
from typing import Any

from cdriver.api import constants
from cdriver.diagnose import names

DRIVER_NS = "cdriver-system"
NS = "ml"
UID = "0d6a4b0e-2f7c-4c53-9b1a-6e0c1f2d3a4b"
CLIQUE = "4e5f.0"
NODES = ("node-0", "node-1", "node-2")
OLD = "2026-01-01T10:00:00Z"  # creation time of every object: long before NOW
NOW = "2026-01-01T11:00:00Z"
RECENT = "2026-01-01T10:59:50Z"  # ten seconds before NOW


def _meta(name: str, namespace: str = "", labels: dict | None = None, uid: str = "", **extra: Any) -> dict:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": OLD, "uid": uid or f"uid-{name}"}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    meta.update(extra)
    return meta


def _ready(ready: bool = True) -> list[dict]:
    return [{"type": "Ready", "status": "True" if ready else "False"}]


def _allocated(name: str, namespace: str, node: str, device: str, uid: str) -> dict:
    return {"metadata": _meta(name, namespace, uid=uid),
            "status": {"allocation": {
                "devices": {"results": [{"driver": constants.DRIVER_NAME, "pool": node, "device": device,
                                         "request": "channel"}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def workload_pod(name: str, node: str, claim: str, template: str = "cd-channel", use_claim: bool = True) -> dict:
    ctr: dict[str, Any] = {"name": "workload", "image": "ubuntu"}
    if use_claim:
        ctr["resources"] = {"claims": [{"name": "channel"}]}
    return {"metadata": _meta(name, NS, {"app": "w"}),
            "spec": {"nodeName": node, "containers": [ctr],
                     "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}]},
            "status": {"phase": "Running", "conditions": _ready(), "podIP": "10.0.0.9",
                       "containerStatuses": [{"name": "workload", "restartCount": 0, "state": {"running": {}}}],
                       "resourceClaimStatuses": [{"name": "channel", "resourceClaimName": claim}]}}


def daemon_pod(node: str, index: int) -> dict:
    name = f"computedomain-daemon-{index}"
    return {"metadata": _meta(name, DRIVER_NS, {constants.LABEL_COMPUTE_DOMAIN: UID}),
            "spec": {"nodeName": node, "containers": [{"name": names.DAEMON_CONTAINER}],
                     "resourceClaims": [{"name": "compute-domain-daemon",
                                         "resourceClaimTemplateName": constants.daemon_object_name(UID)}]},
            "status": {"phase": "Running", "conditions": _ready(), "podIP": f"10.0.1.{index}",
                       "containerStatuses": [{"name": names.DAEMON_CONTAINER, "restartCount": 0,
                                              "state": {"running": {}}}],
                       "resourceClaimStatuses": [{"name": "compute-domain-daemon",
                                                  "resourceClaimName": f"{name}-claim"}]}}


def healthy(mode: str = names.IMEX_MODE_DRIVER_MANAGED) -> dict[str, Any]:
    """Two workload pods Running on node-0 and node-1; every link holds."""
    host = mode == names.IMEX_MODE_HOST_MANAGED
    plugin_labels = {"app.kubernetes.io/component": "kubelet-plugin"}
    data: dict[str, Any] = {
        "now": NOW, "driverNamespace": DRIVER_NS, "forbidden": {}, "exec": {},
        "crds": [{"metadata": _meta(f"{p}.{constants.GROUP}"),
                  "spec": {"versions": [{"name": constants.VERSION, "served": True}]}}
                 for p in (constants.PLURAL_COMPUTE_DOMAINS, constants.PLURAL_COMPUTE_DOMAIN_CLIQUES)],
        "deviceclasses": [{"metadata": _meta(constants.DEVICE_CLASS_DEFAULT_CHANNEL)}]
        + ([] if host else [{"metadata": _meta(constants.DEVICE_CLASS_DAEMON)}]),
        "deployments": [{"metadata": _meta("cdriver-controller", DRIVER_NS,
                                           {"app.kubernetes.io/component": "controller"}),
                         "spec": {"replicas": 1, "template": {"spec": {"containers": [
                             {"name": "controller", "env": [{"name": "IMEX_MODE", "value": mode}]}]}}},
                         "status": {"readyReplicas": 1}}],
        "daemonsets": [] if host else [{"metadata": _meta(constants.daemon_object_name(UID), DRIVER_NS,
                                                          {constants.LABEL_COMPUTE_DOMAIN: UID}),
                                        "status": {"numberReady": 2, "desiredNumberScheduled": 2}}],
        "nodes": [{"metadata": _meta(n, labels={constants.LABEL_NODE_CLIQUE: CLIQUE,
                                                **({constants.LABEL_COMPUTE_DOMAIN: UID}
                                                   if i < 2 and not host else {})})}
                  for i, n in enumerate(NODES)],
        "resourceslices": [{"metadata": _meta(f"{n}-slice"),
                            "spec": {"driver": constants.DRIVER_NAME, "nodeName": n, "pool": {"name": n},
                                     "devices": [{"name": constants.DEVICE_CHANNEL_0}]
                                     + ([] if host else [{"name": constants.DEVICE_DAEMON_0}])}} for n in NODES],
        "computedomains": [{"metadata": _meta("cd", NS, uid=UID, finalizers=[constants.FINALIZER]),
                            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
                            "status": {"status": constants.STATUS_READY}}],
        "resourceclaimtemplates": [{"metadata": _meta("cd-channel", NS, {constants.LABEL_COMPUTE_DOMAIN: UID}),
                                    "spec": {"spec": {"devices": {
                                        "requests": [{"name": "channel", "exactly": {
                                            "deviceClassName": constants.DEVICE_CLASS_DEFAULT_CHANNEL}}],
                                        "config": [{"opaque": {"driver": constants.DRIVER_NAME, "parameters": {
                                            "kind": constants.KIND_CHANNEL_CONFIG, "domainID": UID}}}]}}}}],
        "pods": [], "resourceclaims": [], "cliques": [], "events": [],
    }
    for i, node in enumerate(NODES[:2]):
        claim = f"w{i}-channel-abc"
        data["pods"].append(workload_pod(f"w{i}", node, claim))
        data["resourceclaims"].append(_allocated(claim, NS, node, constants.DEVICE_CHANNEL_0, f"claim-uid-{i}"))
        if not host:
            data["pods"].append(daemon_pod(node, i))
            data["resourceclaims"].append(_allocated(f"computedomain-daemon-{i}-claim", DRIVER_NS, node,
                                                     constants.DEVICE_DAEMON_0, f"dclaim-uid-{i}"))
    for node in NODES:
        data["pods"].append({"metadata": _meta(f"plugin-{node}", DRIVER_NS, plugin_labels),
                             "spec": {"nodeName": node}, "status": {"phase": "Running", "conditions": _ready()}})
    if not host:
        data["cliques"].append({"metadata": _meta(constants.clique_object_name(UID, CLIQUE), DRIVER_NS),
                                "daemons": [{"nodeName": n, "ipAddress": f"10.0.1.{i}", "cliqueID": CLIQUE,
                                             "index": i, "status": constants.STATUS_READY}
                                            for i, n in enumerate(NODES[:2])]})
    return data


def find(data: dict, kind: str, name: str) -> dict:
    return next(o for o in data[kind] if o["metadata"]["name"] == name)


def drop(data: dict, kind: str, name: str) -> None:
    data[kind] = [o for o in data[kind] if o["metadata"]["name"] != name]


def event(obj: dict, reason: str, message: str, type_: str = "Warning", count: int = 1, last: str = NOW) -> dict:
    meta = obj["metadata"]
    return {"metadata": {"name": f"{meta['name']}.{reason}", "namespace": meta.get("namespace", "default")},
            "involvedObject": {"name": meta["name"], "namespace": meta.get("namespace", ""), "uid": meta["uid"]},
            "type": type_, "reason": reason, "message": message, "count": count,
            "firstTimestamp": OLD, "lastTimestamp": last}


def make_young(obj: dict) -> None:
    obj["metadata"]["creationTimestamp"] = RECENT


def clone(data: dict) -> dict:
    return copy.deepcopy(data)
