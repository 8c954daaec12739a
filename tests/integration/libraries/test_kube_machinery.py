"""RawClient, Informer, LeaderElector and EventRecorder against the real kube-apiserver."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from cdriver.kube.errors import ApiError
from cdriver.kube.events import MAX_MESSAGE_LEN, EventRecorder
from cdriver.kube.informer import Informer, label_index
from cdriver.kube.leader import LeaderElector
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES, Resource
from cdriver.kube.workqueue import WorkQueue
from tests.support.waiting import wait_for

CM = RESOURCES["configmaps"]
CLAIMS = RESOURCES["resourceclaims"]
LEASES = RESOURCES["leases"]


def configmap(name: str, labels: dict | None = None, data: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


def test_crud_patch_and_errors(raw: RawClient, namespace: str) -> None:
    created = raw.create(CM, configmap("a", {"app": "x"}, {"k": "1"}), namespace)
    assert created["kind"] == "ConfigMap" and created["metadata"]["uid"]
    with pytest.raises(ApiError) as err:
        raw.create(CM, configmap("a"), namespace)
    assert err.value.already_exists

    raw.create(CM, configmap("b", {"app": "y"}), namespace)
    listed = raw.list(CM, namespace, label_selector="app=x")
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a"]
    assert listed["metadata"]["resourceVersion"]
    by_field = raw.list(CM, namespace, field_selector="metadata.name=b")
    assert [o["metadata"]["name"] for o in by_field["items"]] == ["b"]

    stale = dict(created, data={"k": "2"})
    current = raw.update(CM, stale, namespace)
    assert current["data"] == {"k": "2"}
    with pytest.raises(ApiError) as err:
        raw.update(CM, dict(created, data={"k": "3"}), namespace)  # old resourceVersion
    assert err.value.conflict and err.value.status == 409

    merged = raw.patch(CM, "a", {"data": {"m": "merge"}}, namespace)
    assert merged["data"] == {"k": "2", "m": "merge"}
    jsoned = raw.patch(CM, "a", [{"op": "remove", "path": "/data/k"}], namespace,
                       patch_type="json")
    assert jsoned["data"] == {"m": "merge"}
    strategic = raw.patch(CM, "a", {"metadata": {"labels": {"s": "1"}}}, namespace,
                          patch_type="strategic")
    assert strategic["metadata"]["labels"] == {"app": "x", "s": "1"}
    applied = raw.patch(CM, "c", {"metadata": {"name": "c", "namespace": namespace},
                                  "data": {"owner": "apply"}}, namespace,
                        patch_type="apply", field_manager="cdriver-test")
    assert applied["data"] == {"owner": "apply"}

    with pytest.raises(ApiError) as err:
        raw.delete(CM, "a", namespace, precondition_uid="not-the-uid")
    assert err.value.conflict
    raw.delete(CM, "a", namespace, precondition_uid=created["metadata"]["uid"])
    with pytest.raises(ApiError) as err:
        raw.get(CM, "a", namespace)
    assert err.value.not_found
    assert raw.get_or_none(CM, "a", namespace) is None

    with pytest.raises(ApiError) as err:
        raw.create(CM, {"metadata": {"name": "Bad_Name"}}, namespace)
    assert err.value.invalid and "Bad_Name" in err.value.message


def test_cluster_scoped_and_status_and_subresources(raw: RawClient, namespace: str) -> None:
    ns = raw.get(RESOURCES["namespaces"], namespace)
    assert ns["status"]["phase"] == "Active"
    token = raw.create_subresource(
        RESOURCES["serviceaccounts"], "default", "token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 600}}, namespace)
    assert token["status"]["token"]
    assert raw.request("GET", "/readyz") == "ok"


def claim(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [
        {"name": "channel", "exactly": {"deviceClassName": "example-class"}}]}}}


def test_watch_resource_claims_as_raw_json(raw: RawClient, namespace: str) -> None:
    start_rv = raw.list(CLAIMS, namespace)["metadata"]["resourceVersion"]
    raw.create(CLAIMS, claim("c1"), namespace)
    raw.patch(CLAIMS, "c1", {"metadata": {"labels": {"step": "2"}}}, namespace)
    raw.delete(CLAIMS, "c1", namespace)
    seen: list[tuple[str, str]] = []
    with raw.watch(CLAIMS, namespace, resource_version=start_rv, timeout_seconds=10) as stream:
        for etype, obj in stream:
            if etype == "BOOKMARK":
                continue
            seen.append((etype, obj["metadata"]["name"]))
            assert obj["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == \
                "example-class"
            if etype == "DELETED":
                break
    assert seen == [("ADDED", "c1"), ("MODIFIED", "c1"), ("DELETED", "c1")]


@pytest.fixture
def widgets(raw: RawClient, namespace: str) -> Iterator[Resource]:
    """A namespaced custom resource made for this test.

    Its watch cache starts when the CRD is established, so a resourceVersion from before
    that is expired (410) for it, as it would be after etcd compaction in a long-lived cluster.
    """
    group = f"{namespace}.cdriver.example.com"
    crds = RESOURCES["customresourcedefinitions"]
    raw.create(crds, {
        "metadata": {"name": f"widgets.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                           "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object",
                                  "x-kubernetes-preserve-unknown-fields": True}}}}}]},
    })

    def established() -> bool:
        crd = raw.get(crds, f"widgets.{group}")
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])

    wait_for("CRD established", established)
    res = Resource(group, "v1", "widgets", True, "Widget")
    wait_for("CRD served", lambda: _served(raw, res, namespace))
    yield res
    raw.delete(crds, f"widgets.{group}")


def _served(raw: RawClient, res: Resource, namespace: str) -> bool:
    try:
        raw.list(res, namespace)
        return True
    except ApiError as exc:
        if exc.not_found:
            return False
        raise


def widget(name: str, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"size": 1}}


def test_watch_from_an_expired_resource_version_is_gone(
    raw: RawClient, namespace: str, widgets: Resource,
) -> None:
    raw.create(widgets, widget("w1"), namespace)
    with pytest.raises(ApiError) as err:
        with raw.watch(widgets, namespace, resource_version="1", timeout_seconds=5) as stream:
            for _ in stream:
                pass
    assert err.value.gone and err.value.status == 410


def test_shared_client_across_threads(raw: RawClient, namespace: str) -> None:
    for i in range(4):
        raw.create(CM, configmap(f"t{i}", {"pool": "yes"}), namespace)

    def work(i: int) -> int:
        total = 0
        for _ in range(15):
            total += len(raw.list(CM, namespace, label_selector="pool=yes")["items"])
            raw.patch(CM, f"t{i % 4}", {"data": {str(i): "x"}}, namespace)
        return total

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    assert results == [60] * 8
    data = {k for i in range(4) for k in raw.get(CM, f"t{i}", namespace)["data"]}
    assert data == {str(i) for i in range(8)}


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, str]] = []
        self.resyncs = 0

    def add(self, obj: dict) -> None:
        self._note("add", obj)

    def update(self, old: dict, new: dict) -> None:
        if old is new:
            with self.lock:
                self.resyncs += 1
            return
        self._note("update", new)

    def delete(self, obj: dict) -> None:
        self._note("delete", obj)

    def _note(self, kind: str, obj: dict) -> None:
        with self.lock:
            self.events.append((kind, obj["metadata"]["name"],
                                (obj.get("data") or {}).get("v", "")))

    def names(self, kind: str) -> list[str]:
        with self.lock:
            return [name for k, name, _ in self.events if k == kind]


def test_informer_mirrors_changes_indexes_and_resyncs(raw: RawClient, namespace: str) -> None:
    raw.create(CM, configmap("pre", {"team": "red", "watched": "1"}), namespace)
    raw.create(CM, configmap("other", {"team": "red"}), namespace)
    informer = Informer(raw, CM, namespace, label_selector="watched=1", resync_seconds=0.5,
                        watch_timeout_seconds=5)
    informer.add_index("team", label_index("team"))
    rec = Recorder()
    informer.add_handler(rec.add, rec.update, rec.delete)
    informer.start()
    try:
        assert informer.wait_synced(20)
        assert rec.names("add") == ["pre"]  # handlers ran for the initial list
        assert informer.get(f"{namespace}/pre")["kind"] == "ConfigMap"

        raw.create(CM, configmap("new", {"team": "blue", "watched": "1"}, {"v": "1"}), namespace)
        raw.patch(CM, "new", {"data": {"v": "2"}}, namespace)
        wait_for("update of 'new'", lambda: ("update", "new", "2") in rec.events)
        assert [o["metadata"]["name"] for o in informer.by_index("team", "blue")] == ["new"]
        assert informer.by_index("team", "green") == []

        raw.patch(CM, "new", {"metadata": {"labels": {"team": "green"}}}, namespace)
        wait_for("reindex", lambda: informer.by_index("team", "green"))
        assert informer.by_index("team", "blue") == []

        raw.delete(CM, "pre", namespace)
        wait_for("delete of 'pre'", lambda: "pre" in rec.names("delete"))
        assert informer.get(f"{namespace}/pre") is None
        assert sorted(o["metadata"]["name"] for o in informer.objects()) == ["new"]

        wait_for("periodic resync", lambda: rec.resyncs >= 2)

    finally:
        informer.stop()
    assert all(not t.is_alive() for t in informer._threads)
    assert "other" not in rec.names("add")


def test_informer_relists_when_its_resource_version_expires(
    raw: RawClient, namespace: str, widgets: Resource,
) -> None:
    raw.create(widgets, widget("before"), namespace)
    informer = Informer(raw, widgets, namespace, watch_timeout_seconds=5)
    rec = Recorder()
    informer.add_handler(rec.add, rec.update, rec.delete)
    informer.start()
    try:
        assert informer.wait_synced(20)
        assert rec.names("add") == ["before"]
        wait_for("watch open", lambda: informer._stream is not None)
        relists = informer.relist_count
        # The next watch starts from a resourceVersion the server no longer serves (410):
        # the informer must relist and still deliver what changed in between.
        informer._resource_version = "1"
        stream = informer._stream
        if stream is not None:  # else the watch just ended and the next one uses "1"
            stream.close()
        raw.create(widgets, widget("after"), namespace)
        raw.delete(widgets, "before", namespace)
        wait_for("relist", lambda: informer.relist_count > relists)
        wait_for("changes across the relist", lambda: "after" in rec.names("add") and "before" in rec.names("delete"))
        assert [o["metadata"]["name"] for o in informer.objects()] == ["after"]
        assert informer.get(f"{namespace}/after")["kind"] == "Widget"
    finally:
        informer.stop()


def test_informer_feeds_a_work_queue(raw: RawClient, namespace: str) -> None:
    handled: list[str] = []
    informer = Informer(raw, CM, namespace, watch_timeout_seconds=5)
    queue = WorkQueue(lambda key: handled.append(key), workers=2, base_delay=0.01)
    informer.add_handler(on_add=lambda o: queue.add(f"{namespace}/{o['metadata']['name']}"))
    queue.start()
    informer.start()
    try:
        assert informer.wait_synced(20)
        for i in range(5):
            raw.create(CM, configmap(f"q{i}"), namespace)
        wait_for("queued keys", lambda: {f"{namespace}/q{i}" for i in range(5)} <= set(handled))
    finally:
        informer.stop()
        queue.stop()


def test_leader_election_hands_over_on_release(raw: RawClient, namespace: str) -> None:
    log: list[str] = []
    lock = threading.Lock()

    def note(event: str) -> Callable[[], None]:
        def cb() -> None:
            with lock:
                log.append(event)
        return cb

    electors = [LeaderElector(raw, namespace, "cdriver-test", ident, lease_seconds=4,
                              renew_seconds=3, retry_seconds=0.2) for ident in ("one", "two")]
    tries = {e.identity: 0 for e in electors}
    for elector in electors:
        def counted(call: Callable[[], bool] = elector.try_acquire_or_renew, ident: str = elector.identity) -> bool:
            with lock:
                tries[ident] += 1
            return call()
        elector.try_acquire_or_renew = counted  # type: ignore[method-assign]
        elector.run(note(f"{elector.identity}:start"), note(f"{elector.identity}:stop"))
    try:
        wait_for("a leader", lambda: any(e.is_leader for e in electors))
        leader = next(e for e in electors if e.is_leader)
        other = next(e for e in electors if e is not leader)
        before = tries[other.identity]
        # the other candidate gets several rounds to (wrongly) take over
        wait_for("three more tries of the other candidate", lambda: tries[other.identity] >= before + 3)
        assert leader.is_leader and not other.is_leader
        lease = raw.get(LEASES, "cdriver-test", namespace)
        assert lease["spec"]["holderIdentity"] == leader.identity
        assert lease["spec"]["leaseDurationSeconds"] == 4

        leader.stop()
        assert not leader.is_leader
        wait_for("hand-over to the other candidate", lambda: other.is_leader)
        lease = raw.get(LEASES, "cdriver-test", namespace)
        assert lease["spec"]["holderIdentity"] == other.identity
        assert lease["spec"]["leaseTransitions"] >= 1
        wait_for("start callback", lambda: f"{other.identity}:start" in log)
        assert f"{leader.identity}:start" in log and f"{leader.identity}:stop" in log
    finally:
        for elector in electors:
            elector.stop()
    lease = raw.get(LEASES, "cdriver-test", namespace)
    assert lease["spec"].get("holderIdentity", "") == ""


def test_event_recorder_aggregates_and_never_raises(raw: RawClient, namespace: str) -> None:
    obj = raw.create(CM, configmap("subject"), namespace)
    recorder = EventRecorder(raw, "cdriver-test", host="node-1")
    recorder.warning(obj, "Forced", "allocationMode All is forced to Single")
    recorder.warning(obj, "Forced", "allocationMode All is forced to Single")
    recorder.normal(obj, "Long", "m" * 5000)
    events = raw.list(RESOURCES["events"], namespace,
                      field_selector="involvedObject.name=subject")["items"]
    by_reason = {e["reason"]: e for e in events}
    assert set(by_reason) == {"Forced", "Long"}
    forced = by_reason["Forced"]
    assert forced["count"] == 2 and forced["type"] == "Warning"
    assert forced["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert forced["involvedObject"]["kind"] == "ConfigMap"
    assert forced["source"] == {"component": "cdriver-test", "host": "node-1"}
    assert len(by_reason["Long"]["message"]) == MAX_MESSAGE_LEN

    # An object in a namespace that does not exist: the write fails, nothing is raised.
    recorder.warning({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "no-such"}},
                     "Lost", "nowhere to go")


def test_created_claim_template_can_be_labelled_later(raw: RawClient, namespace: str, cluster) -> None:
    """An object with an opaque config written by us stays patchable by other clients (kubectl)."""
    import subprocess

    body = {"metadata": {"name": "tmpl"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "r", "exactly": {"deviceClassName": "any.example.com"}}],
        "config": [{"requests": ["r"], "opaque": {"driver": "compute-domain.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig",
            "domainID": "d1", "allocationMode": "Single"}}}]}}}}
    raw.create(RESOURCES["resourceclaimtemplates"], body, namespace)
    out = subprocess.run([str(cluster.binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), "label",
                          "-n", namespace, "resourceclaimtemplate", "tmpl", "team=a"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    labels = raw.get(RESOURCES["resourceclaimtemplates"], "tmpl", namespace)["metadata"]["labels"]
    assert labels == {"team": "a"}
