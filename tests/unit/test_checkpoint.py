"""Checkpoint store: typed records, checksums, refusal of bad files, reboots, locking, crashes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cdriver import atomic
from cdriver.checkpoint import (
    CheckpointError,
    CheckpointStore,
    ClaimRecord,
    ClaimState,
    checksum,
    read_boot_id,
)

pytestmark = pytest.mark.unit

BOOT = "11111111-aaaa-4bbb-8ccc-000000000001"
NEXT_BOOT = "22222222-aaaa-4bbb-8ccc-000000000002"
RECOVERY = "restart the kubelet plugin: it moves the file aside"

# Holds the checkpoint lock until its stdin closes.
LOCK_HOLDER = textwrap.dedent(
    """
    import sys
    from cdriver.checkpoint import CheckpointStore
    with CheckpointStore(sys.argv[1], boot_id=sys.argv[2]).locked():
        print("locked", flush=True)
        sys.stdin.read()
    """
)

# Adds a claim, but is SIGKILLed after the new file is fsynced and before it is renamed in.
KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from cdriver.checkpoint import CheckpointStore, ClaimRecord
    def hang(src, dst):
        print("about-to-rename", flush=True)
        time.sleep(60)
    os.replace = hang
    with CheckpointStore(sys.argv[1], boot_id=sys.argv[2]).locked() as cp:
        cp.claims["killed"] = ClaimRecord("killed")
    """
)


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


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "plugin" / "checkpoint.json", boot_id=BOOT, lock_timeout=1)


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


# --- basics -------------------------------------------------------------------------------


def test_missing_file_is_an_empty_checkpoint_and_read_creates_nothing(store: CheckpointStore) -> None:
    checkpoint = store.read()
    assert checkpoint.claims == {} and checkpoint.boot_id == BOOT
    assert not store.path.exists()


