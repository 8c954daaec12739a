"""Informer: a list+watch mirror of one resource in a thread-safe, indexed cache.

One watcher thread keeps the cache current (relisting when the watch's resourceVersion
expires); one dispatcher thread calls the handlers in event order, so handlers never run
concurrently with each other. Cached dicts are shared: treat them as read-only.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from cdriver.kube.errors import ApiError
from cdriver.kube.objects import labels_of, meta_of, namespace_of, object_key, resource_version_of, uid_of
from cdriver.kube.resources import Resource
from cdriver.logs import WATCH_EVENTS_LOGGER

log = logging.getLogger(WATCH_EVENTS_LOGGER)  # its debug lines: logVerbosity 2

Handler = Callable[..., None]
IndexFunc = Callable[[dict], list[str]]


class EventStream(Protocol):
    """One open watch: ``(event_type, obj)`` pairs until closed."""

    def __iter__(self) -> Iterator[tuple[str, dict]]: ...

    def close(self) -> None: ...


class ListWatchClient(Protocol):
    """What an `Informer` reads through: a `RawClient` or a wrapper around one."""

    def list(self, res: Resource, namespace: str | None = None, *,
             label_selector: str | None = None, field_selector: str | None = None) -> dict: ...

    def watch(self, res: Resource, namespace: str | None = None, *,
              resource_version: str | None = None, label_selector: str | None = None,
              field_selector: str | None = None,
              timeout_seconds: int | None = None) -> EventStream: ...


@dataclass
class _Handlers:
    on_add: Handler | None
    on_update: Handler | None
    on_delete: Handler | None


def uid_index(obj: dict) -> list[str]:
    """Index function: the object's metadata.uid."""
    uid = uid_of(obj)
    return [uid] if uid else []


def namespace_index(obj: dict) -> list[str]:
    """Index function: the object's namespace."""
    ns = namespace_of(obj)
    return [ns] if ns else []


def label_index(label: str) -> IndexFunc:
    """Index function factory: the value of label ``label`` (objects without it skipped)."""

    def index(obj: dict) -> list[str]:
        value = labels_of(obj).get(label)
        return [value] if value is not None else []

    return index


