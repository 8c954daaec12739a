"""Record core/v1 Events about objects; repeats within a window bump ``count``. Never raises."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid

from cdriver.kube.errors import ApiError
from cdriver.kube.objects import meta_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES

log = logging.getLogger(__name__)

EVENTS = RESOURCES["events"]
NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE_LEN = 1024
#: Seconds during which an identical event is aggregated into the previous one.
AGGREGATE_WINDOW = 600.0
_MAX_TRACKED = 4096


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truncate(message: str, limit: int = MAX_MESSAGE_LEN) -> str:
    message = str(message)
    return message if len(message) <= limit else message[: limit - 3] + "..."


def involved_object(obj: dict) -> dict:
    """The ObjectReference of ``obj`` for an Event."""
    meta = meta_of(obj)
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    """Write Events as ``component`` (on ``host``)."""

    def __init__(self, raw: RawClient, component: str, host: str = "",
                 aggregate_window: float = AGGREGATE_WINDOW) -> None:
        self.raw = raw
        self.component = component
        self.host = host
        self.aggregate_window = aggregate_window
        self._lock = threading.Lock()
        # (uid/ns/name, type, reason, message) -> (event name, namespace, count, monotonic)
        self._recent: dict[tuple, tuple[str, str, int, float]] = {}

    def normal(self, obj: dict, reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: dict, reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)

    def event(self, obj: dict, type_: str, reason: str, message: str) -> None:
        """Record an Event about ``obj`` (logged, never raised, on failure)."""
        try:
            self._record(obj, type_, reason, truncate(message))
        except Exception:
            log.exception("could not record event %s/%s", type_, reason)

    def _record(self, obj: dict, type_: str, reason: str, message: str) -> None:
        ref = involved_object(obj)
        namespace = ref.get("namespace") or "default"
        key = (ref.get("uid") or f"{namespace}/{ref.get('name', '')}", type_, reason, message)
        now = time.monotonic()
        with self._lock:
            previous = self._recent.get(key)
        if previous is not None and now - previous[3] < self.aggregate_window:
            name, ns, count, _ = previous
            try:
                self.raw.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": _now()}, ns)
                self._remember(key, name, ns, count + 1, now)
                return
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("event %s %s on %s not updated: %s", type_, reason,
                                ref.get("name"), exc)
                    return
        stamp = _now()
        name = f"{(ref.get('name') or 'object')[:200]}.{uuid.uuid4().hex[:16]}"
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
        }
        try:
            self.raw.create(EVENTS, body, namespace)
        except ApiError as exc:
            log.warning("event %s %s on %s/%s not recorded: %s", type_, reason, namespace,
                        ref.get("name"), exc)
            return
        self._remember(key, name, namespace, 1, now)
        log.debug("event %s %s on %s/%s: %s", type_, reason, namespace, ref.get("name"), message)

    def _remember(self, key: tuple, name: str, ns: str, count: int, now: float) -> None:
        with self._lock:
            if len(self._recent) >= _MAX_TRACKED:
                cutoff = now - self.aggregate_window
                self._recent = {k: v for k, v in self._recent.items() if v[3] >= cutoff}
                if len(self._recent) >= _MAX_TRACKED:
                    self._recent.clear()
            self._recent[key] = (name, ns, count, now)
