"""What the containers themselves show, as pure functions over one snapshot.

`tests.reliability.cluster.look_inside` execs into containers as a user would (``kubectl
exec``, through the API server and the node's kubelet API) and adds what it read to the
snapshot dict::

    {"inPods": {"<ns>/<pod>": {"channels": ["channel0", ...]}     # char devices in the channel dir
                              | {"error": "<why it could not be read>"}},
     "imexDomains": {"<ns>/<daemon pod>": {"status": "UP", "nodes": {...}}   # nvidia-imex-ctl -N -j
                                         | {"error": "..."}}}

`probes` says which containers to read: every running workload with a channel, and the IMEX
daemon serving it on its node. The checks compare what was read with the API's allocations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdriver.api import constants
from cdriver.diagnose.snapshot import Snapshot
from cdriver.imex.config import IMEX_CTL_BINARY, IMEXD_CONFIG
from cdriver.kube.objects import labels_of, name_of, namespace_of
from cdriver.nvml.discover import IMEX_CHANNELS_DEV_DIR
from cdriver.sim.imex.protocol import IMEX_DOMAIN_UP
from tests.reliability.invariants import (
    Check,
    channel_claims,
    daemon_pods_of,
    driver_results,
    running,
    running_workloads,
    serving_daemons,
)

#: What a workload container runs to list its channels, and a daemon container to report its domain.
LIST_CHANNELS = ["ls", "-l", IMEX_CHANNELS_DEV_DIR]
QUERY_DOMAIN = [IMEX_CTL_BINARY, "-c", IMEXD_CONFIG, "-N", "-j"]


@dataclass(frozen=True)
class Probes:
    """The containers to read: workload pods (channels) and daemon pods (IMEX domain), as (ns, name)."""

    workloads: tuple[tuple[str, str], ...]
    daemons: tuple[tuple[str, str], ...]


def key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def probes(snap: Snapshot) -> Probes:
    """Every running workload with a channel, and the Ready daemon pod on its node for its domain."""
    workloads = {(namespace_of(p), name_of(p)) for p in running_workloads(snap) if channel_claims(snap, p)}
    daemons = set()
    for pod, domain in serving_daemons(snap):
        ready = [d for d in daemon_pods_of(snap, domain, str(pod["spec"].get("nodeName") or "")) if running(d)]
        daemons.update((namespace_of(d), name_of(d)) for d in ready[:1])
    return Probes(tuple(sorted(workloads)), tuple(sorted(daemons)))


def channel_file(device: str) -> str:
    """The file a channel device (``channel-N``) appears as in a container (``channelN``)."""
    return "channel" + device.split("-", 1)[1] if device.startswith("channel-") else device


def parse_channel_listing(rc: int, output: str) -> dict[str, Any]:
    """`ls -l` of the channel directory: the character devices in it, or why it could not be read."""
    if rc != 0:
        return {"error": f"ls -l {IMEX_CHANNELS_DEV_DIR} exited {rc}: {output.strip()[:200]}"}
    names = [line.split()[-1] for line in output.splitlines() if line.startswith("c")]
    return {"channels": sorted(names)}


def parse_domain_report(rc: int, output: str) -> dict[str, Any]:
    """`nvidia-imex-ctl -N -j`: the domain document, or why there is none."""
    if rc != 0:
        return {"error": f"{' '.join(QUERY_DOMAIN)} exited {rc}: {output.strip()[:200]}"}
    try:
        doc = json.loads(output)
    except ValueError:
        return {"error": f"{' '.join(QUERY_DOMAIN)} printed no JSON: {output.strip()[:200]}"}
    return doc if isinstance(doc, dict) else {"error": f"unexpected report {output.strip()[:200]}"}


# -- the checks --------------------------------------------------------------------------------
def containers_see_their_channel(snap: Snapshot) -> list[str]:
    """Each workload container read sees exactly its claims' channels, as character devices."""
    out = []
    for name, seen in sorted((snap.data.get("inPods") or {}).items()):
        ns, pod_name = name.split("/", 1)
        pod = snap.find("pods", pod_name, ns)
        if pod is None or not running(pod):
            continue  # it stopped between the snapshot and the exec; the next round judges it
        wanted = sorted(channel_file(str(r.get("device"))) for c in channel_claims(snap, pod)
                        for r in driver_results(c) if str(r.get("device", "")).startswith("channel-"))
        if "error" in seen:
            out.append(f"pod {name}: cannot list its channels inside the container: {seen['error']}")
        elif seen.get("channels") != wanted:
            out.append(f"pod {name}: the container sees {seen.get('channels')} in {IMEX_CHANNELS_DEV_DIR}, "
                       f"its claims hold {wanted}")
    return out


def imex_domains_up(snap: Snapshot) -> list[str]:
    """Each daemon read reports its IMEX domain UP, with every daemon pod of its clique a member."""
    out = []
    for name, report in sorted((snap.data.get("imexDomains") or {}).items()):
        ns, pod_name = name.split("/", 1)
        pod = snap.find("pods", pod_name, ns)
        if pod is None:
            continue
        labels = labels_of(pod)
        peers = [d for d in daemon_pods_of(snap, labels.get(constants.LABEL_COMPUTE_DOMAIN, ""))
                 if labels_of(d).get(constants.LABEL_CLIQUE_ID) == labels.get(constants.LABEL_CLIQUE_ID)]
        if "error" in report:
            out.append(f"IMEX daemon {name}: {report['error']}")
        elif report.get("status") != IMEX_DOMAIN_UP:
            out.append(f"IMEX daemon {name}: nvidia-imex-ctl -N reports the domain {report.get('status')!r}: "
                       f"{json.dumps(report.get('nodes'))[:300]}")
        elif len(report.get("nodes") or {}) != len(peers):
            out.append(f"IMEX daemon {name}: the domain is UP with {len(report.get('nodes') or {})} node(s), "
                       f"its clique has {len(peers)} daemon pod(s)")
    return out


INSIDE: tuple[Check, ...] = (containers_see_their_channel, imex_domains_up)
