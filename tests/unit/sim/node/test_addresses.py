"""Address blocks of local clusters: leased machine-wide, released, never 127.0.0."""

from __future__ import annotations

import pytest

from cdriver.sim.node import addresses
from cdriver.sim.node.addresses import AddressError, lease_block, try_lease


def test_blocks_are_tried_from_127_0_1_and_never_127_0_0() -> None:
    blocks = addresses.candidate_blocks()
    assert [next(blocks) for _ in range(3)] == ["127.0.1", "127.0.2", "127.0.3"]
    assert "127.0.0" not in set(addresses.candidate_blocks())


def test_two_clusters_get_different_blocks_and_a_released_block_is_free_again() -> None:
    with lease_block() as first, lease_block() as second:
        assert first.prefix != second.prefix
        assert try_lease(first.prefix) is None  # held: nobody else gets it
        assert first.ip(1) == f"{first.prefix}.1" and second.ip(254) == f"{second.prefix}.254"
        first.release()
        again = try_lease(first.prefix)
        assert again is not None and again.held
        again.release()


def test_an_address_outside_the_block_is_refused() -> None:
    with lease_block() as block, pytest.raises(AddressError, match=r"index 255 is out of range 1\.\.254"):
        block.ip(255)
