"""The convergence invariants catch each kind of drift between the API and a node's files."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cdriver.api import constants
from tests.reliability.invariants import violations

DOMAIN, CLAIM, POD, NODE = "dom-uid", "claim-uid", "pod-uid", "node-a"


def daemon_pod() -> dict[str, Any]:
    """The domain's IMEX daemon pod on node-a, Running and Ready."""
    return {"metadata": {"name": "daemon-a", "namespace": "cdriver-system", "uid": "daemon-uid",
                         "labels": {constants.LABEL_COMPUTE_DOMAIN: DOMAIN, constants.LABEL_CLIQUE_ID: "clique-1"}},
            "spec": {"nodeName": NODE},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def healthy() -> dict[str, Any]:
    """One domain, one running workload pod on node-a with its prepared channel."""
    claim = {
        "metadata": {"name": "w-channel", "namespace": "ns", "uid": CLAIM},
        "status": {"reservedFor": [{"resource": "pods", "name": "w", "uid": POD}],
                   "allocation": {"devices": {
                       "results": [{"driver": constants.DRIVER_NAME, "pool": NODE, "device": "channel-0",
                                    "request": "channel"}],
                       "config": [{"opaque": {"driver": constants.DRIVER_NAME, "parameters": {
                           "kind": constants.KIND_CHANNEL_CONFIG, "domainID": DOMAIN}}}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}}
    pod = {"metadata": {"name": "w", "namespace": "ns", "uid": POD},
           "spec": {"nodeName": NODE},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "resourceClaimStatuses": [{"name": "channel", "resourceClaimName": "w-channel"}]}}
    return {
        "driverNamespace": "cdriver-system",
        "computedomains": [{"metadata": {"name": "cd", "namespace": "ns", "uid": DOMAIN}}],
        "pods": [pod, daemon_pod()], "resourceclaims": [claim],
        "nodes": [{"metadata": {"name": NODE, "labels": {constants.LABEL_COMPUTE_DOMAIN: DOMAIN}}},
                  {"metadata": {"name": "node-b", "labels": {}}}],
        "daemonsets": [{"metadata": {"name": f"computedomain-daemon-{DOMAIN}", "namespace": "cdriver-system",
                                     "labels": {constants.LABEL_COMPUTE_DOMAIN: DOMAIN}}}],
        "cliques": [{"metadata": {"name": f"{DOMAIN}.clique-1", "namespace": "cdriver-system"},
                     "daemons": [{"nodeName": NODE, "cliqueID": "clique-1", "status": "Ready"}]}],
        "nodeFiles": {NODE: {"checkpoint": {CLAIM: {"state": "PrepareCompleted", "name": "w-channel",
                                                    "namespace": "ns", "domainID": DOMAIN,
                                                    "devices": [{"device_name": "channel-0"}]}},
                             "cdiClaims": [CLAIM], "domainDirs": [DOMAIN]},
                      "node-b": {"checkpoint": {}, "cdiClaims": [], "domainDirs": []}},
    }


def test_a_consistent_cluster_has_no_violations() -> None:
    assert violations(healthy()) == []


def broken(change: str) -> dict[str, Any]:
    data = copy.deepcopy(healthy())
    files = data["nodeFiles"][NODE]
    if change == "checkpoint record missing":
        files["checkpoint"] = {}
        files["cdiClaims"] = []
    elif change == "CDI spec missing":
        files["cdiClaims"] = []
    elif change == "CDI spec orphaned":
        data["nodeFiles"]["node-b"]["cdiClaims"] = ["gone-uid"]
    elif change == "label of a deleted domain":
        data["nodes"][1]["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] = "old-uid"
    elif change == "label without a claim":
        data["nodes"][1]["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] = DOMAIN
    elif change == "domain deleted under its objects":
        data["computedomains"] = []
    elif change == "channel prepared twice":
        data["nodeFiles"][NODE]["checkpoint"]["other"] = dict(files["checkpoint"][CLAIM])
    elif change == "deletion stuck":
        data["computedomains"][0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elif change == "unreadable checkpoint":
        data["nodeFiles"]["node-b"] = {"checkpointError": "checksum mismatch"}
    elif change == "claim on another node":
        data["pods"][0]["spec"]["nodeName"] = "node-b"
    elif change == "IMEX daemon not ready":
        data["pods"][1]["status"]["conditions"][0]["status"] = "False"
    elif change == "IMEX daemon gone":
        del data["pods"][1]
    elif change == "clique entry not ready":
        data["cliques"][0]["daemons"][0]["status"] = "NotReady"
    elif change == "clique entry missing":
        data["cliques"][0]["daemons"] = []
    return data


@pytest.mark.parametrize(("change", "expected"), [
    ("checkpoint record missing", "is absent in the checkpoint"),
    ("CDI spec missing", "has no CDI spec on the node"),
    ("CDI spec orphaned", "CDI spec of claim gone-uid that no longer exists"),
    ("label of a deleted domain", "labelled for domain old-uid, which does not exist"),
    ("label without a claim", "node-b is labelled for domain dom-uid but holds none of its claims"),
    ("domain deleted under its objects", "daemonsets cdriver-system/computedomain-daemon-dom-uid of domain dom-uid"),
    ("channel prepared twice", "channel-0 of node-a is owned by 2 claims"),
    ("deletion stuck", "computedomains ns/cd is still being deleted"),
    ("unreadable checkpoint", "node-b: checkpoint unreadable: checksum mismatch"),
    ("claim on another node", "claim w-channel is allocated on 'node-a'"),
    ("IMEX daemon not ready", "no Running and Ready IMEX daemon pod of domain dom-uid on the node"),
    ("IMEX daemon gone", "no Running and Ready IMEX daemon pod of domain dom-uid on the node"),
    ("clique entry not ready", "clique dom-uid.clique-1 lists the node's IMEX daemon as NotReady"),
    ("clique entry missing", "clique dom-uid.clique-1 lists the node's IMEX daemon as absent"),
])
def test_each_kind_of_drift_is_named(change: str, expected: str) -> None:
    found = violations(broken(change))
    assert any(expected in line for line in found), found
