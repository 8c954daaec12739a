"""Checkpoint store: typed records, reboots, locking, crashes; an unusable file kept aside."""

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
from cdriver.checkpoint import CheckpointError, CheckpointStore, ClaimState, read_boot_id
from tests.unit.checkpoint.records import BOOT, NEXT_BOOT, record, valid_claim, write_document

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


def test_locked_is_not_reentrant(store: CheckpointStore) -> None:
    with store.locked(), pytest.raises(RuntimeError, match="not reentrant"), store.locked():
        pass


# --- bad files: kept aside --------------------------------------------------------------


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