def test_round_trip_keeps_typed_records(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
        cp.claims["u2"] = record("u2", ClaimState.PREPARE_STARTED)
    loaded = store.read()
    assert loaded.claims == {"u1": record("u1"), "u2": record("u2", ClaimState.PREPARE_STARTED)}
    assert loaded.claims["u2"].state is ClaimState.PREPARE_STARTED
    doc = json.loads(store.path.read_text())["cdriver"]
    assert doc["version"] == 1 and doc["bootID"] == BOOT
    assert doc["claims"]["u2"]["state"] == "PrepareStarted"
    assert store.path.stat().st_mode & 0o777 == 0o600
    with store.locked() as cp:
        del cp.claims["u1"]
    assert list(store.read().claims) == ["u2"]


def test_unchanged_checkpoint_is_not_rewritten(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    inode = store.path.stat().st_ino
    with store.locked() as cp:
        assert "u1" in cp.claims
    assert store.path.stat().st_ino == inode


def test_exception_in_block_saves_nothing(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    before = store.path.read_bytes()
    with pytest.raises(ValueError), store.locked() as cp:
        cp.claims["u2"] = record("u2")
        raise ValueError("prepare failed")
    assert store.path.read_bytes() == before


def test_unserialisable_or_invalid_content_is_refused_before_writing(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    before = store.path.read_bytes()
    for bad in (
        ClaimRecord("u2", devices=[{"x": object()}]),
        ClaimRecord("u2", devices=[{"x": float("nan")}]),
        ClaimRecord("u2", name="n" * 300),
        ClaimRecord("other-uid"),
    ):
        with (
            pytest.raises(CheckpointError, match="nothing was written|key it by its UID"),
            store.locked() as cp,
        ):
            cp.claims["u2"] = bad
        assert store.path.read_bytes() == before


def test_locked_is_not_reentrant(store: CheckpointStore) -> None:
    with store.locked(), pytest.raises(RuntimeError, match="not reentrant"), store.locked():
        pass


# --- bad files: refused, named, kept ------------------------------------------------------


def claims_doc(**claim_overrides) -> dict:
    claim = valid_claim()
    claim.update(claim_overrides)
    return {"version": 1, "bootID": BOOT, "claims": {"u1": claim}}


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b'{"version": 1, "checksum": "ab", "claims": {"u1": {"na', "truncated or invalid JSON"),
        (b"", "truncated or invalid JSON"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[1, 2]", "expected an object, got list"),
        (b'{"v1": {}, "v2": {"nodeBootID": "abc"}, "checksum": 1}', "top-level checksum mismatch"),
        (b'{"claims": {}}', "neither a cdriver nor an upstream"),
        (b'{"version": 2, "checksum": "x", "claims": {}}', "version 2 is not supported"),
        (b'{"version": true, "checksum": "x", "claims": {}}', "version True is not supported"),
        (b'{"version": 1, "version": 1, "checksum": "x", "claims": {}}', "'version' appears twice"),
        (
            b'{"version": 1, "checksum": "x", "claims": {"u": {"updated": NaN}}}',
            "NaN is not a valid JSON number",
        ),
        (b"[" * 100000, "nested too deeply"),
    ],
)
def test_unreadable_files_are_refused_and_kept(store: CheckpointStore, content: bytes, fragment: str) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(content)
    for attempt in (store.read, lambda: store.locked().__enter__()):
        with pytest.raises(CheckpointError) as info:
            attempt()
        message = str(info.value)
        assert str(store.path) in message and fragment in message and RECOVERY in message
        assert store.path.read_bytes() == content


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (
            claims_doc(state="Prepared"),
            "claims['u1'].state: 'Prepared' is not one of PrepareStarted, PrepareCompleted",
        ),
        (claims_doc(devices={"a": 1}), "claims['u1'].devices: expected a list of objects"),
        (claims_doc(cdiIDs="x"), "claims['u1'].cdiIDs: expected a list of strings, got string"),
        (claims_doc(updated="yesterday"), "claims['u1'].updated: expected a number"),
        (claims_doc(name=7), "claims['u1'].name: expected a string, got int"),
        (claims_doc(namespace="n" * 10000), "claims['u1'].namespace: 10000 characters"),
        (claims_doc(surprise=True), "claims['u1']: unknown field 'surprise'"),
        ({"version": 1, "claims": {"u1": {"name": "x"}}}, "missing field"),
        ({"version": 1, "claims": {}, "extra": 1}, "checkpoint: unknown field 'extra'"),
        ({"version": 1, "claims": []}, "claims: expected an object, got list"),
        ({"version": 1, "bootID": 5, "claims": {}}, "bootID: expected a string"),
        ({"version": 1, "claims": {"": valid_claim()}}, "must not be empty"),
    ],
)
def test_checksummed_but_invalid_content_is_refused(store: CheckpointStore, payload: dict, fragment: str) -> None:
    data = write_document(store.path, payload)
    with pytest.raises(CheckpointError) as info, store.locked():
        pass
    assert fragment in str(info.value) and RECOVERY in str(info.value)
    assert store.path.read_bytes() == data


def test_checksum_mismatch_is_refused_and_kept(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    tampered = store.path.read_text().replace("PrepareCompleted", "PrepareStarted")
    store.path.write_text(tampered)
    with pytest.raises(CheckpointError, match=f"checkpoint {store.path} is unusable: checksum mismatch"):
        store.read()
    with pytest.raises(CheckpointError, match=RECOVERY), store.locked():
        pass
    assert store.path.read_text() == tampered


def test_an_unusable_file_is_kept_aside_never_overwritten(store: CheckpointStore) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"garbage one")
    first = store.keep_aside(now=0)
    assert first.name == "checkpoint.json.corrupt-19700101T000000Z" and first.read_bytes() == b"garbage one"
    assert not store.path.exists()
    store.path.write_bytes(b"garbage two")  # damaged again within the same second
    second = store.keep_aside(now=0)
    assert second != first and second.read_bytes() == b"garbage two"
    assert first.read_bytes() == b"garbage one"


def test_oversized_file_is_refused(store: CheckpointStore, monkeypatch) -> None:
    import cdriver.checkpoint as module

    monkeypatch.setattr(module, "MAX_CHECKPOINT_BYTES", 100)
    data = write_document(store.path, {"version": 1, "claims": {"u1": valid_claim()}})
    with pytest.raises(CheckpointError, match="more than the 100-byte limit"):
        store.read()
    assert store.path.read_bytes() == data


