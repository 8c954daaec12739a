"""The generated stubs carry the exact kubelet wire contract and match the .proto sources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from cdriver.checkout import HACK_DIR
from cdriver.dra.gen.dra.v1 import api_pb2 as v1
from cdriver.dra.gen.dra.v1beta1 import api_pb2 as v1beta1
from cdriver.dra.gen.grpc_health.v1 import health_pb2
from cdriver.dra.gen.pluginregistration.v1 import api_pb2 as reg


def _load_codegen():
    """The development-only generator in hack/ (not part of the installed package)."""
    path = HACK_DIR / "codegen.py"
    spec = importlib.util.spec_from_file_location("cdriver_hack_codegen", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


codegen = _load_codegen()


def fields(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def test_all_descriptors_load_together_with_distinct_file_names():
    names = {m.DESCRIPTOR.name for m in (v1, v1beta1, reg, health_pb2)}
    assert len(names) == 4


def test_registration_service_and_fields():
    svc = reg.DESCRIPTOR.services_by_name["Registration"]
    assert svc.full_name == "pluginregistration.Registration"
    assert [m.name for m in svc.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    assert fields(reg.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert fields(reg.RegistrationStatus) == {"plugin_registered": 1, "error": 2}


@pytest.mark.parametrize(
    "mod,package", [(v1, "k8s.io.kubelet.pkg.apis.dra.v1"), (v1beta1, "k8s.io.kubelet.pkg.apis.dra.v1beta1")]
)
def test_dra_node_service_names_and_fields(mod, package):
    svc = mod.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert svc.full_name == f"{package}.DRAPlugin"
    assert {m.name for m in svc.methods} == {"NodePrepareResources", "NodeUnprepareResources"}
    assert fields(mod.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert fields(mod.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert fields(mod.NodeUnprepareResourceResponse) == {"error": 1}
    assert fields(mod.NodePrepareResourcesRequest) == {"claims": 1}
    assert fields(mod.NodePrepareResourcesResponse) == {"claims": 1}
    assert (
        mod.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"]
        .message_type.GetOptions()
        .map_entry
    )


def test_device_share_id_only_in_v1():
    assert fields(v1.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert fields(v1beta1.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
    }
    d = v1.Device()
    assert not d.HasField("share_id")


def test_v1_and_v1beta1_messages_are_wire_compatible():
    msg = v1beta1.NodePrepareResourcesResponse()
    msg.claims["u1"].devices.add(
        request_names=["r"], pool_name="n", device_name="channel-0", cdi_device_ids=["a/b=c"]
    )
    back = v1.NodePrepareResourcesResponse.FromString(msg.SerializeToString())
    assert back.claims["u1"].devices[0].device_name == "channel-0"


def test_generated_stubs_match_protos(tmp_path: Path):
    out = tmp_path / "gen"
    codegen.regenerate(out_dir=out)
    committed = {p.relative_to(codegen.GEN_ROOT): p.read_text() for p in codegen.GEN_ROOT.rglob("*.py")}
    fresh = {p.relative_to(out): p.read_text() for p in out.rglob("*.py")}
    assert fresh.keys() == committed.keys()
    stale = [str(k) for k in fresh if fresh[k] != committed[k]]
    assert not stale, f"regenerate with `make protos`: {stale}"


def test_rewrite_imports_only_touches_generated_packages():
    text = (
        "from dra.v1 import api_pb2 as dra_dot_v1_dot_api__pb2\n"
        "from google.protobuf import empty_pb2 as google_dot_protobuf_dot_empty__pb2\n"
    )
    out = codegen.rewrite_imports(text, {"dra"})
    assert "from cdriver.dra.gen.dra.v1 import api_pb2 as" in out
    assert "from google.protobuf import empty_pb2 as" in out
