"""The plugin's per-domain watches: a domain is watched alone, by cdriver's UID label or, for a
domain no cdriver controller labelled yet, by name in its claims' namespace; nothing else."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.kube.errors import ApiError
from cdriver.roles.kubelet_plugin import domains as domains_module
from cdriver.roles.kubelet_plugin.domains import DomainWatches, uid_selector


def cd(name: str, namespace: str, uid: str, labelled: bool = True) -> dict:
    labels = {constants.LABEL_DOMAIN_UID: uid} if labelled else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels}}


class Cluster:
    """The API server's ComputeDomains, and every list and watch asked of it."""

    def __init__(self, *items: dict, syncs: bool = True) -> None:
        self.items = list(items)
        self.syncs = syncs
        self.started: list[dict] = []
        self.lists: list[str] = []
        self.fail_lists = False

    def list(self, _res: object, namespace: str | None = None) -> dict:
        if self.fail_lists:
            raise ApiError(503, "ServiceUnavailable", "down")
        self.lists.append(namespace or "")
        return {"items": [o for o in self.items if namespace in (None, o["metadata"]["namespace"])]}

    def informer(self, _raw: object, _res: object, namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None) -> FakeInformer:
        selectors = {"namespace": namespace, "label_selector": label_selector, "field_selector": field_selector}
        self.started.append(selectors)
        return FakeInformer(self, selectors)


class FakeInformer:
    def __init__(self, cluster: Cluster, selectors: dict) -> None:
        self.cluster, self.selectors = cluster, selectors
        self.stopped = False
        self.handlers: list[tuple] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def wait_synced(self, _timeout: float) -> bool:
        return self.cluster.syncs

    def add_handler(self, on_add: object = None, on_update: object = None, on_delete: object = None) -> None:
        self.handlers.append((on_add, on_update, on_delete))

    def objects(self) -> list[dict]:
        out = []
        for o in self.cluster.items:
            meta = o["metadata"]
            label, field = self.selectors["label_selector"], self.selectors["field_selector"]
            if label and label != uid_selector(meta["labels"].get(constants.LABEL_DOMAIN_UID, "")):
                continue
            if field and (field != f"metadata.name={meta['name']}" or self.selectors["namespace"] != meta["namespace"]):
                continue
            out.append(o)
        return out


def watches(cluster: Cluster) -> DomainWatches:
    return DomainWatches(cluster, make_informer=cluster.informer, sync_timeout=0.1)  # type: ignore[arg-type]


def test_a_labelled_domain_is_watched_alone_by_its_uid_label_and_once() -> None:
    cluster = Cluster(cd("a", "team", "uid-a"), cd("b", "team", "uid-b"))
    w = watches(cluster)
    assert w.get("uid-a")["metadata"]["name"] == "a"
    assert w.get("uid-a")["metadata"]["name"] == "a"
    assert cluster.started == [{"namespace": None, "label_selector": uid_selector("uid-a"), "field_selector": None}]
    assert cluster.lists == []  # no namespace listed: the label found it
    assert w.watched() == ["uid-a"]


def test_an_unlabelled_domain_is_found_in_its_claims_namespace_and_watched_by_name() -> None:
    cluster = Cluster(cd("a", "team", "uid-a", labelled=False), cd("x", "other", "uid-x", labelled=False))
    w = watches(cluster)
    w.hint("uid-a", "team")
    assert w.get("uid-a")["metadata"]["name"] == "a"
    assert cluster.lists == ["team"]
    assert cluster.started[-1] == {"namespace": "team", "label_selector": None, "field_selector": "metadata.name=a"}
    # without a namespace to look in, an unlabelled domain is not found (nothing lists the cluster)
    assert w.get("uid-x") is None
    assert cluster.lists == ["team"]


def test_a_missing_domain_is_remembered_as_absent_briefly_then_looked_for_again(monkeypatch) -> None:
    cluster = Cluster()
    w = watches(cluster)
    assert w.lookup("uid-a") == (True, None)
    assert w.lookup("uid-a") == (True, None)
    assert len(cluster.started) == 1  # the second answer came from memory
    monkeypatch.setattr(domains_module, "ABSENT_RECHECK_S", 0.0)
    cluster.items.append(cd("a", "team", "uid-a"))
    assert w.get("uid-a")["metadata"]["uid"] == "uid-a"
    assert len(cluster.started) == 2


def test_an_api_that_does_not_answer_makes_no_domain_absent() -> None:
    cluster = Cluster(cd("a", "team", "uid-a"), syncs=False)
    w = watches(cluster)
    assert w.lookup("uid-a") == (False, None)
    assert w.existing(["uid-a"]) is None  # the sweeper then takes nothing as deleted
    assert w.watched() == []
    cluster.syncs = True
    assert w.existing(["uid-a", "uid-gone"]) == {"uid-a"}


def test_a_failed_namespace_list_is_unknown_not_absent() -> None:
    cluster = Cluster(cd("a", "team", "uid-a", labelled=False))
    cluster.fail_lists = True
    w = watches(cluster)
    w.hint("uid-a", "team")
    assert w.lookup("uid-a") == (False, None)


def test_handlers_reach_every_watch_and_retain_stops_what_no_claim_holds() -> None:
    cluster = Cluster(cd("a", "team", "uid-a"), cd("b", "team", "uid-b"))
    w = watches(cluster)
    w.get("uid-a")
    w.add_handler(on_delete=print)
    w.get("uid-b")
    informers = {uid: w._watches[uid].informer for uid in ("uid-a", "uid-b")}
    assert all(len(i.handlers) == 1 for i in informers.values())  # type: ignore[attr-defined]
    # both were asked for just now: kept, held or not
    assert w.retain(held=["uid-a"]) == []
    later = domains_module.time.monotonic() + domains_module.RETAIN_S + 1
    assert w.retain(held=["uid-a"], now=later) == ["uid-b"]
    assert informers["uid-b"].stopped and not informers["uid-a"].stopped  # type: ignore[attr-defined]
    assert w.watched() == ["uid-a"]
    w.stop()
    assert informers["uid-a"].stopped  # type: ignore[attr-defined]
