"""Checkpoint records of prepared claims: the devices they hold."""

from __future__ import annotations

from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.dra.node_service import PreparedDevice
from cdriver.roles.kubelet_plugin.claims import AllocatedDevice, ClaimPlan
from cdriver.roles.kubelet_plugin.devices import DeviceRef
from cdriver.roles.kubelet_plugin.prepare import record_devices
from cdriver.roles.kubelet_plugin.state import held_devices


def plan(uid: str, device: str = "channel-0") -> ClaimPlan:
    kind, _, num = device.rpartition("-")
    dev = AllocatedDevice("req", "node-a", device, DeviceRef(kind, int(num)))
    return ClaimPlan(uid=uid, namespace="ns", name="c", kind=kind, domain_id="cd", devices=(dev,))


def test_recorded_devices_round_trip_and_count_only_completed_claims():
    p = plan("u1")
    devices = [PreparedDevice(["req"], "node-a", "channel-0", ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"])]
    stored = record_devices(devices, p)
    assert PreparedDevice.from_dict(stored[0]) == devices[0]
    claims = {
        "u1": ClaimRecord(uid="u1", state=ClaimState.PREPARE_COMPLETED, devices=stored, kind="channel"),
        "u2": ClaimRecord(uid="u2", state=ClaimState.PREPARE_STARTED, devices=stored, kind="channel"),
    }
    (held,) = held_devices(claims)
    assert (held.claim_uid, held.device, held.type, held.id, held.admin_access) == ("u1", "channel-0", "channel",
                                                                                    0, False)
