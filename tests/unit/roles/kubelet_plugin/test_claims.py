"""Decoding what a ResourceClaim asks of the plugin, and who may hold which channel."""

from __future__ import annotations

import copy

import pytest

from cdriver.api import constants
from cdriver.roles.kubelet_plugin import claims
from cdriver.roles.kubelet_plugin.claims import HeldDevice
from cdriver.roles.kubelet_plugin.devices import parse_device, published_devices, slice_device

NODE = "node-a"
CD_UID = "0d5f8a3e-1111-2222-3333-444455556666"


def channel_params(domain=CD_UID, mode="Single", **extra):
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND_CHANNEL_CONFIG,
        "domainID": domain,
        "allocationMode": mode,
        **extra,
    }


def daemon_params(domain=CD_UID):
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_DAEMON_CONFIG, "domainID": domain}


DAEMON_CONFIGS = [{"source": "FromClaim", "requests": ["daemon"],
                   "opaque": {"driver": constants.DRIVER_NAME, "parameters": daemon_params()}}]


def make_claim(
    device="channel-0",
    request="channel",
    configs=None,
    uid="claim-uid-1",
    ns="team-a",
    pool=NODE,
    driver=constants.DRIVER_NAME,
):
    if configs is None:
        configs = [
            {
                "source": "FromClaim",
                "requests": [request],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": channel_params()},
            }
        ]
    return {
        "metadata": {"name": "wl-claim", "namespace": ns, "uid": uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": request, "driver": driver, "pool": pool, "device": device}],
                    "config": configs,
                }
            }
        },
    }


def test_channel_claim_plan():
    plan = claims.plan_claim(make_claim(), NODE)
    assert plan.kind == "channel"
    assert plan.domain_id == CD_UID
    assert not plan.all_channels
    assert [d.device for d in plan.devices] == ["channel-0"]
    assert plan.devices[0].ref.id == 0


def test_all_mode_is_carried():
    claim = make_claim(
        configs=[
            {
                "source": "FromClaim",
                "requests": [],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": channel_params(mode="All")},
            }
        ]
    )
    assert claims.plan_claim(claim, NODE).all_channels


def test_daemon_claim_plan():
    claim = make_claim(device="daemon-0", request="daemon", configs=DAEMON_CONFIGS)
    plan = claims.plan_claim(claim, NODE)
    assert (plan.kind, plan.domain_id) == ("daemon", CD_UID)


def test_claim_config_overrides_class_config():
    other = "ffffffff-0000-0000-0000-000000000000"
    claim = make_claim(
        configs=[
            {
                "source": "FromClaim",
                "requests": ["channel"],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": channel_params(domain=CD_UID)},
            },
            {
                "source": "FromClass",
                "requests": [],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": channel_params(domain=other)},
            },
        ]
    )
    # Class configs rank below claim configs regardless of list order.
    assert claims.plan_claim(claim, NODE).domain_id == CD_UID


def test_configs_of_other_drivers_are_ignored():
    claim = make_claim()
    claim["status"]["allocation"]["devices"]["config"].append(
        {
            "source": "FromClaim",
            "requests": ["channel"],
            "opaque": {"driver": "gpu.nvidia.com", "parameters": {"anything": True}},
        }
    )
    assert claims.plan_claim(claim, NODE).domain_id == CD_UID


def test_results_of_other_drivers_are_ignored():
    claim = make_claim()
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"}
    )
    assert [d.device for d in claims.plan_claim(claim, NODE).devices] == ["channel-0"]


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda c: c["status"].pop("allocation"), "has no allocation"),
        (
            lambda c: c["status"]["allocation"]["devices"]["config"][0].update(source="FromNowhere"),
            "invalid config source",
        ),
        (lambda c: c["status"]["allocation"]["devices"]["config"][0].pop("opaque"), "only opaque parameters"),
        (
            lambda c: c["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"].update(
                extra=1
            ),
            "error decoding config parameters",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"].update(
                domainID=""
            ),
            "error decoding config parameters",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"].update(
                domainID="../../etc"
            ),
            "error decoding config parameters",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(device="channel-9999"),
            "is not allocatable",
        ),
        (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(pool="node-b"), "serves node"),
        (lambda c: c["status"]["allocation"]["devices"].update(config=[]), "no ComputeDomainChannelConfig"),
    ],
)
def test_bad_claims_are_permanent_errors_naming_the_problem(mutate, needle):
    claim = make_claim()
    mutate(claim)
    with pytest.raises(claims.ClaimError) as err:
        claims.plan_claim(claim, NODE)
    assert err.value.permanent and err.value.reason == "invalid_config"
    assert needle in str(err.value)
    assert "team-a/wl-claim:claim-uid-1" in str(err.value)


def test_daemon_config_on_channel_request_is_rejected():
    claim = make_claim(
        configs=[
            {
                "source": "FromClaim",
                "requests": ["channel"],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": daemon_params()},
            }
        ]
    )
    with pytest.raises(
        claims.ClaimError, match="cannot apply ComputeDomainDaemonConfig to request 'channel'"
    ):
        claims.plan_claim(claim, NODE)


