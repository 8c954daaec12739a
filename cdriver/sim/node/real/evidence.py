"""What shows that a (re)started kubelet is at work: pure readings of API objects and of the
kubelet's own metrics, for `RealNode.wait_ready` and `RealNode.wait_pods_synced`.

A Node stays Ready for a while after its kubelet stops, and a kubelet that finds its pods
running writes no pod status (nothing changed), so neither says that a new kubelet has looked
at its pods. What does:

- the node's Lease in ``kube-node-lease``, renewed by the kubelet every few seconds: a
  ``renewTime`` after the kubelet process started is that process's heartbeat;
- the kubelet's metrics (its ``/metrics``, through the API server's node proxy), counted by
  that process since it started: ``kubelet_pod_worker_duration_seconds_count`` counts the pod
  syncs it finished, by kind (``create`` for a pod's first sync, when it decides to keep or
  replace the pod's containers, ``sync`` for the periodic resync of every pod and what its
  pod lifecycle events trigger), and ``kubelet_started_containers_total`` the containers it
  started.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

#: one sample of the Prometheus text format: name, optional {labels}, value
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

POD_SYNCS = "kubelet_pod_worker_duration_seconds_count"
STARTED_CONTAINERS = "kubelet_started_containers_total"
TERMINAL_PHASES = ("Succeeded", "Failed")


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value)."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(2) or "")), value))
    return samples


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    return sum(value for n, have, value in samples
               if n == name and all(have.get(k) == v for k, v in labels.items()))


def timestamp(value: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the API writes it (``...Z``), or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def lease_renewed_since(lease: dict | None, since: float) -> bool:
    """Whether the Lease was renewed at or after `since` (epoch seconds)."""
    renewed = timestamp(((lease or {}).get("spec") or {}).get("renewTime"))
    return renewed is not None and renewed >= since


def live_pods(pods: list[dict], node: str) -> list[dict]:
    """The pods bound to `node` that are not finished."""
    return [p for p in pods if (p.get("spec") or {}).get("nodeName") == node
            and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]


def containers_started_since(pods: list[dict], since: float) -> int:
    """How many containers of `pods` (init, regular, ephemeral) the API shows started at or after
    `since`; the API keeps whole seconds, so a start within the second of `since` is not counted."""
    count = 0
    for pod in pods:
        status: dict[str, Any] = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
            for container in status.get(key) or []:
                state = container.get("state") or {}
                started = timestamp((state.get("running") or state.get("terminated") or {}).get("startedAt"))
                if started is not None and started >= since:
                    count += 1
    return count


def pods_synced(samples: list[tuple[str, dict[str, str], float]], started: float, pods: list[dict]) -> str:
    """Why the kubelet that started at `started` (its metrics: `samples`) has not yet shown that it
    synced `pods`, or "" once it has: it finished at least two syncs per pod, of which at least one
    per pod is a resync (each pod's first sync and then its periodic one), and the API shows as
    many containers started since `started` as the kubelet says it started (none, when it kept
    them: a container it replaced shows with its new ID by then)."""
    n = len(pods)
    syncs, resyncs = total(samples, POD_SYNCS), total(samples, POD_SYNCS, operation_type="sync")
    if syncs < 2 * n or resyncs < n:
        return f"{syncs:.0f} pod syncs finished ({resyncs:.0f} resyncs) for {n} pods"
    kubelet_started = total(samples, STARTED_CONTAINERS)
    api_started = containers_started_since(pods, started)
    if api_started < kubelet_started:
        return f"the kubelet started {kubelet_started:.0f} containers, the API shows {api_started} yet"
    return ""
