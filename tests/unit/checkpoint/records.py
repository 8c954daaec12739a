"""Records and files the checkpoint tests share."""

from __future__ import annotations

import json
from pathlib import Path

from cdriver.checkpoint import ClaimRecord, ClaimState, checksum

BOOT = "11111111-aaaa-4bbb-8ccc-000000000001"
NEXT_BOOT = "22222222-aaaa-4bbb-8ccc-000000000002"
RECOVERY = "restart the kubelet plugin: it moves the file aside"


def record(uid: str, state: ClaimState = ClaimState.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        name=f"claim-{uid}",
        namespace="team-a",
        state=state,
        devices=[{"poolName": "node-1", "deviceName": "channel-0", "requests": ["channel"]}],
        cdi_ids=[f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"],
        domain_id="cd-uid-1",
        kind="channel",
        updated=1700000000.5,
    )


def write_document(path: Path, payload: dict, stored_checksum: str | None = None) -> bytes:
    """Write a checkpoint-shaped file with a valid (or given) checksum; returns its bytes."""
    body = dict(payload)
    body["checksum"] = stored_checksum if stored_checksum is not None else checksum(payload)
    data = json.dumps(body).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def valid_claim() -> dict:
    return record("u1").to_dict()