def test_mismatched_kind_without_requests_is_skipped():
    # A daemon config for all requests does not apply to a channel device: no config applies.
    claim = make_claim(
        configs=[
            {
                "source": "FromClass",
                "requests": [],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": daemon_params()},
            }
        ]
    )
    with pytest.raises(claims.ClaimError, match="no ComputeDomainChannelConfig"):
        claims.plan_claim(claim, NODE)


def test_subrequest_matches_top_level_request_name():
    claim = make_claim(request="channel/first")
    assert claims.plan_claim(claim, NODE).devices[0].request == "channel/first"


def held(uid, device="channel-0", admin=False, domain=""):
    ref = parse_device(device)
    return HeldDevice(claim_uid=uid, device=device, type=ref.type, id=ref.id, admin_access=admin, domain_id=domain)


def test_claims_of_one_domain_share_the_nodes_channel():
    claim = make_claim(uid="claim-uid-2")
    claim["status"]["allocation"]["devices"]["results"][0]["shareID"] = "5e1f0000-aaaa-bbbb-cccc-000000000001"
    plan = claims.plan_claim(claim, NODE)
    assert plan.devices[0].share_id == "5e1f0000-aaaa-bbbb-cccc-000000000001"
    claims.check_devices_free(plan, [held("claim-uid-1", domain=CD_UID), held("claim-uid-3", domain=CD_UID)],
                              host_managed=False)


def test_a_channel_held_by_another_domain_blocks_even_when_shared():
    claim = make_claim(uid="claim-uid-2")
    claim["status"]["allocation"]["devices"]["results"][0]["shareID"] = "5e1f0000-aaaa-bbbb-cccc-000000000001"
    plan = claims.plan_claim(claim, NODE)
    with pytest.raises(claims.ClaimError) as err:
        claims.check_devices_free(plan, [held("claim-uid-1", domain=CD_UID), held("b-claim", domain="other-cd")],
                                  host_managed=False)
    assert err.value.reason == "channel_in_use" and not err.value.permanent
    assert "b-claim" in str(err.value) and "other-cd" in str(err.value)


def test_the_daemon_slot_is_never_shared_within_a_domain():
    plan = claims.plan_claim(make_claim(device="daemon-0", request="daemon", configs=DAEMON_CONFIGS), NODE)
    with pytest.raises(claims.ClaimError, match="daemon-0 is already allocated"):
        claims.check_devices_free(plan, [held("other", "daemon-0", domain=CD_UID)], host_managed=False)


def test_channel_zero_taken_by_another_completed_claim_is_retryable():
    plan = claims.plan_claim(make_claim(), NODE)
    with pytest.raises(claims.ClaimError) as err:
        claims.check_devices_free(plan, [held("other-uid")], host_managed=False)
    assert not err.value.permanent and err.value.reason == "channel_in_use"
    assert "already allocated" in str(err.value) and "other-uid" in str(err.value)


def test_same_claim_and_daemon_devices_do_not_block_a_channel():
    plan = claims.plan_claim(make_claim(), NODE)
    claims.check_devices_free(plan, [held("claim-uid-1"), held("d", "daemon-0")], host_managed=False)


def test_driver_managed_counts_every_channel_claim_as_channel_zero():
    plan = claims.plan_claim(make_claim(), NODE)
    with pytest.raises(claims.ClaimError, match="channel 0 already allocated"):
        claims.check_devices_free(plan, [held("other", "channel-5")], host_managed=False)


def test_host_managed_compares_allocated_channel_ids():
    plan = claims.plan_claim(make_claim(device="channel-2"), NODE)
    claims.check_devices_free(plan, [held("other", "channel-0")], host_managed=True)
    with pytest.raises(claims.ClaimError, match="channel 2 already allocated"):
        claims.check_devices_free(plan, [held("other", "channel-2")], host_managed=True)


def test_admin_access_overlap_is_allowed_by_generic_check():
    claim = make_claim(device="daemon-0", request="daemon", configs=DAEMON_CONFIGS)
    plan = claims.plan_claim(claim, NODE)
    with pytest.raises(claims.ClaimError, match="already allocated"):
        claims.check_devices_free(plan, [held("other", "daemon-0")], host_managed=False)
    claims.check_devices_free(plan, [held("other", "daemon-0", admin=True)], host_managed=False)


def test_namespace_must_match_compute_domain():
    plan = claims.plan_claim(make_claim(ns="team-b"), NODE)
    cd = {"metadata": {"name": "dom", "namespace": "team-a", "uid": CD_UID}}
    with pytest.raises(claims.ClaimError) as err:
        claims.check_domain_namespace(plan, cd)
    assert err.value.permanent and err.value.reason == "wrong_namespace"
    assert "'team-b'" in str(err.value) and "'team-a'" in str(err.value)
    claims.check_domain_namespace(claims.plan_claim(make_claim(ns="team-a"), NODE), cd)


