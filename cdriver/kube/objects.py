"""Read the common metadata of Kubernetes object bodies (plain dicts from the API server).

A missing or null ``metadata`` (or field in it) reads as empty, so callers need no
``(obj.get("metadata") or {})`` of their own. Pure functions; the body is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Body = Mapping[str, Any]


def meta_of(obj: Body | None) -> dict:
    """``metadata`` of ``obj`` (empty when absent, null, or ``obj`` is None)."""
    return (obj or {}).get("metadata") or {}


def name_of(obj: Body | None) -> str:
    """``metadata.name`` ("" when absent)."""
    return meta_of(obj).get("name") or ""


def namespace_of(obj: Body | None) -> str:
    """``metadata.namespace`` ("" when absent or cluster-scoped)."""
    return meta_of(obj).get("namespace") or ""


def uid_of(obj: Body | None) -> str:
    """``metadata.uid`` ("" when absent)."""
    return meta_of(obj).get("uid") or ""


def labels_of(obj: Body | None) -> dict[str, str]:
    """``metadata.labels`` (empty when absent)."""
    return meta_of(obj).get("labels") or {}


def finalizers_of(obj: Body | None) -> list[str]:
    """``metadata.finalizers`` (empty when absent)."""
    return meta_of(obj).get("finalizers") or []


def owner_references_of(obj: Body | None) -> list[dict]:
    """``metadata.ownerReferences`` (empty when absent)."""
    return meta_of(obj).get("ownerReferences") or []


def resource_version_of(obj: Body | None) -> str:
    """``metadata.resourceVersion`` as a string ("" when absent)."""
    return str(meta_of(obj).get("resourceVersion") or "")


def generation_of(obj: Body | None) -> int:
    """``metadata.generation`` (0 when absent)."""
    return int(meta_of(obj).get("generation") or 0)


def being_deleted(obj: Body | None) -> bool:
    """True once the object has a ``metadata.deletionTimestamp``."""
    return bool(meta_of(obj).get("deletionTimestamp"))


def object_key(obj: dict) -> str:
    """Cache key ``namespace/name`` (just ``name`` for cluster-scoped objects)."""
    meta = meta_of(obj)
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))
