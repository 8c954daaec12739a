"""Keep in the caches only what the controller reads (pure functions + a list/watch wrapper).

A DaemonSet is mostly pod template and managedFields; once it exists the controller reads only
its daemon container's feature gates (`daemon_gates`), so trimming keeps memory flat at
thousands of domains. Objects the controller
writes back whole (ComputeDomains, cliques) keep everything but managedFields, which an update
without the field leaves unchanged on the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from cdriver.kube.objects import meta_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import Resource
from cdriver.kube.watch import WatchStream
from cdriver.roles.controller import daemon_gates
from cdriver.roles.controller.desired import DAEMON_CONTAINER_NAME

Trim = Callable[[dict], dict]

_META_KEYS = ("name", "namespace", "uid", "resourceVersion", "generation", "labels",
              "finalizers", "deletionTimestamp", "creationTimestamp")


def without_managed_fields(obj: dict) -> dict:
    """The object minus ``metadata.managedFields``."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _meta(obj: dict) -> dict:
    meta = meta_of(obj)
    return {k: meta[k] for k in _META_KEYS if k in meta}


def metadata_only(obj: dict) -> dict:
    """apiVersion, kind and the identifying metadata (labels, finalizers, deletion)."""
    out = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out["metadata"] = _meta(obj)
    return out


def daemon_set_summary(obj: dict) -> dict:
    """The identifying metadata plus what `daemon_gates.decide` reads (stamp, FEATURE_GATES)."""
    out = metadata_only(obj)
    annotations, spec = daemon_gates.summary(obj, DAEMON_CONTAINER_NAME)
    if annotations:
        out["metadata"]["annotations"] = annotations
    if spec:
        out["spec"] = spec
    return out


def pod_summary(obj: dict) -> dict:
    """What status aggregation reads from a daemon pod."""
    out = metadata_only(obj)
    spec = obj.get("spec") or {}
    out["spec"] = {k: spec[k] for k in ("nodeName", "affinity") if k in spec}
    status = obj.get("status") or {}
    out["status"] = {k: status[k] for k in ("podIP", "conditions", "phase") if k in status}
    return out


class TrimmingClient:
    """A `RawClient` stand-in for informers: ``list`` and ``watch`` results pass ``trim``."""

    def __init__(self, raw: RawClient, trim: Trim) -> None:
        self._raw = raw
        self._trim = trim

    def list(self, res: Resource, *args: Any, **kwargs: Any) -> dict:
        result = self._raw.list(res, *args, **kwargs)
        result["items"] = [self._trim(obj) for obj in result.get("items") or []]
        return result

    def watch(self, res: Resource, *args: Any, **kwargs: Any) -> _TrimmedStream:
        return _TrimmedStream(self._raw.watch(res, *args, **kwargs), self._trim)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _TrimmedStream:
    def __init__(self, stream: WatchStream, trim: Trim) -> None:
        self._stream = stream
        self._trim = trim

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        for etype, obj in self._stream:
            yield etype, (obj if etype == "BOOKMARK" else self._trim(obj))

    def close(self) -> None:
        self._stream.close()

    @property
    def closed(self) -> bool:
        return bool(self._stream.closed)

    def __enter__(self) -> _TrimmedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
