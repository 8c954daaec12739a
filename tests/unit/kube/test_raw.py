"""RawClient pure parts: resource paths, error classification, watch stream decoding, the
request log lines."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator

import pytest

import cdriver.api.resources  # noqa: F401 - registers the driver's CRDs in RESOURCES
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import object_key
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES, Resource
from cdriver.kube.watch import WatchStream


@pytest.mark.parametrize("plural,ns,name,sub,path", [
    ("pods", "default", "p1", None, "/api/v1/namespaces/default/pods/p1"),
    ("pods", None, None, None, "/api/v1/pods"),
    ("nodes", "ignored", "n1", "status", "/api/v1/nodes/n1/status"),
    ("daemonsets", "kube-system", None, None, "/apis/apps/v1/namespaces/kube-system/daemonsets"),
    ("resourceclaims", "a", "c", "status",
     "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c/status"),
    ("deviceclasses", None, "x", None, "/apis/resource.k8s.io/v1/deviceclasses/x"),
    ("computedomaincliques", "drv", "uid.clu.1", None,
     "/apis/resource.nvidia.com/v1beta1/namespaces/drv/computedomaincliques/uid.clu.1"),
    ("serviceaccounts", "ns", "sa", "token", "/api/v1/namespaces/ns/serviceaccounts/sa/token"),
    ("leases", "ns", "a/b", None, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/a%2Fb"),
])
def test_resource_paths(plural: str, ns: str | None, name: str | None, sub: str | None,
                        path: str) -> None:
    assert RESOURCES[plural].path(ns, name, sub) == path


def test_well_known_resources_are_present() -> None:
    required = {"pods", "nodes", "namespaces", "events", "leases", "serviceaccounts",
                "configmaps", "secrets", "daemonsets", "deployments", "roles", "rolebindings",
                "clusterroles", "clusterrolebindings", "resourceclaims",
                "resourceclaimtemplates", "resourceslices", "deviceclasses",
                "customresourcedefinitions", "computedomains", "computedomaincliques",
                "priorityclasses"}
    assert required <= set(RESOURCES)
    assert RESOURCES["resourceslices"].api_version == "resource.k8s.io/v1"
    assert not RESOURCES["resourceslices"].namespaced
    assert RESOURCES["computedomains"].api_version == "resource.nvidia.com/v1beta1"
    assert RESOURCES["pods"].api_version == "v1"


def test_empty_name_is_rejected() -> None:
    with pytest.raises(ValueError):
        RESOURCES["pods"].path("ns", "")


@pytest.mark.parametrize("status,reason,flags", [
    (404, "NotFound", {"not_found"}),
    (409, "AlreadyExists", {"already_exists"}),
    (409, "Conflict", {"conflict"}),
    (410, "Expired", {"gone"}),
    (422, "Invalid", {"invalid"}),
    (403, "Forbidden", {"forbidden"}),
    (0, "MaxRetryError", {"unavailable"}),
    (503, "ServiceUnavailable", {"unavailable"}),
    (429, "TooManyRequests", {"unavailable"}),
])
def test_api_error_classification(status: int, reason: str, flags: set[str]) -> None:
    err = ApiError(status, reason, "m")
    all_flags = {"not_found", "already_exists", "conflict", "gone", "invalid", "forbidden",
                 "unavailable"}
    assert {f for f in all_flags if getattr(err, f)} == flags


def test_api_error_from_status_body() -> None:
    body = {"kind": "Status", "code": 410, "reason": "Expired",
            "message": "too old resource version: 5 (90)"}
    err = ApiError.from_status(body)
    assert err.gone and err.status == 410 and "too old" in str(err)
    err = RawClient._error(409, "Conflict", json.dumps({
        "kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}).encode(),
        "POST", "/api/v1/namespaces")
    assert err.already_exists and err.message == "exists"
    err = RawClient._error(502, "Bad Gateway", b"<html>proxy</html>", "GET", "/x")
    assert err.status == 502 and "proxy" in err.message


class StubResponse:
    """Stands in for urllib3's streaming response: yields pre-cut byte chunks."""

    def __init__(self, chunks: list[bytes], block: threading.Event | None = None) -> None:
        self.chunks = chunks
        self.block = block
        self.shut = False
        self.released = False

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks
        if self.block is not None:
            self.block.wait(10)
            if self.shut:
                raise OSError("connection shut down")

    def shutdown(self) -> None:
        self.shut = True
        if self.block is not None:
            self.block.set()

    def release_conn(self) -> None:
        self.released = True


