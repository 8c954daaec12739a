"""Re-read the node's clique ID every so often (as upstream: every 10 minutes), adopt a new
non-empty value, and re-apply the ``nvidia.com/gpu.clique`` label when the plugin owns it
(someone may have removed it, or the fabric may have registered since start)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from cdriver.api import constants as C
from cdriver.errors import CdriverError
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 600.0


class CliqueRefresher:
    """Calls `refresh` every ``interval`` seconds in a thread."""

    def __init__(self, state: PluginState, read_clique: Callable[[], str], own_label: bool,
                 interval: float = REFRESH_INTERVAL) -> None:
        self.state = state
        self.read_clique = read_clique
        self.own_label = own_label
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> str:
        """One round; returns the clique ID now in use ("" if none)."""
        try:
            found = self.read_clique()
        except CdriverError as exc:
            log.warning("cannot re-read the clique ID (keeping %r): %s", self.state.discovery.clique_id, exc)
            found = ""
        current = self.state.discovery.clique_id
        if found and found != current:
            log.info("clique ID changed from %r to %r", current, found)
            self.state.discovery = dataclasses.replace(self.state.discovery, clique_id=found)
            current = found
        if self.own_label and current and self.state.labeler is not None:
            try:
                self.state.labeler.set_label(C.LABEL_NODE_CLIQUE, current)
            except CdriverError as exc:
                log.warning("cannot re-apply node label %s=%s: %s", C.LABEL_NODE_CLIQUE, current, exc)
        return current

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="clique-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()
