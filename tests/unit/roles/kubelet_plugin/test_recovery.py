"""Rebuilding the record of prepared claims from the API after the checkpoint was lost."""

from __future__ import annotations

from pathlib import Path

from cdriver.api import constants
from cdriver.checkpoint import ClaimState
from cdriver.roles.kubelet_plugin.recovery import Rebuilt, rebuild, recovery_message, spec_claim_uids

NODE = "node-a"


def claim(uid: str, pool: str = NODE, device: str = "channel-0", kind: str = constants.KIND_CHANNEL_CONFIG) -> dict:
    request = "channel" if device.startswith("channel") else "daemon"
    config = {"requests": [request], "opaque": {"driver": constants.DRIVER_NAME, "parameters": {
        "apiVersion": constants.API_VERSION, "kind": kind, "domainID": "cd-1"}}}
    return {"metadata": {"uid": uid, "name": f"c-{uid}", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": request}], "config": [config]}},
            "status": {"allocation": {"devices": {
                "results": [{"request": request, "driver": constants.DRIVER_NAME, "pool": pool, "device": device}],
                "config": [{"source": "FromClaim", **config}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}}


def test_claim_spec_names_give_their_claim_uids() -> None:
    names = ["k8s.compute-domain.nvidia.com-claim_u1.json", "k8s.compute-domain.nvidia.com-device_base.json",
             "other-vendor.json", "k8s.compute-domain.nvidia.com-claim_u2.json"]
    assert spec_claim_uids([n.removesuffix(".json") for n in names]) == ["u1", "u2"]


def test_claims_allocated_here_get_the_record_prepare_wrote() -> None:
    ids = {"u1": ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"],
           "u2": ["k8s.compute-domain.nvidia.com/claim=u2-daemon-0"]}
    out = rebuild(ids, [claim("u1"), claim("u2", device="daemon-0", kind=constants.KIND_DAEMON_CONFIG)], NODE, 5.0)
    assert out.unexplained == [] and out.from_api == ["ns/c-u1", "ns/c-u2"]
    channel, daemon = out.records["u1"], out.records["u2"]
    assert (channel.state, channel.kind, channel.domain_id, channel.updated) == (
        ClaimState.PREPARE_COMPLETED, "channel", "cd-1", 5.0)
    assert channel.cdi_ids == ids["u1"]
    assert channel.devices[0]["type"] == "channel" and channel.devices[0]["id"] == 0
    # A daemon claim also names the node's base spec, as Prepare returns it.
    assert daemon.cdi_ids == ["k8s.compute-domain.nvidia.com/device=all", *ids["u2"]]


def test_specs_no_claim_here_explains_are_kept_with_a_minimal_record() -> None:
    ids = {"gone": ["k8s.compute-domain.nvidia.com/claim=gone-channel-0"], "elsewhere": [], "bad": []}
    broken = claim("bad")
    broken["spec"]["devices"]["config"][0]["opaque"]["parameters"]["kind"] = "Nonsense"
    broken["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["kind"] = "Nonsense"
    out = rebuild(ids, [claim("elsewhere", pool="node-b"), broken], NODE, 1.0)
    assert out.from_api == [] and out.unexplained == ["bad", "elsewhere", "gone"]
    gone = out.records["gone"]
    assert (gone.state, gone.name, gone.devices, gone.cdi_ids) == (ClaimState.PREPARE_COMPLETED, "", [], ids["gone"])


def test_the_message_says_what_was_rebuilt_and_what_is_left_to_the_operator() -> None:
    rebuilt = Rebuilt(from_api=["ns/c1"], unexplained=["u9"])
    text = recovery_message("checkpoint /p/checkpoint.json does not exist", rebuilt, Path("/cdi"))
    assert "checkpoint /p/checkpoint.json does not exist" in text and "ns/c1" in text
    assert "/cdi/k8s.compute-domain.nvidia.com-claim_u9.yaml" in text and "delete them by hand" in text
    assert "Nothing else to do" in recovery_message("x", Rebuilt(from_api=["ns/c1"]), Path("/cdi"))
