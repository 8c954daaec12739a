"""Deciding how to reach exactly one correct ResourceSlice for the node."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.roles.kubelet_plugin.devices import published_devices
from cdriver.roles.kubelet_plugin.resourceslice import Sharing, desired_spec, owner_reference, plan_sync

NODE, UID = "node-a", "node-uid-1"
DEVICES = published_devices(host_managed=False)


def existing(name, devices=DEVICES, generation=1, owner_uid=UID, node=NODE, driver=constants.DRIVER_NAME, created="t1"):
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "5", "creationTimestamp": created,
                         "ownerReferences": [owner_reference(node, owner_uid)]},
            "spec": {**desired_spec(node, devices, generation, driver)}}


def test_nothing_published_creates_one_slice():
    plan = plan_sync([], NODE, UID, DEVICES)
    assert plan.update is None and plan.delete == []
    body = plan.create
    assert body["metadata"]["generateName"] == f"00000-{constants.DRIVER_NAME}-{NODE}-"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}]
    assert body["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert body["spec"]["nodeName"] == NODE and body["spec"]["driver"] == constants.DRIVER_NAME
    assert [d["name"] for d in body["spec"]["devices"]] == ["channel-0", "daemon-0"]


def test_correct_slice_is_left_alone():
    assert plan_sync([existing("s1", generation=4)], NODE, UID, DEVICES).noop


def test_duplicates_are_deleted_keeping_the_oldest():
    plan = plan_sync([existing("s2", created="t2"), existing("s1", created="t1")], NODE, UID, DEVICES)
    assert plan.create is None and plan.update is None
    assert [d["metadata"]["name"] for d in plan.delete] == ["s2"]


def test_wrong_content_is_rewritten_with_a_new_generation():
    host_mode = published_devices(host_managed=True)
    plan = plan_sync([existing("s1", generation=3)], NODE, UID, host_mode)
    assert plan.create is None and plan.delete == []
    assert plan.update["metadata"]["name"] == "s1"
    assert plan.update["spec"]["pool"]["generation"] == 4
    assert [d["name"] for d in plan.update["spec"]["devices"]] == ["channel-0"]


def test_slice_owned_by_an_old_node_object_is_rewritten():
    plan = plan_sync([existing("s1", owner_uid="old-node-uid")], NODE, UID, DEVICES)
    assert plan.update["metadata"]["ownerReferences"][0]["uid"] == UID


def test_slices_of_other_nodes_or_drivers_are_ignored():
    others = [existing("x", node="node-b"), existing("y", driver="gpu.nvidia.com")]
    plan = plan_sync(others, NODE, UID, DEVICES)
    assert plan.create is not None and plan.delete == []


def test_channel_taints_are_published_and_the_servers_time_stamp_is_not_a_difference():
    taint = {"key": "compute-domain.nvidia.com/unusable", "value": "fabric-unhealthy", "effect": "NoSchedule"}
    taints = {"channel-0": [taint]}
    plan = plan_sync([existing("s1")], NODE, UID, DEVICES, taints=taints)
    assert plan.update is not None
    (channel,) = [d for d in plan.update["spec"]["devices"] if d["name"] == "channel-0"]
    assert channel["taints"] == [taint]
    assert "taints" not in next(d for d in plan.update["spec"]["devices"] if d["name"] == "daemon-0")
    stored = {**plan.update, "spec": {**plan.update["spec"], "devices": [
        {**d, "taints": [{**t, "timeAdded": "2026-12-04T20:00:00Z"} for t in d["taints"]]} if d.get("taints") else d
        for d in plan.update["spec"]["devices"]]}}
    assert plan_sync([stored], NODE, UID, DEVICES, taints=taints).noop
    untainted = plan_sync([stored], NODE, UID, DEVICES, taints={})
    assert untainted.update is not None and not any(d.get("taints") for d in untainted.update["spec"]["devices"])


def test_a_shared_channel_names_the_domain_holding_the_node():
    cd = "6a1b2c3d-0000-4000-8000-00000000abcd"
    free = plan_sync([existing("s1")], NODE, UID, DEVICES, sharing=Sharing(True, ""))
    assert free.update is not None
    channel, daemon = free.update["spec"]["devices"]
    assert channel["allowMultipleAllocations"] is True
    assert constants.ATTRIBUTE_COMPUTE_DOMAIN not in channel["attributes"]
    assert "allowMultipleAllocations" not in daemon  # the daemon slot goes to one claim
    held = plan_sync([free.update], NODE, UID, DEVICES, sharing=Sharing(True, cd))
    assert held.update is not None
    assert held.update["spec"]["devices"][0]["attributes"][constants.ATTRIBUTE_COMPUTE_DOMAIN] == {"string": cd}
    assert held.update["spec"]["pool"]["generation"] == free.update["spec"]["pool"]["generation"] + 1
    assert plan_sync([held.update], NODE, UID, DEVICES, sharing=Sharing(True, cd)).noop
    assert plan_sync([existing("s1")], NODE, UID, DEVICES).noop  # not shared: today's slice
