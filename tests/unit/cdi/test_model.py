"""CDI model: name rules, strict decoding of bad input, minimal cdiVersion, edit merging."""

from __future__ import annotations

import pytest

from cdriver.cdi.model import (
    CDIError,
    ContainerEdits,
    Device,
    DeviceNode,
    Mount,
    Spec,
    merge_edits,
    parse_kind,
    parse_qualified_name,
    qualified_name,
    validate_device_name,
)

KIND = "k8s.compute-domain.nvidia.com/claim"


def channel_node(**extra) -> DeviceNode:
    return DeviceNode("/dev/nvidia-caps-imex-channels/channel0", major=234, minor=0, **extra)


def spec_doc(**overrides) -> dict:
    doc = {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "uid-channel-0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/x", "type": "c", "major": 1, "minor": 2}]},
            }
        ],
    }
    doc.update(overrides)
    return doc


# --- names --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["k8s.compute-domain.nvidia.com/claim", "a/b", "vendor_1.x/class-2"])
def test_valid_kinds(kind: str) -> None:
    assert "/".join(parse_kind(kind)) == kind


@pytest.mark.parametrize(
    "kind, fragment",
    [
        ("noslash", "expected '<vendor>/<class>'"),
        ("a/b/c", "expected '<vendor>/<class>'"),
        ("1vendor/claim", "vendor '1vendor' is invalid"),
        ("vendor-/claim", "vendor 'vendor-' is invalid"),
        ("vendor/cl@ss", "class 'cl@ss' is invalid"),
        ("/claim", "vendor must be a non-empty string"),
        ("../../etc/passwd", "expected '<vendor>/<class>'"),
        ("v" * 300 + "/c", "too long"),
        (None, "expected '<vendor>/<class>'"),
    ],
)
def test_invalid_kinds_are_named(kind, fragment: str) -> None:
    with pytest.raises(CDIError, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        parse_kind(kind)


@pytest.mark.parametrize("name", ["0abc-channel-0", "a", "9", "x.y:z_w-1"])
def test_valid_device_names(name: str) -> None:
    assert validate_device_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "a/b", "../x", "a b", "a=b", "x" * 254, 7])
def test_invalid_device_names(name) -> None:
    with pytest.raises(CDIError, match="device name"):
        validate_device_name(name)


def test_qualified_names_round_trip() -> None:
    device_id = qualified_name(KIND, "u-channel-0")
    assert device_id == "k8s.compute-domain.nvidia.com/claim=u-channel-0"
    assert parse_qualified_name(device_id) == (KIND, "u-channel-0")
    for bad in ["no-equals", f"{KIND}=a=b", "a=b", f"{KIND}=../x"]:
        with pytest.raises(CDIError):
            parse_qualified_name(bad)


# --- cdiVersion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, version",
    [
        (Spec(KIND, [Device("uid-channel-0", ContainerEdits(device_nodes=[channel_node()]))]), "0.3.0"),
        (
            Spec(KIND, [Device("a", ContainerEdits(mounts=[Mount("/h", "/c", ["bind"], type="bind")]))]),
            "0.4.0",
        ),
        (Spec(KIND, [Device("0uid-channel-0")]), "0.5.0"),
        (Spec(KIND, [Device("a", ContainerEdits(device_nodes=[channel_node(host_path="/dev/h")]))]), "0.5.0"),
        (
            Spec(KIND, [Device("a")], edits=ContainerEdits(device_nodes=[channel_node(host_path="/h")])),
            "0.5.0",
        ),
        (Spec(KIND, [Device("a", annotations={"k": "v"})]), "0.6.0"),
        (Spec(KIND, [Device("a")], annotations={"k": "v"}), "0.6.0"),
        (Spec("vendor.com/cl.ass", [Device("0a")]), "0.6.0"),
    ],
)
def test_cdi_version_is_the_minimum_for_the_features_used(spec: Spec, version: str) -> None:
    assert spec.to_dict()["cdiVersion"] == version
    assert Spec.from_dict(spec.to_dict()) == spec


def test_to_dict_shape() -> None:
    spec = Spec(
        KIND,
        [Device("0u-daemon-0", ContainerEdits(env=["A=1"], mounts=[Mount("/h", "/imexd", ["rw", "bind"])]))],
        edits=ContainerEdits(env=["B=2"]),
    )
    assert spec.to_dict() == {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "0u-daemon-0",
                "containerEdits": {
                    "env": ["A=1"],
                    "mounts": [{"hostPath": "/h", "containerPath": "/imexd", "options": ["rw", "bind"]}],
                },
            }
        ],
        "containerEdits": {"env": ["B=2"]},
    }


# --- validation when building -------------------------------------------------------------


@pytest.mark.parametrize(
    "edits, fragment",
    [
        (ContainerEdits(env=["NOEQUALS"]), r"env\[0\].*KEY=VALUE"),
        (ContainerEdits(env=["=v"]), r"env\[0\]"),
        (ContainerEdits(device_nodes=[DeviceNode("dev/x")]), "must be an absolute path"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/../etc/shadow")]), "must not contain '..'"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/x", type="z")]), "type"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/x", permissions="rwx")]), "permissions"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/x", minor=-1)]), "minor: -1 is out of range"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/x", major=True)]), "major: expected an integer"),
        (ContainerEdits(device_nodes=[DeviceNode("/dev/x", file_mode=0o70000)]), "fileMode"),
        (ContainerEdits(mounts=[Mount("/h", "/c/../../x")]), "containerPath"),
        (ContainerEdits(mounts=[Mount("rel", "/c")]), "hostPath"),
        (ContainerEdits(env=["A=\x00"]), "NUL"),
    ],
)
def test_invalid_edits_are_rejected_naming_the_field(edits: ContainerEdits, fragment: str) -> None:
    with pytest.raises(CDIError, match=fragment):
        Spec(KIND, [Device("a", edits)]).to_dict()