# --- boot id ------------------------------------------------------------------------------


def test_reboot_drops_prepared_claims_and_is_logged(store: CheckpointStore, caplog) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
        cp.claims["u2"] = record("u2", ClaimState.PREPARE_STARTED)
    after_reboot = CheckpointStore(store.path, boot_id=NEXT_BOOT)
    assert after_reboot.read().claims == {}
    assert json.loads(store.path.read_text())["cdriver"]["bootID"] == BOOT  # read() changes nothing
    with caplog.at_level(logging.WARNING, logger="cdriver.checkpoint"), after_reboot.locked() as cp:
        assert cp.claims == {} and cp.boot_id == NEXT_BOOT
    assert "node rebooted" in caplog.text and "dropping 2 prepared claims (u1, u2)" in caplog.text
    doc = json.loads(store.path.read_text())["cdriver"]
    assert doc["bootID"] == NEXT_BOOT and doc["claims"] == {}


def test_checkpoint_without_boot_id_adopts_current_and_keeps_claims(store: CheckpointStore) -> None:
    write_document(store.path, {"version": 1, "claims": {"u1": valid_claim()}})
    with store.locked() as cp:
        assert list(cp.claims) == ["u1"]
    assert json.loads(store.path.read_text())["cdriver"]["bootID"] == BOOT


def test_boot_id_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    boot_file = tmp_path / "boot_id"
    boot_file.write_text(f"{BOOT}\n")
    assert read_boot_id(str(boot_file)) == BOOT
    assert read_boot_id(str(tmp_path / "missing")) == ""
    if os.path.exists("/proc/sys/kernel/random/boot_id"):
        assert len(CheckpointStore(tmp_path / "cp.json").boot_id) == 36


# --- processes ----------------------------------------------------------------------------


def test_lock_contention_between_processes_times_out_naming_the_holder(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(store.path), BOOT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        waiter = CheckpointStore(store.path, boot_id=BOOT, lock_timeout=0.2)
        with pytest.raises(CheckpointError) as info, waiter.locked():
            pass
        message = str(info.value)
        assert f"waiting for the checkpoint lock {store.lock_path}" in message
        assert f"held by pid {holder.pid}" in message
        assert "only one cdriver kubelet-plugin" in message
        assert list(store.read().claims) == ["u1"]  # readers are never blocked
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=10) == 0
    with CheckpointStore(store.path, boot_id=BOOT, lock_timeout=5).locked() as cp:
        cp.claims["u2"] = record("u2")
    assert sorted(store.read().claims) == ["u1", "u2"]


def test_writer_killed_mid_write_leaves_old_checkpoint(store: CheckpointStore) -> None:
    with store.locked() as cp:
        cp.claims["u1"] = record("u1")
    before = store.path.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(store.path), BOOT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "about-to-rename"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert store.path.read_bytes() == before
    assert list(store.read().claims) == ["u1"]
    assert len(atomic.stale_temp_files(store.path)) == 1  # hidden: ".checkpoint.json.*.tmp"
    with store.locked() as cp:  # the lock died with the writer; leftovers are swept
        assert list(cp.claims) == ["u1"]
    assert atomic.stale_temp_files(store.path) == []


def test_a_damaged_section_key_is_refused_not_read_from_the_upstream_part(tmp_path: Path) -> None:
    """One flipped bit in the "cdriver" key must not make the store fall back to upstream's
    (poorer) copy of the claims and drop what only cdriver's section records."""
    path = tmp_path / "checkpoint.json"
    store = CheckpointStore(path, boot_id=BOOT)
    with store.locked() as cp:
        cp.claims["a"] = record("a")
    data = path.read_bytes()
    assert data.count(b'"cdriver"') == 1
    path.write_bytes(data.replace(b'"cdriver"', b'"cdrivds"'))
    with pytest.raises(CheckpointError) as err:
        CheckpointStore(path, boot_id=BOOT).read()
    assert "unknown top-level key 'cdrivds'" in str(err.value) and RECOVERY in str(err.value)