class Informer:
    """Mirror of ``res`` (optionally one namespace / selectors) with add/update/delete handlers."""

    def __init__(
        self, raw: ListWatchClient, res: Resource, namespace: str | None = None,
        label_selector: str | None = None, field_selector: str | None = None,
        resync_seconds: float = 600, watch_timeout_seconds: int = 300,
        retry_seconds: float = 1.0, max_retry_seconds: float = 30.0,
    ) -> None:
        self.raw = raw
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self._lock = threading.RLock()
        self._items: dict[str, dict] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, dict[str, set[str]]] = {}
        self._handlers: list[_Handlers] = []
        self._events: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._stream: EventStream | None = None
        self._threads: list[threading.Thread] = []
        self._resource_version = ""
        self.relist_count = 0

    @property
    def name(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{where}{self.res.plural}"

    # -- cache reads -----------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The cached object for ``namespace/name`` (or ``name`` if cluster-scoped)."""
        with self._lock:
            return self._items.get(key)

    def get_by_name(self, name: str, namespace: str | None = None) -> dict | None:
        return self.get(f"{namespace}/{name}" if namespace else name)

    def objects(self) -> list[dict]:
        """Every cached object, in no particular order."""
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def by_index(self, name: str, value: str) -> list[dict]:
        with self._lock:
            if name not in self._index_funcs:
                raise KeyError(f"informer {self.name}: no index named {name!r}")
            keys = self._indexes[name].get(value, set())
            return [self._items[k] for k in sorted(keys) if k in self._items]

    @property
    def resource_version(self) -> str:
        return self._resource_version

    # -- configuration ---------------------------------------------------------------
    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add an index; ``fn(obj)`` returns the index values of an object."""
        with self._lock:
            self._index_funcs[name] = fn
            self._indexes[name] = {}
            for key, obj in self._items.items():
                self._index_add(name, key, obj)

    def add_handler(
        self, on_add: Handler | None = None, on_update: Handler | None = None,
        on_delete: Handler | None = None,
    ) -> None:
        """Register handlers: ``on_add(obj)``, ``on_update(old, new)``, ``on_delete(obj)``.

        A handler added after start first gets ``on_add`` for every cached object.
        """
        handlers = _Handlers(on_add, on_update, on_delete)
        with self._lock:
            self._handlers.append(handlers)
            if self._threads and on_add is not None:
                for obj in self._items.values():
                    self._events.put(("add", obj, None, handlers))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        for target, role in ((self._run_watch, "watch"), (self._run_dispatch, "dispatch")):
            thread = threading.Thread(
                target=target, name=f"informer-{self.res.plural}-{role}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        self._events.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is cached and its add events were handled."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    # -- cache writes (watcher thread) -------------------------------------------------
    def _index_add(self, name: str, key: str, obj: dict) -> None:
        try:
            values = self._index_funcs[name](obj) or []
        except Exception:
            log.exception("informer %s: index %s failed on %s", self.name, name, key)
            values = []
        for value in values:
            self._indexes[name].setdefault(value, set()).add(key)

    def _index_remove(self, key: str, obj: dict) -> None:
        for name, fn in self._index_funcs.items():
            try:
                values = fn(obj) or []
            except Exception:
                values = []
            for value in values:
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]

    def _store(self, obj: dict) -> dict | None:
        key = object_key(obj)
        with self._lock:
            old = self._items.get(key)
            if old is not None:
                self._index_remove(key, old)
            self._items[key] = obj
            for name in self._index_funcs:
                self._index_add(name, key, obj)
            return old

    def _drop(self, key: str) -> dict | None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._index_remove(key, old)
            return old

    def _emit(self, kind: str, obj: dict, old: dict | None = None) -> None:
        log.debug("informer %s: %s %s (resourceVersion %s)", self.name, kind, object_key(obj), _rv(obj) or "-")
        self._events.put((kind, obj, old, None))

    def _relist(self) -> None:
        """List everything, replace the cache, emit the differences."""
        result = self.raw.list(
            self.res, self.namespace, label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        items = result.get("items") or []
        kind = self.res.kind
        api_version = self.res.api_version
        fresh: dict[str, dict] = {}
        for obj in items:
            # List items omit kind/apiVersion; watch events carry them. Make both alike.
            if kind:
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", api_version)
            fresh[object_key(obj)] = obj
        for key in set(self.keys()) - set(fresh):
            old = self._drop(key)
            if old is not None:
                self._emit("delete", old)
        for obj in fresh.values():
            old = self._store(obj)
            if old is None:
                self._emit("add", obj)
            elif _rv(old) != _rv(obj):
                self._emit("update", obj, old)
        self._resource_version = str(meta_of(result).get("resourceVersion", ""))
        self.relist_count += 1
        if not self._synced.is_set():
            self._events.put(("synced", None, None, None))

    def _apply(self, etype: str, obj: dict) -> None:
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self._resource_version = rv
            return
        if etype in ("ADDED", "MODIFIED"):
            old = self._store(obj)
            if old is None:
                self._emit("add", obj)
            else:
                self._emit("update", obj, old)
        elif etype == "DELETED":
            old = self._drop(object_key(obj))
            self._emit("delete", obj if obj.get("metadata") else (old or obj))
        else:
            log.debug("informer %s: ignoring watch event %s", self.name, etype)
        if rv:
            self._resource_version = rv

    # -- threads ---------------------------------------------------------------------
    def _run_watch(self) -> None:
        need_list = True
        failures = 0
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                timeout = max(1, int(self.watch_timeout_seconds * random.uniform(0.9, 1.0)))
                stream = self.raw.watch(
                    self.res, self.namespace, resource_version=self._resource_version,
                    label_selector=self.label_selector, field_selector=self.field_selector,
                    timeout_seconds=timeout,
                )
                self._stream = stream
                if self._stop.is_set():
                    stream.close()
                    break
                for etype, obj in stream:
                    if self._stop.is_set():
                        break
                    self._apply(etype, obj)
                failures = 0
            except ApiError as exc:
                if exc.gone:
                    log.info("informer %s: resourceVersion expired, relisting", self.name)
                    need_list = True
                    continue
                failures += 1
                log.warning("informer %s: %s (retrying)", self.name, exc)
                if failures >= 3:
                    need_list = True
                self._stop.wait(self._retry_delay(failures))
            except Exception:
                failures += 1
                log.exception("informer %s: unexpected error (retrying)", self.name)
                need_list = True
                self._stop.wait(self._retry_delay(failures))
            finally:
                self._stream = None

    def _retry_delay(self, failures: int) -> float:
        delay = min(self.max_retry_seconds, self.retry_seconds * 2 ** max(0, failures - 1))
        return delay * random.uniform(0.8, 1.2)

    def _run_dispatch(self) -> None:
        next_resync = time.monotonic() + self.resync_seconds if self.resync_seconds > 0 else None
        while True:
            wait = None if next_resync is None else max(0.0, next_resync - time.monotonic())
            try:
                event = self._events.get(timeout=wait)
            except queue.Empty:
                event = ("resync", None, None, None)
            if event is None or self._stop.is_set():
                return
            kind, obj, old, only = event
            if kind == "synced":
                self._synced.set()
                continue
            if kind == "resync":
                next_resync = time.monotonic() + self.resync_seconds
                if self._synced.is_set():
                    for cached in self.objects():
                        self._call("update", cached, cached, None)
                continue
            self._call(kind, obj, old, only)

    def _call(self, kind: str, obj: Any, old: Any, only: _Handlers | None) -> None:
        with self._lock:
            handlers = [only] if only is not None else list(self._handlers)
        for h in handlers:
            try:
                if kind == "add" and h.on_add:
                    h.on_add(obj)
                elif kind == "update" and h.on_update:
                    h.on_update(old, obj)
                elif kind == "delete" and h.on_delete:
                    h.on_delete(obj)
            except Exception:
                log.exception("informer %s: %s handler failed for %s", self.name, kind,
                              object_key(obj) if isinstance(obj, dict) else obj)


def _rv(obj: dict) -> str:
    return resource_version_of(obj)
