"""The upstream plugin's checkpoint: read in both of its layouts, written back so it reads ours.

The files under ``data/`` are in upstream's exact on-disk form (Go's compact JSON, kubelet
checksums): upstream's plugin reads them, and re-marshals the current one byte for byte.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

import pytest

from cdriver.checkpoint import CheckpointError, CheckpointStore, ClaimRecord, ClaimState
from cdriver.checkpoint.upstream import go_json, kubelet_checksum, to_upstream

DATA = Path(__file__).parent / "data"
BOOT = "6a0f5f9e-5d5e-4d4e-9a8b-1c2d3e4f5a6b"
CHANNEL = "0b5c7a7e-1111-4aaa-8bbb-000000000001"
DAEMON = "0b5c7a7e-2222-4aaa-8bbb-000000000002"
STARTED = "0b5c7a7e-3333-4aaa-8bbb-000000000003"
ABORTED = "0b5c7a7e-4444-4aaa-8bbb-000000000004"
DOMAIN = "4f3c0a51-7c1e-4d43-9f77-3a6f2b8e0c11"


def plugin_store(tmp_path: Path, fixture: str, boot_id: str = BOOT) -> CheckpointStore:
    path = tmp_path / "compute-domain.nvidia.com" / "checkpoint.json"
    path.parent.mkdir()
    shutil.copy(DATA / fixture, path)
    return CheckpointStore(path, boot_id=boot_id, lock_timeout=1)


def test_empty_checkpoint_matches_what_upstream_writes() -> None:
    from cdriver.checkpoint import Checkpoint

    # Upstream's plugin writes exactly this for a checkpoint without claims or boot id.
    assert to_upstream(Checkpoint()) == {"checksum": 1083090442, "v1": {}, "v2": {"checksum": 4166374854}}


def test_go_json_escapes_like_go() -> None:
    assert go_json({"a": "<&>", "b": [1, None]}) == b'{"a":"\\u003c\\u0026\\u003e","b":[1,null]}'


def test_upstream_v2_checkpoint_keeps_every_claim(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_v2.json")
    claims = store.read().claims
    assert sorted(claims) == [CHANNEL, DAEMON, STARTED, ABORTED]
    channel = claims[CHANNEL]
    assert channel.state is ClaimState.PREPARE_COMPLETED
    assert (channel.name, channel.namespace, channel.kind, channel.domain_id) == (
        "worker-0-channel", "team-a", "channel", DOMAIN)
    assert channel.cdi_ids == [f"k8s.compute-domain.nvidia.com/claim={CHANNEL}-channel-0"]
    assert channel.devices == [{
        "request_names": ["channel"], "pool_name": "node-a", "device_name": "channel-0",
        "cdi_device_ids": channel.cdi_ids, "type": "channel", "id": 0, "admin_access": False,
    }]
    daemon = claims[DAEMON]
    assert daemon.kind == "daemon" and daemon.devices[0]["type"] == "daemon"
    assert daemon.cdi_ids[0] == "k8s.compute-domain.nvidia.com/device=all"
    assert claims[STARTED].state is ClaimState.PREPARE_STARTED
    assert (claims[STARTED].name, claims[STARTED].devices) == ("bad-config-claim", [])
    assert claims[ABORTED].state is ClaimState.PREPARE_ABORTED
    assert claims[ABORTED].updated == 1796032800.0  # 2026-11-30T10:00:00Z


def test_upstream_checkpoint_from_another_boot_voids_its_claims(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_v2.json", boot_id="another-boot")
    assert store.read().claims == {}


def test_oldest_upstream_layout_is_converted(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_2503rc2.json")
    claims = store.read().claims
    assert list(claims) == [CHANNEL]
    assert claims[CHANNEL].state is ClaimState.PREPARE_COMPLETED
    assert claims[CHANNEL].domain_id == DOMAIN
    assert claims[CHANNEL].devices[0]["device_name"] == "channel-0"
    assert claims[CHANNEL].cdi_ids == [f"k8s.compute-domain.nvidia.com/claim={CHANNEL}-channel-0"]


def test_tampered_upstream_checkpoint_is_refused_and_kept(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_v2.json")
    text = store.path.read_text().replace("worker-0-channel", "worker-9-channel")
    store.path.write_text(text)
    with pytest.raises(CheckpointError, match="v2 checksum mismatch") as err:
        store.read()
    assert "it moves the file aside" in str(err.value)
    assert store.path.read_text() == text


def test_write_back_is_readable_by_both_drivers(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_v2.json")
    with store.locked() as cp:
        del cp.claims[ABORTED]
    written = json.loads(store.path.read_text())
    # Upstream's parts: valid checksums, same claims, v1 holds only the completed ones.
    v2 = written["v2"]
    assert v2["checksum"] == kubelet_checksum(go_json({**v2, "checksum": 0}))
    assert written["checksum"] == kubelet_checksum(go_json({"checksum": 0, "v1": written["v1"]}))
    assert v2["nodeBootID"] == BOOT
    assert sorted(v2["preparedClaims"]) == [CHANNEL, DAEMON, STARTED]
    assert sorted(written["v1"]["preparedClaims"]) == [CHANNEL, DAEMON]
    original = json.loads((DATA / "upstream_checkpoint_v2.json").read_text())
    for uid in (CHANNEL, DAEMON, STARTED):  # handed back exactly as upstream recorded them
        assert go_json(v2["preparedClaims"][uid]) == go_json(original["v2"]["preparedClaims"][uid])
    assert go_json(written["v1"]) == go_json(original["v1"])
    # cdriver reads it back unchanged; without the cdriver section (upstream rewrote it) too.
    again = store.read().claims
    assert sorted(again) == [CHANNEL, DAEMON, STARTED]
    del written["cdriver"]
    store.path.write_text(json.dumps(written))
    assert store.read().claims[CHANNEL].devices == again[CHANNEL].devices


def test_aborted_entry_is_written_with_its_time() -> None:
    from cdriver.checkpoint import Checkpoint

    rec = ClaimRecord(uid="u1", name="c", namespace="n", state=ClaimState.PREPARE_ABORTED,
                      updated=1796032800.7)
    claim = to_upstream(Checkpoint(boot_id="b", claims={"u1": rec}))["v2"]["preparedClaims"]["u1"]
    assert claim == {"checkpointState": "PrepareAborted", "status": {}, "name": "c",
                     "namespace": "n", "abortedAt": "2026-11-30T10:00:00Z"}


def test_writers_take_upstreams_lock_file(tmp_path: Path) -> None:
    store = plugin_store(tmp_path, "upstream_checkpoint_v2.json")
    assert store.lock_path == store.path.parent / "pu.lock"
    with open(store.lock_path, "a+") as held:  # what the upstream plugin holds in Prepare
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CheckpointError, match="pu.lock"), store.locked():
            pass
