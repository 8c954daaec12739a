"""The node labels this plugin owns: ``resource.nvidia.com/computeDomain`` (and optionally
``nvidia.com/gpu.clique``).

Writes are conditional (resourceVersion precondition, JSON-patch test), so concurrent writers
cannot lose updates. The labeler remembers the node as its own last write returned it, so a
reader never sees an older state from the watch cache after this process changed the label.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from cdriver.api.constants import DEVICE_TYPE_CHANNEL, LABEL_COMPUTE_DOMAIN
from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.kube.errors import ApiError
from cdriver.kube.objects import labels_of, resource_version_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin.errors import REASON_API_ERROR, REASON_CHANNEL_IN_USE, retryable

log = logging.getLogger(__name__)

NODES = RESOURCES["nodes"]
MAX_ATTEMPTS = 5
#: What a write did to the ComputeDomain label (``on_change``'s argument).
LABEL_APPLIED = "applied"
LABEL_REMOVED = "removed"


def _labels(node: dict | None) -> dict:
    return labels_of(node)


def _rv(node: dict | None) -> str:
    return resource_version_of(node)


def _rv_int(node: dict | None) -> int:
    try:
        return int(_rv(node) or 0)
    except ValueError:
        return 0


def _json_pointer(key: str) -> str:
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


class NodeLabeler:
    """Adds and removes the ComputeDomain label of one node (thread-safe)."""

    def __init__(self, raw: RawClient, node_name: str, cached_node: Callable[[], dict | None],
                 on_change: Callable[[str], None] = lambda _action: None) -> None:
        """``on_change(action)``: called after each write of the ComputeDomain label
        (`LABEL_APPLIED` or `LABEL_REMOVED`)."""
        self.raw = raw
        self.node_name = node_name
        self.cached_node = cached_node
        self.on_change = on_change
        self._lock = threading.Lock()
        self._written: dict | None = None  # the node as our last write returned it

    def node(self) -> dict | None:
        """The newest node we know: the watch cache, or our own later write."""
        cached = self.cached_node()
        with self._lock:
            written = self._written
        if written is not None and (cached is None or _rv_int(written) > _rv_int(cached)):
            return written
        return cached

    def current(self) -> str | None:
        """The ComputeDomain label value as far as this process knows."""
        return _labels(self.node()).get(LABEL_COMPUTE_DOMAIN)

    def _remember(self, node: dict) -> None:
        if node.get("metadata"):
            with self._lock:
                if self._written is None or _rv_int(node) >= _rv_int(self._written):
                    self._written = node

    def ensure_domain(self, domain_id: str, label_is_stale: Callable[[str], bool]) -> bool:
        """Make the node carry ``computeDomain=<domain_id>``; True if a write was needed.

        A label for another domain is replaced only if ``label_is_stale(other)`` (that domain
        is gone and nothing here still uses it); otherwise a retryable error explains who owns
        the node.
        """
        node = self.node()
        for _ in range(MAX_ATTEMPTS):
            if node is None:
                node = self._get()
            current = _labels(node).get(LABEL_COMPUTE_DOMAIN)
            if current == domain_id:
                return False
            if current and not label_is_stale(current):
                raise retryable(
                    f"node {self.node_name} already belongs to ComputeDomain {current} (label "
                    f"{LABEL_COMPUTE_DOMAIN}={current}); a node serves one ComputeDomain at a time, so "
                    "this claim can be prepared once that domain's workloads have left the node",
                    reason=REASON_CHANNEL_IN_USE,
                )
            if current:
                log.info("replacing stale label %s=%s on node %s", LABEL_COMPUTE_DOMAIN, current, self.node_name)
            patch = {"metadata": {"labels": {LABEL_COMPUTE_DOMAIN: domain_id}, "resourceVersion": _rv(node)}}
            try:
                self._remember(self.raw.patch(NODES, self.node_name, patch))
            except ApiError as exc:
                if not exc.conflict:
                    raise retryable(
                        f"cannot label node {self.node_name} with {LABEL_COMPUTE_DOMAIN}={domain_id}: {exc}",
                        reason=REASON_API_ERROR,
                    ) from None
                node = None  # stale view: read fresh and decide again
                continue
            log.info("labelled node %s %s=%s", self.node_name, LABEL_COMPUTE_DOMAIN, domain_id)
            self.on_change(LABEL_APPLIED)
            return True
        raise retryable(f"cannot label node {self.node_name}: it kept changing during {MAX_ATTEMPTS} attempts",
                        reason=REASON_API_ERROR)

    def remove_domain(self, domain_id: str) -> bool:
        """Remove the label if (and only if) it still names ``domain_id``; True if removed."""
        if self.current() not in (None, domain_id):
            return False
        ops = [
            {"op": "test", "path": _json_pointer(LABEL_COMPUTE_DOMAIN), "value": domain_id},
            {"op": "remove", "path": _json_pointer(LABEL_COMPUTE_DOMAIN)},
        ]
        try:
            self._remember(self.raw.patch(NODES, self.node_name, ops, patch_type="json"))
        except ApiError as exc:
            if exc.invalid or exc.not_found:
                return False  # label absent or names another domain: nothing of ours to remove
            raise retryable(
                f"cannot remove label {LABEL_COMPUTE_DOMAIN}={domain_id} from node {self.node_name}: {exc}",
                reason=REASON_API_ERROR,
            ) from None
        log.info("removed label %s=%s from node %s", LABEL_COMPUTE_DOMAIN, domain_id, self.node_name)
        self.on_change(LABEL_REMOVED)
        return True

    def set_label(self, key: str, value: str | None) -> None:
        """Set (or with None, remove) an arbitrary label with a merge patch."""
        self._remember(self.raw.patch(NODES, self.node_name, {"metadata": {"labels": {key: value}}}))

    def _get(self) -> dict:
        try:
            node = self.raw.get(NODES, self.node_name)
        except ApiError as exc:
            raise retryable(f"cannot read node {self.node_name}: {exc}", reason=REASON_API_ERROR) from None
        self._remember(node)
        return node


def domains_missing_label(records: Iterable[ClaimRecord], label: str | None) -> set[str]:
    """ComputeDomains with a completely prepared channel claim here whose node label
    (``label``, the current value of ``resource.nvidia.com/computeDomain``) does not name them:
    removed or replaced by someone else while their workloads run."""
    return {rec.domain_id for rec in records
            if rec.kind == DEVICE_TYPE_CHANNEL and rec.domain_id and rec.state == ClaimState.PREPARE_COMPLETED
            and rec.domain_id != label}
