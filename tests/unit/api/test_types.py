"""Strict decoding of ComputeDomain, ComputeDomainClique and the opaque device configs."""

from __future__ import annotations

import copy

import pytest

from cdriver.api import constants
from cdriver.api.types import (
    ChannelConfig,
    CliqueDaemon,
    ComputeDomain,
    ComputeDomainClique,
    DaemonConfig,
    ValidationError,
    decode_opaque_config,
    validate_domain_id,
)

UID = "6f1c1a62-27b4-4ac9-9f0e-1d2b3c4d5e6f"


def cd_obj(**spec_overrides: object) -> dict:
    spec: dict = {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"},
                                             "allocationMode": "All"}}
    spec.update(spec_overrides)
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": "cd1", "namespace": "team", "uid": UID, "resourceVersion": "7",
                     "finalizers": [constants.FINALIZER]},
        "spec": spec,
        "status": {"status": "Ready", "nodes": [
            {"name": "node-a", "ipAddress": "10.0.0.1", "cliqueID": "uuid.1", "index": 0,
             "status": "Ready"},
        ]},
    }


def test_compute_domain_fields() -> None:
    cd = ComputeDomain.from_dict(cd_obj())
    assert (cd.name, cd.namespace, cd.uid) == ("cd1", "team", UID)
    assert cd.num_nodes == 2
    assert cd.channel_template_name == "imex-channel-0"
    assert cd.allocation_mode == constants.ALLOCATION_MODE_ALL
    assert cd.status == "Ready"
    assert cd.nodes[0].clique_id == "uuid.1" and cd.nodes[0].ip_address == "10.0.0.1"
    assert cd.finalizers == [constants.FINALIZER] and not cd.deleting
    assert cd.resource_version == "7"


def test_compute_domain_defaults() -> None:
    obj = cd_obj(channel={"resourceClaimTemplate": {"name": "t"}})
    del obj["spec"]["numNodes"]
    del obj["status"]
    cd = ComputeDomain.from_dict(obj)
    assert cd.allocation_mode == constants.ALLOCATION_MODE_SINGLE
    assert cd.num_nodes == 0
    assert cd.status == "" and cd.nodes == []


def test_node_entry_defaults_to_not_ready() -> None:
    obj = cd_obj()
    del obj["status"]["nodes"][0]["status"]
    assert ComputeDomain.from_dict(obj).nodes[0].status == constants.STATUS_NOT_READY


def test_to_dict_keeps_unknown_metadata_and_writes_status() -> None:
    obj = cd_obj()
    obj["metadata"]["annotations"] = {"keep": "me"}
    cd = ComputeDomain.from_dict(obj)
    cd.nodes[0].status = constants.STATUS_NOT_READY
    cd.status = constants.STATUS_NOT_READY
    out = cd.to_dict()
    assert out["metadata"]["annotations"] == {"keep": "me"}
    assert out["status"]["status"] == "NotReady"
    assert out["status"]["nodes"][0]["status"] == "NotReady"
    assert obj["status"]["status"] == "Ready"  # the source dict is untouched
    assert ComputeDomain.from_dict(out).nodes == cd.nodes


@pytest.mark.parametrize("mutate,fragment", [
    (lambda o: o["spec"].update(numNodes="2"), "field spec.numNodes: expected an integer"),
    (lambda o: o["spec"].update(numNodes=True), "field spec.numNodes: expected an integer"),
    (lambda o: o["spec"].update(numNodes=-1), "field spec.numNodes: must be >= 0"),
    (lambda o: o["spec"].update(extra=1), "field spec.extra: unknown field"),
    (lambda o: o["spec"].pop("channel"), "field spec.channel: is required"),
    (lambda o: o["spec"]["channel"].update(allocationMode="all"),
     "field spec.channel.allocationMode: must be one of Single, All"),
    (lambda o: o["spec"]["channel"]["resourceClaimTemplate"].update(name=3),
     "field spec.channel.resourceClaimTemplate.name: expected a string, got integer 3"),
    (lambda o: o["spec"]["channel"]["resourceClaimTemplate"].update(name=""),
     "field spec.channel.resourceClaimTemplate.name: must not be empty"),
    (lambda o: o["spec"]["channel"]["resourceClaimTemplate"].update(name="Not_A_Name"),
     "field spec.channel.resourceClaimTemplate.name: 'Not_A_Name' is not a valid Kubernetes object name"),
    (lambda o: o["spec"]["channel"]["resourceClaimTemplate"].update(name="a" * 254),
     "field spec.channel.resourceClaimTemplate.name: 254 characters, more than the 253"),
    (lambda o: o["spec"].update(numNodes=5001), "field spec.numNodes: must be <= 5000"),
    (lambda o: o["status"]["nodes"][0].update(index="0"),
     "field status.nodes[0].index: expected an integer"),
    (lambda o: o["status"]["nodes"][0].update(bogus=1),
     "field status.nodes[0].bogus: unknown field"),
    (lambda o: o["status"].update(status="Maybe"), "field status.status: must be one of"),
    (lambda o: o.update(spec=[]), "field spec: expected an object, got list"),
    (lambda o: o.update(kind="Pod"), "field kind: must be ComputeDomain"),
    (lambda o: o.update(specs={}), "field specs: unknown field"),
])
def test_compute_domain_rejects_bad_input(mutate, fragment: str) -> None:
    obj = copy.deepcopy(cd_obj())
    mutate(obj)
    with pytest.raises(ValidationError) as err:
        ComputeDomain.from_dict(obj)
    assert fragment in str(err.value)
    assert str(err.value).startswith("ComputeDomain team/cd1: ")


