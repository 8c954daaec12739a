"""resource.k8s.io version choice and the v1 <-> v1beta1/v1beta2 shape conversion."""

from __future__ import annotations

import copy
import threading

import pytest

from cdriver.kube.resource_versions import choose_version, from_served, served_versions, to_served

SLICE_V1 = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-slice"},
    "spec": {"driver": "compute-domain.nvidia.com", "nodeName": "n1",
             "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
             "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
                         {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}]},
}
SLICE_V1BETA1_DEVICES = [
    {"name": "channel-0", "basic": {"attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}},
    {"name": "daemon-0", "basic": {"attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}},
]
CONFIG = [{"requests": ["channel"], "opaque": {"driver": "compute-domain.nvidia.com",
                                              "parameters": {"kind": "ComputeDomainChannelConfig"}}}]
CLAIM_SPEC_V1 = {"devices": {
    "requests": [{"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com",
                                                 "allocationMode": "ExactCount", "count": 1}},
                 {"name": "either", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}],
    "config": CONFIG}}
CLAIM_SPEC_V1BETA1_REQUESTS = [
    {"name": "channel", "deviceClassName": "compute-domain-default-channel.nvidia.com",
     "allocationMode": "ExactCount", "count": 1},
    {"name": "either", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]},
]


@pytest.mark.parametrize(("served", "chosen"), [
    (["v1", "v1beta2", "v1beta1"], "v1"),     # 1.34+
    (["v1beta2", "v1beta1"], "v1beta2"),      # 1.33 with both betas enabled
    (["v1beta1"], "v1beta1"),                 # 1.32
    (["v1alpha3"], None),                     # 1.31: not supported
    ([], None),                               # DRA off
])
def test_the_newest_supported_served_version_is_chosen(served: list[str], chosen: str | None) -> None:
    assert choose_version(served) == chosen


def test_served_versions_come_from_the_api_group_document() -> None:
    doc = {"kind": "APIGroup", "name": "resource.k8s.io", "versions": [
        {"groupVersion": "resource.k8s.io/v1beta2", "version": "v1beta2"},
        {"groupVersion": "resource.k8s.io/v1beta1", "version": "v1beta1"}]}
    assert served_versions(doc) == ["v1beta2", "v1beta1"]
    assert served_versions({}) == []


def test_v1beta1_slice_devices_wrap_everything_but_the_name_in_basic() -> None:
    original = copy.deepcopy(SLICE_V1)
    wire = to_served(SLICE_V1, "v1beta1", "ResourceSlice")
    assert wire["apiVersion"] == "resource.k8s.io/v1beta1"
    assert wire["spec"]["devices"] == SLICE_V1BETA1_DEVICES
    assert wire["spec"]["pool"] == SLICE_V1["spec"]["pool"]
    assert SLICE_V1 == original, "the caller's object is not changed"
    assert from_served(wire, "v1beta1", "ResourceSlice") == SLICE_V1


def test_v1beta1_claim_requests_are_flat_and_first_available_stays() -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "ns"}, "spec": CLAIM_SPEC_V1,
             "status": {"allocation": {"devices": {"results": [
                 {"request": "channel", "driver": "compute-domain.nvidia.com", "pool": "n1",
                  "device": "channel-0"}]}}}}
    wire = to_served(claim, "v1beta1", "ResourceClaim")
    assert wire["spec"]["devices"]["requests"] == CLAIM_SPEC_V1BETA1_REQUESTS
    assert wire["spec"]["devices"]["config"] == CONFIG
    assert wire["status"] == claim["status"]
    assert from_served(wire, "v1beta1", "ResourceClaim") == claim


def test_v1beta1_claim_template_converts_its_inner_claim_spec() -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "ns"},
                "spec": {"metadata": {"labels": {"a": "b"}}, "spec": CLAIM_SPEC_V1}}
    wire = to_served(template, "v1beta1", "ResourceClaimTemplate")
    assert wire["spec"]["spec"]["devices"]["requests"] == CLAIM_SPEC_V1BETA1_REQUESTS
    assert wire["spec"]["metadata"] == {"labels": {"a": "b"}}
    assert from_served(wire, "v1beta1", "ResourceClaimTemplate") == template


