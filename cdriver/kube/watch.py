"""`WatchStream`: the ``(event_type, obj)`` events of one watch request, closable from any thread."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator

import urllib3

from cdriver.kube.errors import ApiError

log = logging.getLogger(__name__)


class WatchStream:
    """An iterator of ``(event_type, obj)`` from one watch request.

    Event types: ADDED, MODIFIED, DELETED, BOOKMARK. A server-side ERROR event raises
    `ApiError` (``.gone`` for an expired resourceVersion). `close()` may be called from
    another thread and ends the iteration promptly.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse,
                 convert: Callable[[dict], dict] | None = None) -> None:
        """``convert``: applied to each event's object (e.g. from the served API version)."""
        self._response = response
        self._convert = convert
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._reading = False
        self._finished = False

    def close(self) -> None:
        """End the watch; safe to call from any thread, any number of times."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            reading = self._reading
        try:
            shutdown = getattr(self._response, "shutdown", None)
            if shutdown is not None:
                shutdown()  # unblocks a read in progress in another thread
        except Exception:  # pragma: no cover - best effort
            log.debug("watch shutdown failed", exc_info=True)
        if not reading:
            self._discard()

    def _discard(self) -> None:
        """Drop the connection (it may hold unread data) and hand its pool slot back."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        for step in ("close", "release_conn"):
            try:
                fn = getattr(self._response, step, None)
                if fn is not None:
                    fn()
            except Exception:  # pragma: no cover - best effort
                log.debug("watch %s failed", step, exc_info=True)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        with self._lock:
            if self._closed.is_set() or self._reading:
                return
            self._reading = True
        buffer = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                if self._closed.is_set():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = self._decode(line)
                    if event is not None:
                        yield self._converted(event)
            if buffer.strip() and not self._closed.is_set():
                event = self._decode(buffer)
                if event is not None:
                    yield self._converted(event)
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError,
                OSError, ValueError) as exc:
            # A read error after close() is the expected way a stopped watch ends; a silent
            # or dropped connection ends the watch too: the caller re-watches.
            if not self._closed.is_set():
                log.debug("watch stream ended: %s", exc)
        finally:
            with self._lock:
                self._reading = False
                self._closed.set()
            self._discard()

    def _converted(self, event: tuple[str, dict]) -> tuple[str, dict]:
        return event if self._convert is None else (event[0], self._convert(event[1]))

    @staticmethod
    def _decode(line: bytes) -> tuple[str, dict] | None:
        line = line.strip()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise ApiError(0, "BadWatchEvent", f"undecodable watch line: {exc}") from exc
        etype = event.get("type", "")
        obj = event.get("object") or {}
        if etype == "ERROR":
            raise ApiError.from_status(obj, 500)
        return etype, obj
