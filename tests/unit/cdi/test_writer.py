"""Transient CDI spec files: atomic JSON writes, idempotent removal, listing, safe names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from cdriver import atomic
from cdriver.cdi import writer
from cdriver.cdi.model import CDIError, ContainerEdits, Device, DeviceNode, Spec
from cdriver.cdi.writer import claim_spec_name, list_specs, remove_spec, write_spec

KIND = "k8s.compute-domain.nvidia.com/claim"
UID = "6f1c2b9e-0c4d-4a8e-9d2a-3b7e5f1a2c3d"


def channel_spec(uid: str = UID, minor: int = 0) -> Spec:
    node = DeviceNode(f"/dev/nvidia-caps-imex-channels/channel{minor}", major=234, minor=minor, file_mode=0o666)
    return Spec(KIND, [Device(f"{uid}-channel-{minor}", ContainerEdits(device_nodes=[node]))])


def test_claim_spec_name_matches_upstream_convention() -> None:
    assert claim_spec_name(UID) == f"k8s.compute-domain.nvidia.com-claim_{UID}"


def test_write_spec_writes_json_with_minimal_version(tmp_path: Path) -> None:
    path = write_spec(tmp_path / "cdi", claim_spec_name(UID), channel_spec())
    # upstream's file name for the spec (the CDI library's default extension): JSON is YAML too
    assert path == tmp_path / "cdi" / f"k8s.compute-domain.nvidia.com-claim_{UID}.yaml"
    doc = json.loads(path.read_text())
    assert yaml.safe_load(path.read_text()) == doc
    assert doc["cdiVersion"] == "0.5.0"  # the UID starts with a digit
    assert doc["kind"] == KIND
    assert doc["devices"][0]["containerEdits"]["deviceNodes"][0]["fileMode"] == 0o666
    assert path.stat().st_mode & 0o777 == 0o644
    assert os.listdir(path.parent) == [path.name]


def test_rewrite_replaces_whole_file_and_drops_json_twin(tmp_path: Path) -> None:
    name = claim_spec_name(UID)
    (tmp_path / f"{name}.json").write_text('{"old": true}')
    write_spec(tmp_path, name, channel_spec(minor=0))
    path = write_spec(tmp_path, name, channel_spec(minor=1))
    assert json.loads(path.read_text())["devices"][0]["name"] == f"{UID}-channel-1"
    assert os.listdir(tmp_path) == [path.name]


def test_interrupted_write_keeps_previous_spec(tmp_path: Path, monkeypatch) -> None:
    name = claim_spec_name(UID)
    path = write_spec(tmp_path, name, channel_spec(minor=0))
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(CDIError, match=f"cannot write CDI spec {path}: Input/output error"):
        write_spec(tmp_path, name, channel_spec(minor=1))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "", "x" * 251, "name with space", "/etc/cdi/x", None])
def test_unsafe_spec_names_are_rejected_before_touching_disk(tmp_path: Path, name) -> None:
    with pytest.raises(CDIError, match="CDI spec name .* is invalid"):
        write_spec(tmp_path / "cdi", name, channel_spec())
    with pytest.raises(CDIError, match="CDI spec name .* is invalid"):
        remove_spec(tmp_path / "cdi", name)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("uid", ["../../etc/passwd", "a/b", "", "-x", "uid_"])
def test_unsafe_claim_uids_are_rejected(uid: str) -> None:
    with pytest.raises(CDIError, match="transient CDI spec id"):
        claim_spec_name(uid)


def test_invalid_spec_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(CDIError, match="NOEQUALS"):
        write_spec(tmp_path, "x", Spec(KIND, [Device("a", ContainerEdits(env=["NOEQUALS"]))]))
    assert os.listdir(tmp_path) == []


def test_cdi_root_that_is_a_file_gives_clear_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "cdi"
    not_a_dir.write_text("")
    with pytest.raises(CDIError, match="writable directory"):
        write_spec(not_a_dir, "x", channel_spec())


def test_remove_is_idempotent_and_covers_json(tmp_path: Path) -> None:
    name = claim_spec_name(UID)
    write_spec(tmp_path, name, channel_spec())
    (tmp_path / f"{name}.json").write_text("{}")
    assert remove_spec(tmp_path, name) is True
    assert os.listdir(tmp_path) == []
    assert remove_spec(tmp_path, name) is False
    assert remove_spec(tmp_path / "missing", name) is False


def test_list_specs_skips_temp_hidden_and_foreign_files(tmp_path: Path) -> None:
    write_spec(tmp_path, "b-spec", channel_spec())
    (tmp_path / "a-spec.yaml").write_text("---\n")
    (tmp_path / ".b-spec.json.abc.tmp").write_text("{")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub.json").mkdir()
    assert list_specs(tmp_path) == ["a-spec", "b-spec"]
    assert list_specs(tmp_path / "missing") == []
    assert writer.spec_path(tmp_path, "b-spec") == tmp_path / "b-spec.yaml"
    assert writer.existing_spec_path(tmp_path, "a-spec") == tmp_path / "a-spec.yaml"
    (tmp_path / "c-spec.json").write_text("{}")
    assert writer.existing_spec_path(tmp_path, "c-spec") == tmp_path / "c-spec.json"
    assert writer.existing_spec_path(tmp_path, "d-spec") == tmp_path / "d-spec.yaml"
