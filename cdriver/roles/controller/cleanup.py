"""Finding leftovers of ComputeDomains that no longer exist (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from cdriver.kube.objects import being_deleted, uid_of
from cdriver.roles.controller.desired import domain_uid_of


def orphan_domains(known_uids: set[str], labelled: Iterable[dict]) -> set[str]:
    """UIDs that objects (templates, DaemonSets, nodes) are labelled with but that no known
    ComputeDomain has. Callers confirm against the API server before acting."""
    return {uid for uid in (domain_uid_of(obj) for obj in labelled) if uid} - known_uids


def objects_of(uid: str, objects: Iterable[dict]) -> list[dict]:
    """The objects labelled with ``uid``."""
    return [obj for obj in objects if domain_uid_of(obj) == uid]


def stale_labelled_nodes(nodes: Iterable[dict], domains: Iterable[dict], generated: Iterable[dict]) -> list[dict]:
    """Nodes whose ComputeDomain label names a domain that no longer exists, or one being
    deleted that has no generated object (claim template, DaemonSet) left: nothing of it runs
    there any more, so the label only keeps the node from serving another domain."""
    live = {uid_of(cd): cd for cd in domains}
    busy = {domain_uid_of(obj) for obj in generated}
    out = []
    for node in nodes:
        uid = domain_uid_of(node)
        if not uid:
            continue
        cd = live.get(uid)
        if cd is None or (being_deleted(cd) and uid not in busy):
            out.append(node)
    return out
