"""Leftovers of ComputeDomains: node labels nothing needs any more."""

from __future__ import annotations

from cdriver.api import constants
from cdriver.roles.controller.cleanup import stale_labelled_nodes


def labelled(name: str, uid: str | None) -> dict:
    labels = {constants.LABEL_COMPUTE_DOMAIN: uid} if uid else {}
    return {"metadata": {"name": name, "labels": labels}}


def cd(uid: str, deleting: bool = False) -> dict:
    meta = {"name": uid, "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def names(nodes: list[dict]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def test_labels_of_gone_domains_are_stale_and_of_live_ones_not() -> None:
    nodes = [labelled("n1", "live"), labelled("n2", "gone"), labelled("n3", None)]
    assert names(stale_labelled_nodes(nodes, [cd("live")], [])) == ["n2"]


def test_a_deleting_domain_keeps_its_labels_while_its_objects_remain() -> None:
    nodes = [labelled("n1", "d")]
    daemon_set = labelled("ds", "d")
    assert stale_labelled_nodes(nodes, [cd("d", deleting=True)], [daemon_set]) == []
    assert names(stale_labelled_nodes(nodes, [cd("d", deleting=True)], [])) == ["n1"]
