"""Re-read the node's clique ID every so often (as upstream: every 10 minutes), adopt a new
non-empty value, and re-apply the ``nvidia.com/gpu.clique`` label when the plugin owns it
(someone may have removed it, or the fabric may have registered since start)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from cdriver.api.constants import LABEL_NODE_CLIQUE
from cdriver.errors import CdriverError
from cdriver.roles.kubelet_plugin.periodic import Periodic
from cdriver.roles.kubelet_plugin.state import PluginState

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 600.0


class CliqueRefresher:
    """Calls `refresh` every ``interval`` seconds in a thread (`start`, `stop`)."""

    def __init__(self, state: PluginState, read_clique: Callable[[], str], own_label: bool,
                 interval: float = REFRESH_INTERVAL, on_change: Callable[[str], None] = lambda _clique: None) -> None:
        self.state = state
        self.on_change = on_change
        self.read_clique = read_clique
        self.own_label = own_label
        self._periodic = Periodic("clique refresh", self.refresh, interval, at_start=False)
        self.start, self.stop = self._periodic.start, self._periodic.stop

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
            self.on_change(found)
        if self.own_label and current and self.state.labeler is not None:
            try:
                self.state.labeler.set_label(LABEL_NODE_CLIQUE, current)
            except CdriverError as exc:
                log.warning("cannot re-apply node label %s=%s: %s", LABEL_NODE_CLIQUE, current, exc)
        return current