def test_list_items_without_kind_or_api_version_convert_by_the_given_kind() -> None:
    item = {"metadata": {"name": "n1-slice"}, "spec": {**SLICE_V1["spec"], "devices": SLICE_V1BETA1_DEVICES}}
    assert from_served(item, "v1beta1", "ResourceSlice") == {"metadata": {"name": "n1-slice"},
                                                             "spec": SLICE_V1["spec"]}


def test_v1beta2_differs_only_in_the_api_version() -> None:
    wire = to_served(SLICE_V1, "v1beta2", "ResourceSlice")
    assert wire == {**SLICE_V1, "apiVersion": "resource.k8s.io/v1beta2"}
    assert from_served(wire, "v1beta2", "ResourceSlice") == SLICE_V1


def test_device_classes_and_metadata_patches_keep_their_shape() -> None:
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
           "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    assert to_served(cls, "v1beta1", "DeviceClass") == {**cls, "apiVersion": "resource.k8s.io/v1beta1"}
    patch = {"metadata": {"finalizers": []}}
    assert to_served(patch, "v1beta1", "ResourceClaimTemplate") == patch
    assert to_served(SLICE_V1, "v1", "ResourceSlice") is SLICE_V1


class FakeServer:
    """Answers RawClient requests like an API server that serves `versions` of resource.k8s.io."""

    def __init__(self, versions: list[str]) -> None:
        self.versions = versions
        self.calls: list[tuple[str, str, object]] = []

    def request(self, method: str, path: str, query: object = None, body: object = None,
                content_type: object = None, timeout: object = None, **_kw: object) -> object:
        from cdriver.kube.errors import ApiError

        self.calls.append((method, path, body))
        if path == "/apis/resource.k8s.io":
            if not self.versions:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return {"kind": "APIGroup", "versions": [{"version": v} for v in self.versions]}
        if method == "GET":
            return {"items": [{"metadata": {"name": "n1-slice"},
                               "spec": {**SLICE_V1["spec"], "devices": SLICE_V1BETA1_DEVICES}}],
                    "metadata": {}}
        return body


def fake_client(server: FakeServer) -> object:
    from cdriver.kube.raw import RawClient

    client = RawClient.__new__(RawClient)
    client._served, client._served_lock = {}, threading.Lock()
    client.connection = type("C", (), {"host": "https://apiserver"})()
    client.request = server.request  # type: ignore[method-assign]
    return client


def test_client_speaks_the_served_version_and_converts_both_ways() -> None:
    from cdriver.kube.resources import RESOURCES

    server = FakeServer(["v1beta1"])
    client = fake_client(server)
    listed = client.list(RESOURCES["resourceslices"])
    assert listed["items"] == [{"metadata": {"name": "n1-slice"}, "spec": SLICE_V1["spec"]}]
    sent = client.create(RESOURCES["resourceslices"], SLICE_V1)
    method, path, body = server.calls[-1]
    assert (method, path) == ("POST", "/apis/resource.k8s.io/v1beta1/resourceslices")
    assert body["apiVersion"] == "resource.k8s.io/v1beta1" and body["spec"]["devices"] == SLICE_V1BETA1_DEVICES
    assert sent == SLICE_V1, "the answer is converted back to v1"
    assert [c[1] for c in server.calls].count("/apis/resource.k8s.io") == 1, "discovered once"
    client.get(RESOURCES["pods"], "p", "ns")
    assert server.calls[-1][1] == "/api/v1/namespaces/ns/pods/p"


def test_client_without_dra_says_how_to_turn_it_on() -> None:
    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    with pytest.raises(ApiError) as err:
        fake_client(FakeServer([])).list(RESOURCES["resourceclaims"], "ns")
    assert "--feature-gates=DynamicResourceAllocation=true" in err.value.message
    assert "serves resource.k8s.io versions none" in err.value.message