def test_spec_needs_unique_devices() -> None:
    with pytest.raises(CDIError, match="at least one device"):
        Spec(KIND, []).to_dict()
    with pytest.raises(CDIError, match="'a' appears twice"):
        Spec(KIND, [Device("a"), Device("a")]).to_dict()


# --- strict decoding ----------------------------------------------------------------------


def edit_device(doc: dict, **fields) -> dict:
    doc["devices"][0]["containerEdits"].update(fields)
    return doc


@pytest.mark.parametrize(
    "doc, fragment",
    [
        (spec_doc(extra=1), "unknown field 'extra'"),
        (
            spec_doc(devices=[{"name": "a", "containerEdits": {}, "bogus": 1}]),
            r"devices\[0\].*unknown field 'bogus'",
        ),
        (edit_device(spec_doc(), netDevices=[]), "cannot apply netDevices"),
        (edit_device(spec_doc(), hooks=[{"hookName": "createContainer", "path": "bin/hook"}]),
         r"hooks\[0\]\.path"),
        (edit_device(spec_doc(), hooks=[{"hookName": "onBoot", "path": "/bin/hook"}]), "hookName: 'onBoot'"),
        (edit_device(spec_doc(), env="A=1"), "env: expected a list of strings, got string"),
        (edit_device(spec_doc(), env=[1]), r"env\[0\]: expected a string"),
        (edit_device(spec_doc(), deviceNodes={}), "deviceNodes: expected a list, got object"),
        (edit_device(spec_doc(), deviceNodes=[{"path": "/d", "major": "234"}]), "major: expected an integer"),
        (edit_device(spec_doc(), deviceNodes=[{"path": "/d", "fileMode": 438, "x": 1}]), "unknown field 'x'"),
        (edit_device(spec_doc(), mounts=[{"hostPath": "/h"}]), "missing required field 'containerPath'"),
        (
            edit_device(spec_doc(), mounts=[{"hostPath": "/h", "containerPath": "/c", "options": "rw"}]),
            "options",
        ),
        (spec_doc(devices={}), "devices: expected a list"),
        (spec_doc(devices=[]), "at least one device"),
        (spec_doc(devices=["a"]), r"devices\[0\]: expected an object, got string"),
        (spec_doc(cdiVersion="0.4.0", devices=[{"name": "0uid"}]), "cdiVersion 0.4.0 is too old.*0.5.0"),
        (spec_doc(cdiVersion="9.9.9"), "cdiVersion '9.9.9' is unknown"),
        (spec_doc(cdiVersion=0.5), "cdiVersion 0.5 is unknown"),
        (spec_doc(kind="k8s.compute-domain.nvidia.com/../../x"), "kind"),
        (spec_doc(annotations={"k": 1}), "annotations"),
        ({"kind": KIND, "devices": []}, "missing required field 'cdiVersion'"),
        ([], "expected an object, got list"),
        (spec_doc(**{"x" * 10000: 1}), r"unknown field 'xxx.*\(10002 chars\)"),
    ],
)
def test_decoding_rejects_bad_documents(doc, fragment: str) -> None:
    with pytest.raises(CDIError, match=fragment) as info:
        Spec.from_dict(doc, source="/etc/cdi/bad.json")
    assert str(info.value).startswith("/etc/cdi/bad.json: ")
    assert len(str(info.value)) < 400


def test_decoding_accepts_upstream_shape() -> None:
    doc = spec_doc()
    doc["devices"][0]["containerEdits"]["deviceNodes"][0].update(hostPath="/dev/x", fileMode=438)
    spec = Spec.from_dict(doc)
    assert spec.devices[0].edits.device_nodes[0] == DeviceNode("/dev/x", "/dev/x", "c", 1, 2, file_mode=438)


# --- merging ------------------------------------------------------------------------------


def test_merge_later_edits_replace_same_key_path_or_mount_point() -> None:
    first = ContainerEdits(
        env=["A=1", "B=1"], device_nodes=[DeviceNode("/dev/a", minor=1)], mounts=[Mount("/h1", "/m")]
    )
    second = ContainerEdits(
        env=["B=2", "C=2"],
        device_nodes=[DeviceNode("/dev/a", minor=9), DeviceNode("/dev/b")],
        mounts=[Mount("/h2", "/m"), Mount("/h3", "/n")],
    )
    merged = merge_edits([first, second])
    assert merged.env == ["A=1", "B=2", "C=2"]
    assert [(n.path, n.minor) for n in merged.device_nodes] == [("/dev/a", 9), ("/dev/b", None)]
    assert [(m.host_path, m.container_path) for m in merged.mounts] == [("/h2", "/m"), ("/h3", "/n")]


def test_hooks_decode_validate_and_round_trip() -> None:
    """Other drivers' specs (the container toolkit's) carry hooks; they are read, not refused."""
    hook = {"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
            "args": ["nvidia-cdi-hook", "update-ldcache"], "env": ["DEBUG=false"], "timeout": 5}
    spec = Spec.from_dict(edit_device(spec_doc(), hooks=[hook]))
    (decoded,) = spec.devices[0].edits.hooks
    assert (decoded.hook_name, decoded.path, decoded.args, decoded.timeout) == (
        "createContainer", "/usr/bin/nvidia-cdi-hook", ["nvidia-cdi-hook", "update-ldcache"], 5)
    assert spec.devices[0].edits.to_dict()["hooks"] == [hook]
    merged = merge_edits([spec.devices[0].edits, spec.devices[0].edits])
    assert [h.path for h in merged.hooks] == ["/usr/bin/nvidia-cdi-hook"] * 2