def test_compute_domain_rejects_non_object() -> None:
    with pytest.raises(ValidationError, match="expected an object, got string"):
        ComputeDomain.from_dict("cd1")


def clique_obj() -> dict:
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN_CLIQUE,
        "metadata": {"name": f"{UID}.uuid.1", "namespace": "driver"},
        "daemons": [
            {"nodeName": "node-a", "ipAddress": "10.0.0.1", "cliqueID": "uuid.1", "index": 0,
             "status": "Ready"},
            {"nodeName": "node-b", "ipAddress": "10.0.0.2", "cliqueID": "uuid.1", "index": 1},
        ],
    }


def test_clique_decodes_daemons_and_round_trips() -> None:
    clique = ComputeDomainClique.from_dict(clique_obj())
    assert clique.name == f"{UID}.uuid.1" and clique.namespace == "driver"
    assert clique.daemons[1] == CliqueDaemon("node-b", "10.0.0.2", "uuid.1", 1, "NotReady")
    assert clique.daemon("node-a").status == "Ready"
    assert clique.daemon("node-z") is None
    clique.daemons.append(CliqueDaemon("node-c", "10.0.0.3", "uuid.1", 2, "Ready"))
    again = ComputeDomainClique.from_dict(clique.to_dict())
    assert again.daemons == clique.daemons


def test_clique_without_daemons() -> None:
    obj = clique_obj()
    del obj["daemons"]
    clique = ComputeDomainClique.from_dict(obj)
    assert clique.daemons == []
    assert "daemons" not in clique.to_dict()


@pytest.mark.parametrize("mutate,fragment", [
    (lambda o: o["daemons"][0].pop("nodeName"), "field daemons[0].nodeName: is required"),
    (lambda o: o["daemons"][1].update(ipAddress=None, index=1.5),
     "field daemons[1].index: expected an integer, got number"),
    (lambda o: o.update(daemons={}), "field daemons: expected a list"),
    (lambda o: o["daemons"][0].update(node="x"), "field daemons[0].node: unknown field"),
])
def test_clique_rejects_bad_input(mutate, fragment: str) -> None:
    obj = clique_obj()
    mutate(obj)
    with pytest.raises(ValidationError) as err:
        ComputeDomainClique.from_dict(obj)
    assert fragment in str(err.value)


def channel_params(**extra: object) -> dict:
    params = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": UID}
    params.update(extra)
    return params


def test_decode_channel_and_daemon_configs() -> None:
    assert decode_opaque_config(channel_params()) == ChannelConfig(UID, "Single")
    cfg = decode_opaque_config(channel_params(allocationMode="All"))
    assert cfg == ChannelConfig(UID, "All") and cfg.all_channels
    daemon = {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": UID}
    assert decode_opaque_config(daemon) == DaemonConfig(UID)
    assert decode_opaque_config(ChannelConfig(UID, "All").to_dict()) == ChannelConfig(UID, "All")
    assert decode_opaque_config(DaemonConfig(UID).to_dict()) == DaemonConfig(UID)


@pytest.mark.parametrize("params,fragment", [
    (channel_params(domainID=""), "field domainID: must not be empty"),
    (channel_params(domainID=7), "field domainID: expected a string, got integer 7"),
    (channel_params(domainID="../../etc"), "not a safe path component"),
    (channel_params(domainID="a/b"), "not a safe path component"),
    (channel_params(domainID="a..b"), "not a safe path component"),
    (channel_params(domainID="x" * 64), "64 characters, at most 63"),
    (channel_params(domainID="-abc"), "not a valid label value"),
    (channel_params(domainID="abc def"), "not a valid label value"),
    (channel_params(domainId=UID), "field domainId: unknown field"),
    (channel_params(allocationMode="Many"), "field allocationMode: must be one of Single, All"),
    (channel_params(allocationMode=1), "field allocationMode: expected a string"),
    (channel_params(apiVersion="resource.nvidia.com/v1"), "field apiVersion: must be"),
    (channel_params(kind="GpuConfig"), "field kind: must be one of"),
    ({"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": UID,
      "allocationMode": "All"}, "field allocationMode: unknown field"),
    ({"kind": constants.KIND_CHANNEL_CONFIG, "domainID": UID}, "field apiVersion: is required"),
    ([UID], "expected an object"),
    (None, "expected an object"),
])
def test_decode_rejects_bad_configs(params: object, fragment: str) -> None:
    with pytest.raises(ValidationError) as err:
        decode_opaque_config(params)
    assert fragment in str(err.value)


@pytest.mark.parametrize("value", [UID, "a", "A.b_c-1", "x" * 63])
def test_valid_domain_ids(value: str) -> None:
    assert validate_domain_id(value) == value


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "a\\b", "a\0b", "x" * 64, "a b",
                                   "_x", "x_", "é", None, 5])
def test_invalid_domain_ids(value: object) -> None:
    with pytest.raises(ValidationError, match="field domainID"):
        validate_domain_id(value)


def test_controller_status_fields_survive_a_daemon_status_write() -> None:
    """Legacy daemons rewrite status.nodes; the controller's readyNodes/conditions stay."""
    from cdriver.api.types import ComputeDomain

    obj = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
           "metadata": {"name": "cd", "namespace": "ns", "uid": "u1"},
           "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}},
           "status": {"status": "Ready", "readyNodes": "1/1",
                      "conditions": [{"type": "Ready", "status": "True", "reason": "AllReady"}],
                      "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1,
                                 "status": "Ready"}]}}
    cd = ComputeDomain.from_dict(obj)
    assert cd.nodes[0].index == -1
    written = cd.status_dict()
    assert written["readyNodes"] == "1/1"
    assert written["conditions"][0]["reason"] == "AllReady"