def test_missing_compute_domain_is_permanent():
    plan = claims.plan_claim(make_claim(), NODE)
    with pytest.raises(claims.ClaimError) as err:
        claims.check_domain_namespace(plan, None)
    assert err.value.permanent and err.value.reason == "domain_not_found" and CD_UID in str(err.value)


def test_replaced_claim_is_detected():
    claim = make_claim(uid="new-uid")
    with pytest.raises(claims.ClaimError, match="re-created"):
        claims.check_claim_identity(claim, "old-uid")


def test_published_devices_by_mode():
    assert [d.name for d in published_devices(host_managed=False)] == ["channel-0", "daemon-0"]
    assert [d.name for d in published_devices(host_managed=True)] == ["channel-0"]
    assert slice_device(published_devices(False)[1]) == {
        "name": "daemon-0",
        "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}},
    }


@pytest.mark.parametrize(
    "name,ok",
    [
        ("channel-0", True),
        ("channel-2047", True),
        ("channel-2048", False),
        ("daemon-0", True),
        ("daemon-1", False),
        ("channel-01", False),
        ("gpu-0", False),
        ("", False),
    ],
)
def test_parse_device(name, ok):
    assert (parse_device(name) is not None) == ok


def test_plan_does_not_mutate_claim():
    claim = make_claim()
    before = copy.deepcopy(claim)
    claims.plan_claim(claim, NODE)
    assert claim == before


# --- daemon claims belong to their domain's own daemon pods ---------------------------------

DRIVER_NS = "cdriver-system"


def daemon_claim(ns=DRIVER_NS, reserved=(("ds-pod", "pod-uid"),), resource="pods"):
    claim = make_claim(device="daemon-0", request="daemon", configs=DAEMON_CONFIGS, ns=ns)
    claim["status"]["reservedFor"] = [{"resource": resource, "name": n, "uid": u} for n, u in reserved]
    return claim


def daemon_pod(owner=constants.daemon_object_name(CD_UID), uid="pod-uid", kind="DaemonSet", controller=True):
    return {"metadata": {"name": "ds-pod", "namespace": DRIVER_NS, "uid": uid, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "ds-uid", "controller": controller}]}}


def test_daemon_claim_of_the_domains_own_daemon_pod_is_accepted():
    claim = daemon_claim()
    claims.check_daemon_claim_owner(claims.plan_claim(claim, NODE), DRIVER_NS, {"ds-pod": daemon_pod()}, claim)


def test_daemon_claim_outside_the_driver_namespace_is_refused_with_the_fix():
    claim = daemon_claim(ns="attacker")
    with pytest.raises(claims.ClaimError) as err:
        claims.check_daemon_claim_owner(claims.plan_claim(claim, NODE), DRIVER_NS, {}, claim)
    assert err.value.permanent
    msg = str(err.value)
    assert "accepted only in the driver namespace 'cdriver-system', not in 'attacker'" in msg
    assert constants.KIND_DAEMON_CONFIG in msg and CD_UID in msg and constants.DEVICE_CLASS_DEFAULT_CHANNEL in msg


@pytest.mark.parametrize(("pod", "reason"), [
    (daemon_pod(owner=constants.daemon_object_name("another-domain")),
     f"controlled by DaemonSet {constants.daemon_object_name('another-domain')}"),
    (daemon_pod(kind="ReplicaSet"), "controlled by no DaemonSet"),
    (daemon_pod(controller=False), "controlled by no DaemonSet"),
    (daemon_pod(uid="recreated"), "has UID recreated, not pod-uid"),
    (None, "does not exist"),
])
def test_daemon_claim_of_another_pod_in_the_driver_namespace_is_refused(pod, reason):
    claim = daemon_claim()
    with pytest.raises(claims.ClaimError) as err:
        claims.check_daemon_claim_owner(claims.plan_claim(claim, NODE), DRIVER_NS, {"ds-pod": pod}, claim)
    assert err.value.permanent
    assert reason in str(err.value)
    assert f"pods of DaemonSet {DRIVER_NS}/{constants.daemon_object_name(CD_UID)}" in str(err.value)


def test_daemon_claim_reserved_for_a_non_pod_is_refused():
    claim = daemon_claim(resource="jobs")
    with pytest.raises(claims.ClaimError, match="'ds-pod', which is not a pod"):
        claims.check_daemon_claim_owner(claims.plan_claim(claim, NODE), DRIVER_NS, {"ds-pod": daemon_pod()}, claim)


def test_daemon_claim_not_reserved_yet_is_retried():
    claim = daemon_claim(reserved=())
    with pytest.raises(claims.ClaimError) as err:
        claims.check_daemon_claim_owner(claims.plan_claim(claim, NODE), DRIVER_NS, {}, claim)
    assert not err.value.permanent
