"""Finding leftovers of ComputeDomains that no longer exist (pure)."""

from __future__ import annotations

from collections.abc import Iterable

from cdriver.roles.controller.desired import domain_uid_of


def orphan_domains(known_uids: set[str], labelled: Iterable[dict]) -> set[str]:
    """UIDs that objects (templates, DaemonSets, nodes) are labelled with but that no known
    ComputeDomain has. Callers confirm against the API server before acting."""
    return {uid for uid in (domain_uid_of(obj) for obj in labelled) if uid} - known_uids


def objects_of(uid: str, objects: Iterable[dict]) -> list[dict]:
    """The objects labelled with ``uid``."""
    return [obj for obj in objects if domain_uid_of(obj) == uid]