def event_line(etype: str, name: str, rv: str) -> bytes:
    return json.dumps({"type": etype, "object": {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}}).encode() + b"\n"


def test_watch_lines_split_across_chunks() -> None:
    data = event_line("ADDED", "a", "1") + event_line("MODIFIED", "a", "2") + \
        event_line("BOOKMARK", "", "3") + event_line("DELETED", "a", "4")
    chunks = [data[i:i + 7] for i in range(0, len(data), 7)]
    resp = StubResponse(chunks)
    events = list(WatchStream(resp))
    assert [(t, o["metadata"]["resourceVersion"]) for t, o in events] == [
        ("ADDED", "1"), ("MODIFIED", "2"), ("BOOKMARK", "3"), ("DELETED", "4")]
    assert resp.released


def test_watch_error_event_raises_gone() -> None:
    error = json.dumps({"type": "ERROR", "object": {
        "kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}).encode()
    stream = WatchStream(StubResponse([event_line("ADDED", "a", "1"), error + b"\n"]))
    seen = []
    with pytest.raises(ApiError) as err:
        for event in stream:
            seen.append(event)
    assert err.value.gone
    assert len(seen) == 1


def test_watch_garbage_line_raises() -> None:
    with pytest.raises(ApiError, match="undecodable watch line"):
        list(WatchStream(StubResponse([b"{not json\n"])))


def test_watch_close_from_another_thread_ends_iteration() -> None:
    block = threading.Event()
    resp = StubResponse([event_line("ADDED", "a", "1")], block=block)
    stream = WatchStream(resp)
    got: list[str] = []
    done = threading.Event()

    def consume() -> None:
        for etype, _ in stream:
            got.append(etype)
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    stream.close()
    assert done.wait(10)
    thread.join()
    assert resp.shut and stream.closed


def test_object_key() -> None:
    assert object_key({"metadata": {"name": "n", "namespace": "s"}}) == "s/n"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"


def test_resource_is_hashable_and_custom() -> None:
    res = Resource("example.com", "v1", "widgets", True, "Widget")
    assert res.path("ns", "w") == "/apis/example.com/v1/namespaces/ns/widgets/w"
    assert {res: 1}[Resource("example.com", "v1", "widgets", True, "Widget")] == 1


class _Reply:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.reason, self.data = status, "", data

    def release_conn(self) -> None:
        pass


class _Connection:
    """A connection whose pool answers every request with one status."""

    host = "https://api.test"

    def __init__(self, status: int, data: bytes = b"{}") -> None:
        self.pool = self
        self.reply = _Reply(status, data)

    def request(self, method: str, url: str, **_kw: object) -> _Reply:
        return self.reply

    def headers(self) -> dict[str, str]:
        return {}


def test_each_request_logs_method_path_status_and_latency(caplog: pytest.LogCaptureFixture) -> None:
    from cdriver.logs import API_REQUESTS_LOGGER

    with caplog.at_level(logging.DEBUG, logger=API_REQUESTS_LOGGER):
        RawClient(_Connection(200)).list(RESOURCES["pods"], "default", label_selector="a=b")
        with pytest.raises(ApiError):
            RawClient(_Connection(404, b'{"kind": "Status", "reason": "NotFound"}')).get(
                RESOURCES["pods"], "p1", "default")
    lines = [r.getMessage() for r in caplog.records if r.name == API_REQUESTS_LOGGER]
    assert len(lines) == 2
    assert re.fullmatch(r"GET https://api\.test/api/v1/namespaces/default/pods\?labelSelector=a%3Db 200 in \d+ ms",
                        lines[0])
    assert re.fullmatch(r"GET https://api\.test/api/v1/namespaces/default/pods/p1 404 in \d+ ms", lines[1])


def test_requests_are_not_logged_below_their_grade(caplog: pytest.LogCaptureFixture) -> None:
    from cdriver.logs import API_REQUESTS_LOGGER

    with caplog.at_level(logging.INFO, logger=API_REQUESTS_LOGGER):
        RawClient(_Connection(200)).list(RESOURCES["pods"], "default")
    assert [r for r in caplog.records if r.name == API_REQUESTS_LOGGER] == []
