"""Claim records: the two device forms in their written key order, completed devices only."""

from __future__ import annotations

from cdriver.checkpoint import ClaimRecord, ClaimState, intended_device, recorded_device


def test_recorded_device_keys_are_in_written_order() -> None:
    device = recorded_device(request_names=["req"], pool_name="node-a", device_name="channel-0",
                             cdi_device_ids=["k8s.compute-domain.nvidia.com/claim=u1-channel-0"],
                             type="channel", id=0, admin_access=False)
    assert list(device) == ["request_names", "pool_name", "device_name", "cdi_device_ids", "type", "id",
                            "admin_access"]
    shared = recorded_device(request_names=[], pool_name="", device_name="", cdi_device_ids=[], type="daemon",
                             id=1, admin_access=True, share_id="s-1")
    assert list(shared)[4:] == ["share_id", "type", "id", "admin_access"] and shared["share_id"] == "s-1"


def test_intended_device_is_the_allocation_result() -> None:
    assert intended_device(request="req", pool="node-a", device="channel-3", type="channel", id=3,
                           admin_access=True) == {"request": "req", "pool": "node-a", "device": "channel-3",
                                                  "type": "channel", "id": 3, "adminAccess": True}


def test_only_a_completed_claim_holds_its_devices() -> None:
    device = recorded_device(request_names=["req"], pool_name="node-a", device_name="channel-0",
                             cdi_device_ids=[], type="channel", id=0, admin_access=False)
    for state in ClaimState:
        rec = ClaimRecord(uid="u1", state=state, devices=[device])
        assert rec.completed_devices() == ([device] if state is ClaimState.PREPARE_COMPLETED else [])
