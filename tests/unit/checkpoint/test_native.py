"""The checkpoint file's content: checksums, strict decoding, nothing unreadable written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.checkpoint import CheckpointError, CheckpointStore, ClaimRecord
from tests.unit.checkpoint.records import BOOT, RECOVERY, record, valid_claim, write_document


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
        (b'{"version": 1, "version": 1, "checksum": "x", "claims": {}}', "duplicate key 'version'"),
        (
            b'{"version": 1, "checksum": "x", "claims": {"u": {"updated": NaN}}}',
            "NaN is not valid JSON",
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


def test_oversized_file_is_refused(store: CheckpointStore, monkeypatch) -> None:
    import cdriver.checkpoint.native as module

    monkeypatch.setattr(module, "MAX_CHECKPOINT_BYTES", 100)
    data = write_document(store.path, {"version": 1, "claims": {"u1": valid_claim()}})
    with pytest.raises(CheckpointError, match="more than the 100-byte limit"):
        store.read()
    assert store.path.read_bytes() == data


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
