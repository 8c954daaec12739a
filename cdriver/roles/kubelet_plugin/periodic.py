"""A daemon thread that calls one function every so often until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``task`` every ``interval`` seconds (first at once when ``at_start``); an exception
    is logged and the task runs again next period."""

    def __init__(self, name: str, task: Callable[[], object], interval: float, at_start: bool) -> None:
        self.name = name
        self.task = task
        self.interval = interval
        self.at_start = at_start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        if not self.at_start and self._stop.wait(self.interval):
            return
        while True:
            try:
                self.task()
            except Exception:  # noqa: BLE001 - retried next period
                log.exception("%s failed", self.name)
            if self._stop.wait(self.interval):
                return
