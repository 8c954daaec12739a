"""Is this node's IMEX daemon Ready for a ComputeDomain? And waiting for it, woken by watches.

`node_readiness` is the pure decision over the cached ComputeDomainClique and ComputeDomain
objects. `ChangeNotifier` lets Prepare calls sleep until an informer reports a change (or a
deadline passes) instead of polling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from cdriver.api import constants

T = TypeVar("T")


def _clique_entry(clique: dict | None, node_name: str) -> dict | None:
    for entry in (clique or {}).get("daemons") or []:
        if isinstance(entry, dict) and entry.get("nodeName") == node_name:
            return entry
    return None


def _status_entry(cd: dict | None, node_name: str) -> dict | None:
    for entry in ((cd or {}).get("status") or {}).get("nodes") or []:
        if isinstance(entry, dict) and entry.get("name") == node_name:
            return entry
    return None


def node_readiness(
    node_name: str,
    domain_id: str,
    clique_id: str,
    clique: dict | None,
    cd: dict | None,
    use_cliques: bool,
    namespace: str,
) -> tuple[bool, str]:
    """(ready, what is missing) for this node in ComputeDomain ``domain_id``.

    With cliques enabled the node's entry in ComputeDomainClique ``<domain>.<clique>`` decides;
    the ComputeDomain's ``status.nodes`` is the fallback (legacy daemons, non-fabric nodes).
    """
    waits: list[str] = []
    if use_cliques and clique_id:
        name = constants.clique_object_name(domain_id, clique_id)
        entry = _clique_entry(clique, node_name)
        if entry and entry.get("status") == constants.STATUS_READY:
            return True, ""
        if clique is None:
            waits.append(f"ComputeDomainClique {namespace}/{name} does not exist yet")
        elif entry is None:
            waits.append(f"ComputeDomainClique {namespace}/{name} has no daemon entry for node {node_name}")
        else:
            waits.append(
                f"node {node_name} is {entry.get('status') or constants.STATUS_NOT_READY} in "
                f"ComputeDomainClique {namespace}/{name}"
            )
    entry = _status_entry(cd, node_name)
    if entry and entry.get("status") == constants.STATUS_READY:
        return True, ""
    if not waits or entry is not None:
        if entry is None:
            waits.append(f"ComputeDomain {domain_id} status.nodes has no entry for node {node_name}")
        else:
            waits.append(
                f"node {node_name} is {entry.get('status') or constants.STATUS_NOT_READY} in "
                f"ComputeDomain {domain_id} status.nodes"
            )
    return False, "; ".join(waits)


class ChangeNotifier:
    """A generation counter plus a condition: watchers `notify()`, waiters `wait_for()`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def generation(self) -> int:
        with self._cond:
            return self._generation

    def wait_change(self, generation: int, timeout: float) -> int:
        """Wait until the generation differs from `generation` or `timeout` passes; the current one."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != generation, timeout)
            return self._generation

    def notify(self, *_args: object) -> None:
        """Wake every waiter (usable directly as an informer handler)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait_for(self, check: Callable[[], T | None], deadline: float) -> T | None:
        """Call ``check`` now and after every change until it returns a non-None value or
        ``time.monotonic()`` passes ``deadline``; returns the last result."""
        while True:
            with self._cond:
                generation = self._generation
            result = check()
            if result is not None:
                return result
            with self._cond:
                while self._generation == generation:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
