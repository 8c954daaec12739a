"""Pod IPs of one simulated node: the node's own "pod CIDR", a leased 127.X.Y.0/24.

As with kubelet and a CNI plugin, every pod outside the host network gets an address of its own,
so two pods on one node can listen on the same port of their pod IP (the old and the new pod of
a DaemonSet's surge update do; the chart's plugin serves its health and metrics ports on its pod
IP). Host-network pods take the node's address. A pod keeps its address while it lives on the
node (an agent restart reads it back from the pod's saved state); containers share the machine's
network namespace, so "own address" means its own loopback address, which is what binding to
the pod IP needs.
"""

from __future__ import annotations

import threading

from cdriver.sim.node.addresses import AddressBlock, AddressError, lease_block

SLOTS = range(1, 255)


class PodAddresses:
    """Hands out the node's pod addresses (the block is leased at the first pod, released by `close`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._block: AddressBlock | None = None
        self._by_uid: dict[str, int] = {}

    def address(self, uid: str, kept: str = "") -> str:
        """The address of pod `uid`: `kept` (what it had before an agent restart) when that is
        still this node's and free, else the lowest free one."""
        with self._lock:
            if uid in self._by_uid and self._block is not None:
                return self._block.ip(self._by_uid[uid])
            if self._block is None:
                self._block = lease_block()
            taken = set(self._by_uid.values())
            prefix, _, last = kept.rpartition(".")
            if prefix == self._block.prefix and last.isdigit() and int(last) in SLOTS and int(last) not in taken:
                slot = int(last)
            else:
                free = [s for s in SLOTS if s not in taken]
                if not free:
                    raise AddressError(f"every pod address of {self._block.prefix}.0/24 is taken on this node")
                slot = free[0]
            self._by_uid[uid] = slot
            return self._block.ip(slot)

    def upcoming(self, count: int) -> list[str]:
        """The addresses the next `count` pods will get, in order (while no pod leaves meanwhile):
        lets a test prepare something at a pod's address before the pod exists."""
        with self._lock:
            if self._block is None:
                self._block = lease_block()
            taken = set(self._by_uid.values())
            return [self._block.ip(s) for s in SLOTS if s not in taken][:count]

    def release(self, uid: str) -> None:
        """The pod is gone from the node: its address is free again."""
        with self._lock:
            self._by_uid.pop(uid, None)

    def close(self) -> None:
        """End the lease (the node and all its pods are gone)."""
        with self._lock:
            self._by_uid.clear()
            if self._block is not None:
                self._block.release()
                self._block = None
