"""Loopback address blocks: the nodes of each local cluster get their own 127.X.Y.0/24.

Nodes use their address as node IP (the kubelet API binds 10250 on it), and each node's pods get
addresses from a block of the node's own (`simulated.pod_addresses`), where daemons bind fixed
ports (IMEX 50000 and 50005), so two clusters on one machine must not share addresses. A
block is leased by binding an abstract Unix socket named after it: the kernel holds the lease
exactly as long as the owning process keeps that socket open. So the lease is machine-wide,
ends with `release()` or when its owner dies (SIGKILL included), and leaves no file behind.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

from cdriver.errors import CdriverError

LEASE_NAME = "cdriver-sim-addresses/"
#: The block tried first (the one single clusters always had).
FIRST_BLOCK = (0, 1)


class AddressError(CdriverError):
    """No address block is free, or an address outside a block was asked for."""


def candidate_blocks() -> Iterator[str]:
    """"127.X.Y" prefixes in the order they are tried: 127.0.1 first, 127.0.0 never (127.0.0.1
    is the control plane's and every machine's localhost)."""
    first = FIRST_BLOCK[0] * 256 + FIRST_BLOCK[1]
    for n in range(first, 256 * 256):
        yield f"127.{n // 256}.{n % 256}"


class AddressBlock:
    """A leased 127.X.Y.0/24; node `i` (1..254) has address 127.X.Y.i."""

    def __init__(self, prefix: str, lease: socket.socket | None) -> None:
        self.prefix = prefix
        self._lease = lease

    def ip(self, index: int) -> str:
        if not 1 <= index <= 254:
            raise AddressError(f"node index {index} is out of range 1..254 of the address block {self.prefix}.0/24")
        return f"{self.prefix}.{index}"

    @property
    def held(self) -> bool:
        return self._lease is not None

    def release(self) -> None:
        """End the lease (another cluster may take the block)."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    def __enter__(self) -> AddressBlock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"AddressBlock({self.prefix}.0/24{'' if self.held else ', released'})"


def try_lease(prefix: str) -> AddressBlock | None:
    """Lease the block `prefix` ("127.X.Y"), or None while another process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(f"\0{LEASE_NAME}{prefix}")
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise AddressError(f"cannot lease the address block {prefix}.0/24: {exc}") from None
    return AddressBlock(prefix, sock)


def lease_block() -> AddressBlock:
    """The first free 127.X.Y.0/24, leased by this process until released."""
    for prefix in candidate_blocks():
        block = try_lease(prefix)
        if block is not None:
            return block
    raise AddressError("every 127.X.Y.0/24 address block is leased by another local cluster; stop one "
                       "(`cdriver sim down`) or end its process")
