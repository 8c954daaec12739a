"""A daemon thread that calls one function every so often until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Calls ``task`` every ``interval`` seconds (first at once when ``at_start``); an exception
    is logged and the task runs again next period. A task that returns a number of seconds
    runs again after that long instead (sooner or later than the period); `wake` runs it now."""

    def __init__(self, name: str, task: Callable[[], object], interval: float, at_start: bool) -> None:
        self.name = name
        self.task = task
        self.interval = interval
        self.at_start = at_start
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run the task as soon as the current run (if any) is over."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until woken; True once stopped."""
        self._wake.wait(seconds)
        self._wake.clear()
        return self._stop.is_set()

    def _run(self) -> None:
        if not self.at_start and self._sleep(self.interval):
            return
        while True:
            delay = self.interval
            try:
                result = self.task()
                if isinstance(result, int | float) and not isinstance(result, bool):
                    delay = max(0.0, float(result))
            except Exception:  # noqa: BLE001 - retried next period
                log.exception("%s failed", self.name)
            if self._sleep(delay):
                return
