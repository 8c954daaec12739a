"""API objects for tests that drive a role against the real API server: ComputeDomains (the
bodies of `cdriver.sim.world.scenario.compute_domain`), opaque configs, allocated and reserved
ResourceClaims, clique entries, and the evidence read back (node label, ResourceSlices)."""

from __future__ import annotations

import uuid

from cdriver.api import constants
from cdriver.api.constants import (
    API_VERSION,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    KIND_DAEMON_CONFIG,
    LABEL_CLIQUE_ID,
    LABEL_COMPUTE_DOMAIN,
    clique_object_name,
)
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.kube.objects import uid_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.sim.world.scenario import compute_domain
from tests.support.plugin_process import CLUSTER_UUID, SimNode

CDS, CLIQUES = COMPUTE_DOMAINS, COMPUTE_DOMAIN_CLIQUES
CLAIMS, SLICES = RESOURCES["resourceclaims"], RESOURCES["resourceslices"]
NODES, PODS = RESOURCES["nodes"], RESOURCES["pods"]


def make_cd(raw: RawClient, namespace: str, mode: str = "Single", labelled: bool = True) -> dict:
    """A created ComputeDomain of a random name, its workload template named `<name>-channel`;
    `labelled`: with the UID label cdriver's controller puts on every domain it reconciles (no
    controller runs in these tests)."""
    name = f"cd-{uuid.uuid4().hex[:6]}"
    cd = raw.create(CDS, compute_domain(name, namespace, f"{name}-channel", mode), namespace)
    if not labelled:
        return cd
    return raw.patch(CDS, name, {"metadata": {"labels": {constants.LABEL_DOMAIN_UID: uid_of(cd)}}}, namespace)


def channel_params(cd: dict, mode: str = "Single") -> dict:
    """The opaque config of a channel claim of `cd`."""
    return {"apiVersion": API_VERSION, "kind": KIND_CHANNEL_CONFIG, "domainID": cd["metadata"]["uid"],
            "allocationMode": mode}


def daemon_params(cd: dict) -> dict:
    """The opaque config of a daemon claim of `cd`."""
    return {"apiVersion": API_VERSION, "kind": KIND_DAEMON_CONFIG, "domainID": cd["metadata"]["uid"]}


def allocated_claim(raw: RawClient, namespace: str, node_name: str, params: dict, device: str = "channel-0",
                    request: str = "channel") -> dict:
    """A ResourceClaim allocated to ``device`` on the node, as the scheduler would record it."""
    dev_class = DEVICE_CLASS_DAEMON if device.startswith("daemon") else DEVICE_CLASS_DEFAULT_CHANNEL
    config = [{"requests": [request], "opaque": {"driver": DRIVER_NAME, "parameters": params}}]
    claim = raw.create(CLAIMS, {
        "metadata": {"name": f"claim-{uuid.uuid4().hex[:6]}", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": dev_class}}],
                             "config": config}},
    }, namespace)
    claim["status"] = {"allocation": {
        "devices": {"results": [{"request": request, "driver": DRIVER_NAME, "pool": node_name,
                                 "device": device}],
                    "config": [{"source": "FromClaim", **config[0]}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
    }}
    return raw.update_status(CLAIMS, claim, namespace)


def reserve_for_daemon_pod(raw: RawClient, claim: dict, cd: dict, owner: str | None = None) -> dict:
    """Reserve ``claim`` for a pod controlled by a DaemonSet (by default the domain's daemon
    DaemonSet), as the scheduler does for a daemon pod. Neither DaemonSet nor pod is ever
    scheduled: both select a node label no node has."""
    ns = claim["metadata"]["namespace"]
    never = {"cdriver-test/never": "true"}
    match = {"app": f"ds-{uuid.uuid4().hex[:6]}"}
    ds = raw.create(RESOURCES["daemonsets"], {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": owner or constants.daemon_object_name(uid_of(cd)), "namespace": ns},
        "spec": {"selector": {"matchLabels": match}, "template": {
            "metadata": {"labels": match},
            "spec": {"nodeSelector": never, "containers": [{"name": "c", "image": "none"}]}}}}, ns)
    pod = raw.create(PODS, {"metadata": {
        "name": f"{ds['metadata']['name'][:40]}-{uuid.uuid4().hex[:5]}", "namespace": ns, "labels": match,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                             "uid": uid_of(ds), "controller": True}]},
        "spec": {"nodeSelector": never, "containers": [{"name": "c", "image": "none"}]}}, ns)
    claim = raw.get(CLAIMS, claim["metadata"]["name"], ns)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"], "uid": uid_of(pod)}]
    return raw.update_status(CLAIMS, claim, ns)


def set_clique_ready(raw: RawClient, driver_ns: str, cd: dict, node: SimNode, status: str = "Ready") -> None:
    """Stand in for `node`'s IMEX daemon: its entry in the clique object of `cd`, with `status`."""
    name = clique_object_name(cd["metadata"]["uid"], f"{CLUSTER_UUID}.3")
    daemons = [{"nodeName": node.name, "ipAddress": "127.0.0.1", "cliqueID": f"{CLUSTER_UUID}.3", "index": 0,
                "status": status}]
    existing = raw.get_or_none(CLIQUES, name, driver_ns)
    if existing is None:
        # labelled as the daemons (cdriver's and upstream's) label it: the plugin watches its clique's only
        labels = {LABEL_COMPUTE_DOMAIN: cd["metadata"]["uid"], LABEL_CLIQUE_ID: f"{CLUSTER_UUID}.3"}
        raw.create(CLIQUES, {"apiVersion": API_VERSION, "kind": KIND_COMPUTE_DOMAIN_CLIQUE,
                             "metadata": {"name": name, "namespace": driver_ns, "labels": labels},
                             "daemons": daemons}, driver_ns)
    else:
        existing["daemons"] = daemons
        raw.update(CLIQUES, existing, driver_ns)


def node_label(raw: RawClient, node: SimNode) -> str | None:
    """The ComputeDomain label of the node (None: none)."""
    return ((raw.get(NODES, node.name).get("metadata") or {}).get("labels") or {}).get(LABEL_COMPUTE_DOMAIN)


def our_slices(raw: RawClient, node: SimNode) -> list[dict]:
    """The driver's ResourceSlices of the node."""
    return raw.list(SLICES, field_selector=f"spec.driver={DRIVER_NAME},spec.nodeName={node.name}")["items"]
