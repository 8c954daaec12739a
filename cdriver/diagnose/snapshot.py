"""Read-only views over a snapshot: the plain dicts the API returned, and the time they were read.

A snapshot is a dict with ``now`` (RFC 3339), ``driverNamespace``, ``forbidden`` ("kind" or
"kind/namespace" -> the API's message for every list RBAC refused), ``exec`` ("ns/pod" -> {rc, output}) and one
list of objects per kind: crds, deviceclasses, deployments, daemonsets, pods, nodes,
resourceslices, computedomains, cliques, resourceclaimtemplates, resourceclaims, events.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cdriver.api import constants
from cdriver.diagnose import names
from cdriver.kube.objects import labels_of, meta_of, name_of, namespace_of

#: The driver's CustomResourceDefinitions, by object name.
CRD_NAMES = (f"{constants.PLURAL_COMPUTE_DOMAINS}.{constants.GROUP}",
             f"{constants.PLURAL_COMPUTE_DOMAIN_CLIQUES}.{constants.GROUP}")
KINDS = ("crds", "deviceclasses", "deployments", "daemonsets", "pods", "nodes", "resourceslices",
         "computedomains", "cliques", "resourceclaimtemplates", "resourceclaims", "events")

#: Labels the chart puts on its own workloads.
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT_CONTROLLER = "controller"
COMPONENT_PLUGIN = "kubelet-plugin"
ENV_IMEX_MODE = "IMEX_MODE"


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class Snapshot:
    """Lookups over one snapshot dict; nothing here talks to the API."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.now = parse_time(data.get("now")) or dt.datetime.now(dt.UTC)
        self.forbidden: dict[str, str] = dict(data.get("forbidden") or {})
        self.exec: dict[str, dict] = dict(data.get("exec") or {})
        self.exec_enabled = bool(data.get("execEnabled"))

    def refused(self, kind: str, namespace: str = "") -> str:
        """RBAC's message if listing `kind` (in `namespace`, or cluster-wide) was refused, else ''."""
        return (self.forbidden.get(f"{kind}/{namespace}", "") if namespace else "") or self.forbidden.get(kind, "")

    def items(self, kind: str) -> list[dict]:
        return list(self.data.get(kind) or [])

    @property
    def driver_namespace(self) -> str:
        return str(self.data.get("driverNamespace") or "")

    # -- time ------------------------------------------------------------------------------
    def age(self, obj: dict) -> float:
        """Seconds since the object was created (0 when unknown)."""
        created = parse_time(meta_of(obj).get("creationTimestamp"))
        return max(0.0, (self.now - created).total_seconds()) if created else 0.0

    def since(self, timestamp: str | None) -> float:
        when = parse_time(timestamp)
        return max(0.0, (self.now - when).total_seconds()) if when else 0.0

    # -- lookups ---------------------------------------------------------------------------
    def find(self, kind: str, name: str, namespace: str = "") -> dict | None:
        for obj in self.items(kind):
            if name_of(obj) == name and (not namespace or namespace_of(obj) == namespace):
                return obj
        return None

    def node(self, name: str) -> dict | None:
        return self.find("nodes", name)

    def pods_in(self, namespace: str) -> list[dict]:
        return [p for p in self.items("pods") if namespace_of(p) == namespace]

    def controller(self) -> dict | None:
        """The driver's controller Deployment (chart label + its IMEX_MODE env)."""
        for dep in self.items("deployments"):
            if labels_of(dep).get(LABEL_COMPONENT) == COMPONENT_CONTROLLER and _env(dep, ENV_IMEX_MODE) is not None:
                return dep
        return None

    def mode(self) -> str:
        """driverManaged or hostManaged, from the controller's environment (DeviceClasses as fallback)."""
        dep = self.controller()
        value = _env(dep, ENV_IMEX_MODE) if dep else None
        if value:
            return value
        if self.items("deviceclasses") and not self.find("deviceclasses", constants.DEVICE_CLASS_DAEMON):
            return names.IMEX_MODE_HOST_MANAGED
        return names.IMEX_MODE_DRIVER_MANAGED

    def plugin_pod(self, node: str) -> dict | None:
        for pod in self.pods_in(self.driver_namespace):
            if labels_of(pod).get(LABEL_COMPONENT) == COMPONENT_PLUGIN and pod_node(pod) == node:
                return pod
        return None

    def slices_of(self, node: str) -> list[dict]:
        specs = [(s, s.get("spec") or {}) for s in self.items("resourceslices")]
        return [s for s, spec in specs if spec.get("driver") == constants.DRIVER_NAME and spec.get("nodeName") == node]

    def fabric_nodes(self) -> list[str]:
        """Nodes labelled with a non-empty NVLink clique (what GPU feature discovery sets)."""
        return sorted(name_of(n) for n in self.items("nodes") if labels_of(n).get(constants.LABEL_NODE_CLIQUE))

    def events_about(self, name: str, namespace: str = "", kind: str = "") -> list[dict]:
        """Events about one object, oldest first."""
        out = []
        for ev in self.items("events"):
            ref = ev.get("involvedObject") or ev.get("regarding") or {}
            if ref.get("name") != name or (namespace and ref.get("namespace", namespace) != namespace):
                continue
            if kind and ref.get("kind") and ref.get("kind") != kind:
                continue
            out.append(ev)
        return sorted(out, key=event_last_time)

    def claim(self, name: str, namespace: str) -> dict | None:
        return self.find("resourceclaims", name, namespace)


def _env(deployment: dict, key: str) -> str | None:
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    for ctr in containers:
        for env in ctr.get("env") or []:
            if env.get("name") == key:
                return str(env.get("value") or "")
    return None


def event_last_time(ev: dict) -> str:
    series = ev.get("series") or {}
    return str(ev.get("lastTimestamp") or series.get("lastObservedTime") or ev.get("eventTime")
               or ev.get("firstTimestamp") or meta_of(ev).get("creationTimestamp") or "")


def event_count(ev: dict) -> int:
    return int(ev.get("count") or (ev.get("series") or {}).get("count") or 1)


def event_line(ev: dict) -> str:
    count = event_count(ev)
    times = f" (x{count})" if count > 1 else ""
    return f"Event {ev.get('type', 'Normal')} {ev.get('reason', '')}{times}: {str(ev.get('message', ''))[:300]}"


def pod_node(pod: dict) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def pod_phase(pod: dict) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def pod_restarts(pod: dict) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def pod_waiting(pod: dict) -> str:
    """The first container's waiting reason (ContainerCreating, CrashLoopBackOff ...), or ''."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            return str(waiting.get("reason") or "")
    return ""


def pod_ip(pod: dict) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def allocation_results(claim: dict) -> list[dict]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def claim_node(claim: dict) -> str:
    """The node an allocated claim is bound to (from its allocation's node selector)."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return str(field_["values"][0])
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == "kubernetes.io/hostname" and expr.get("values"):
                return str(expr["values"][0])
    return ""


def template_domain_id(template: dict) -> str:
    """domainID of a ResourceClaimTemplate's opaque channel/daemon config, or ''."""
    spec = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
    for cfg in spec.get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if params.get("domainID"):
            return str(params["domainID"])
    return ""
