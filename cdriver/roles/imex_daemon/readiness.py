"""Readiness: this pod's Ready condition (set by kubelet from the `check` probe) -> entry status.

The entry status is what the kubelet plugin waits for before it hands IMEX channels to a
workload on this node, so it is Ready only while the pod is Ready *and* this daemon's
nvidia-imex is running and not blocked (a crash flips it to NotReady at once instead of
waiting for the next probe period).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cdriver.api import constants
from cdriver.imex.ctl import IMEX_READY_OUTPUT
from cdriver.kube.objects import being_deleted

log = logging.getLogger(__name__)


def pod_is_ready(pod: dict | None) -> bool:
    """True when the pod is Running and its Ready condition is True."""
    if not pod:
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def probe_passed(returncode: int, output: str) -> bool:
    """`nvidia-imex-ctl -q` passed: exit 0 and the output is exactly READY (one optional newline)."""
    return returncode == 0 and output in (IMEX_READY_OUTPUT, IMEX_READY_OUTPUT + "\n")


def desired_status(pod_ready: bool, imex_running: bool, blocked: bool) -> str:
    """Entry status this daemon should publish."""
    return constants.STATUS_READY if pod_ready and imex_running and not blocked else constants.STATUS_NOT_READY


def describe_inputs(pod_ready: bool, imex_running: bool, blocked: bool) -> str:
    """What `desired_status` decided from, in words: ``pod Ready, nvidia-imex not READY``."""
    words = [f"pod {'Ready' if pod_ready else 'not Ready'}",
             f"nvidia-imex {'READY' if imex_running else 'not READY'}"]
    if blocked:
        words.append("its start blocked")
    return ", ".join(words)


def pod_being_deleted(pod: dict | None) -> bool:
    """True when the pod has a deletion timestamp (it will not come back)."""
    return being_deleted(pod)


class PodWatcher:
    """Watches this daemon's own Pod and calls `on_change(pod)` on every add/update."""

    def __init__(self, raw: Any, namespace: str, name: str, on_change: Callable[[dict], None],
                 resync_seconds: float = 240) -> None:
        from cdriver.kube.informer import Informer
        from cdriver.kube.resources import RESOURCES

        self.key = f"{namespace}/{name}"
        self.informer = Informer(raw, RESOURCES["pods"], namespace=namespace,
                                 field_selector=f"metadata.name={name}", resync_seconds=resync_seconds)
        self.informer.add_handler(on_add=on_change, on_update=lambda _old, new: on_change(new))

    def start(self, timeout: float = 30) -> bool:
        self.informer.start()
        return self.informer.wait_synced(timeout)

    def pod(self) -> dict | None:
        return self.informer.get(self.key)

    def stop(self) -> None:
        self.informer.stop()
