"""CDIRegistry: written specs resolve to the edits a runtime applies; bad files are isolated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdriver.cdi import reader
from cdriver.cdi.model import CDIError, ContainerEdits, Device, DeviceNode, Mount, Spec, qualified_name
from cdriver.cdi.reader import CDIRegistry
from cdriver.cdi.writer import claim_spec_name, remove_spec, write_spec

CLAIM = "k8s.compute-domain.nvidia.com/claim"
DEVICE = "k8s.compute-domain.nvidia.com/device"
UID = "0b5e3c1d-7a2f-4c1e-8d3b-9f6a2e4c1b7d"


def daemon_spec(uid: str = UID, clique: str = "c.1") -> Spec:
    edits = ContainerEdits(
        env=[f"CLIQUE_ID={clique}", "COMPUTE_DOMAIN_UUID=cd-1"],
        device_nodes=[
            DeviceNode("/dev/nvidia-caps/nvidia-cap1", host_path="/host/dev/nvidia-cap1", major=511, minor=1)
        ],
        mounts=[Mount("/var/lib/kubelet/plugins/x/domains/cd-1", "/imexd", ["rw", "nosuid", "nodev", "bind"])],
    )
    return Spec(CLAIM, [Device(f"{uid}-daemon-0", edits)])


def base_spec() -> Spec:
    return Spec(
        DEVICE,
        [Device("all", ContainerEdits(device_nodes=[DeviceNode("/dev/nvidiactl", major=195, minor=255)]))],
        edits=ContainerEdits(env=["NVIDIA_VISIBLE_DEVICES=void", "CLIQUE_ID=base"]),
    )


def test_round_trip_write_then_resolve(tmp_path: Path) -> None:
    spec = daemon_spec()
    path = write_spec(tmp_path, claim_spec_name(UID), spec)
    assert json.loads(path.read_text())["cdiVersion"] == "0.5.0"
    registry = CDIRegistry([tmp_path])
    assert registry.device_ids() == [qualified_name(CLAIM, f"{UID}-daemon-0")]
    assert registry.resolve([f"{CLAIM}={UID}-daemon-0"]) == spec.devices[0].edits
    assert registry.errors == {}


def test_spec_edits_come_first_and_device_edits_win(tmp_path: Path) -> None:
    write_spec(tmp_path, "k8s.compute-domain.nvidia.com-device_base", base_spec())
    write_spec(tmp_path, claim_spec_name(UID), daemon_spec())
    edits = CDIRegistry([tmp_path]).resolve([f"{DEVICE}=all", f"{CLAIM}={UID}-daemon-0", f"{DEVICE}=all"])
    assert edits.env == ["NVIDIA_VISIBLE_DEVICES=void", "CLIQUE_ID=c.1", "COMPUTE_DOMAIN_UUID=cd-1"]
    assert [n.path for n in edits.device_nodes] == ["/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap1"]
    assert [m.container_path for m in edits.mounts] == ["/imexd"]


def test_later_dir_overrides_earlier(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    write_spec(static, "claim-a", daemon_spec(clique="static"))
    write_spec(dynamic, "claim-b", daemon_spec(clique="dynamic"))
    edits = CDIRegistry([static, dynamic]).resolve([f"{CLAIM}={UID}-daemon-0"])
    assert edits.env[0] == "CLIQUE_ID=dynamic"


def test_same_device_twice_in_one_dir_is_ambiguous(tmp_path: Path) -> None:
    write_spec(tmp_path, "claim-a", daemon_spec())
    write_spec(tmp_path, "claim-b", daemon_spec())
    with pytest.raises(CDIError, match="is ambiguous: defined in .*claim-a.yaml, .*claim-b.yaml"):
        CDIRegistry([tmp_path]).resolve([f"{CLAIM}={UID}-daemon-0"])


def test_unknown_and_malformed_ids(tmp_path: Path) -> None:
    registry = CDIRegistry([tmp_path])
    with pytest.raises(CDIError, match=f"'{CLAIM}=nope' is not defined in any spec file in {tmp_path}"):
        registry.resolve([f"{CLAIM}=nope"])
    with pytest.raises(CDIError, match="CDI device ID 'no-kind' is invalid"):
        registry.resolve(["no-kind"])


@pytest.mark.parametrize(
    "file_name, content, fragment",
    [
        ("trunc.json", '{"cdiVersion": "0.5.0", "kind": "a/b", "devi', "invalid JSON"),
        ("dup.json", '{"kind": "a/b", "kind": "a/c"}', "duplicate key 'kind'"),
        ("nan.json", '{"x": NaN}', "NaN is not valid JSON"),
        ("deep.json", "[" * 100000 + "]" * 100000, "nested too deeply"),
        (
            "types.json",
            json.dumps({"cdiVersion": "0.3.0", "kind": "a/b", "devices": "x"}),
            "devices: expected a list",
        ),
        (
            "unknown.yaml",
            "cdiVersion: 0.3.0\nkind: a/b\ndevices: [{name: x}]\nextra: 1\n",
            "unknown field 'extra'",
        ),
        ("bad.yaml", "cdiVersion: [\n", "invalid YAML"),
        ("empty.yaml", "", "empty file"),
        ("binary.json", b"\xff\xfe".decode("latin-1"), "not UTF-8"),
    ],
)
def test_malformed_file_is_reported_and_does_not_hide_others(
    tmp_path: Path, file_name: str, content: str, fragment: str
) -> None:
    write_spec(tmp_path, claim_spec_name(UID), daemon_spec())
    (tmp_path / file_name).write_bytes(content.encode("latin-1"))
    registry = CDIRegistry([tmp_path])
    assert registry.resolve([f"{CLAIM}={UID}-daemon-0"]).env[0] == "CLIQUE_ID=c.1"
    assert list(registry.errors) == [tmp_path / file_name]
    assert str(tmp_path / file_name) in registry.errors[tmp_path / file_name]
    assert fragment in registry.errors[tmp_path / file_name]
    with pytest.raises(CDIError, match=f"failed to load \\(one may define it\\): {tmp_path / file_name}"):
        registry.resolve([f"{CLAIM}=other"])


def test_oversized_file_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reader, "MAX_SPEC_FILE_BYTES", 1000)
    (tmp_path / "big.json").write_text(" " * 1001)
    assert "larger than the 1000-byte limit" in CDIRegistry([tmp_path]).errors[tmp_path / "big.json"]


def test_upstream_style_yaml_spec_resolves(tmp_path: Path) -> None:
    (tmp_path / f"{claim_spec_name(UID)}.yaml").write_text(
        "---\ncdiVersion: 0.5.0\nkind: k8s.compute-domain.nvidia.com/claim\ndevices:\n"
        f"- name: {UID}-channel-0\n  containerEdits:\n    deviceNodes:\n"
        "    - {path: /dev/nvidia-caps-imex-channels/channel0,"
        " hostPath: /dev/nvidia-caps-imex-channels/channel0, type: c, major: 234, minor: 0, fileMode: 438}\n"
    )
    edits = CDIRegistry([tmp_path]).resolve([f"{CLAIM}={UID}-channel-0"])
    assert edits.device_nodes == [
        DeviceNode(
            "/dev/nvidia-caps-imex-channels/channel0",
            "/dev/nvidia-caps-imex-channels/channel0",
            "c",
            234,
            0,
            file_mode=0o666,
        )
    ]


def test_registry_follows_writes_and_removals(tmp_path: Path) -> None:
    registry = CDIRegistry([tmp_path, tmp_path / "missing-dir"])
    device_id = f"{CLAIM}={UID}-daemon-0"
    write_spec(tmp_path, claim_spec_name(UID), daemon_spec(clique="one"))
    assert registry.resolve([device_id]).env[0] == "CLIQUE_ID=one"
    write_spec(tmp_path, claim_spec_name(UID), daemon_spec(clique="two"))
    assert registry.resolve([device_id]).env[0] == "CLIQUE_ID=two"
    (tmp_path / ".half-written.json.x.tmp").write_text("{")
    remove_spec(tmp_path, claim_spec_name(UID))
    with pytest.raises(CDIError, match="not defined"):
        registry.resolve([device_id])
    assert registry.errors == {}
