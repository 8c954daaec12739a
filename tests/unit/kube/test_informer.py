"""Informer cache bookkeeping: watch events applied to the cache, indexes kept in step."""

from __future__ import annotations

import pytest

from cdriver.kube.informer import Informer, label_index, namespace_index, uid_index
from cdriver.kube.resources import RESOURCES


def pod(name: str, rv: str, node: str = "", uid: str = "") -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                                        "uid": uid or f"uid-{name}",
                                        "labels": {"node": node} if node else {}}}


def drain(informer: Informer) -> list[tuple[str, str]]:
    out = []
    while not informer._events.empty():
        kind, obj, _old, _only = informer._events.get_nowait()
        out.append((kind, obj["metadata"]["name"]))
    return out


def test_index_helpers() -> None:
    obj = pod("a", "1", node="n1", uid="u1")
    assert uid_index(obj) == ["u1"]
    assert namespace_index(obj) == ["ns"]
    assert label_index("node")(obj) == ["n1"]
    assert label_index("missing")(obj) == []
    assert uid_index({"metadata": {}}) == []


def test_watch_events_update_cache_indexes_and_resource_version() -> None:
    informer = Informer(None, RESOURCES["pods"])  # never started: no API calls
    informer.add_index("node", label_index("node"))
    informer._apply("ADDED", pod("a", "5", node="n1"))
    informer._apply("ADDED", pod("b", "6", node="n1"))
    assert [o["metadata"]["name"] for o in informer.by_index("node", "n1")] == ["a", "b"]
    informer._apply("MODIFIED", pod("a", "7", node="n2"))
    assert [o["metadata"]["name"] for o in informer.by_index("node", "n1")] == ["b"]
    assert informer.get("ns/a")["metadata"]["resourceVersion"] == "7"
    informer._apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert informer.resource_version == "9"
    informer._apply("DELETED", pod("b", "10", node="n1"))
    assert informer.by_index("node", "n1") == []
    assert informer.get("ns/b") is None
    assert informer.resource_version == "10"
    assert drain(informer) == [("add", "a"), ("add", "b"), ("update", "a"), ("delete", "b")]


def test_index_added_late_covers_cached_objects_and_unknown_index_fails() -> None:
    informer = Informer(None, RESOURCES["pods"])
    informer._apply("ADDED", pod("a", "1", uid="u-a"))
    informer.add_index("uid", uid_index)
    assert informer.by_index("uid", "u-a")[0]["metadata"]["name"] == "a"
    with pytest.raises(KeyError, match="no index named 'nodes'"):
        informer.by_index("nodes", "x")


def test_failing_index_function_does_not_break_the_cache() -> None:
    informer = Informer(None, RESOURCES["pods"])
    informer.add_index("bad", lambda obj: obj["nope"])
    informer._apply("ADDED", pod("a", "1"))
    assert informer.get("ns/a") is not None
    assert informer.by_index("bad", "x") == []
