"""The node's claim record: pods recorded before prepare, shared claims reference-counted,
checkpointed across agent restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.dra.node_service import ClaimRef, PreparedDevice
from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.claim_cache import ClaimCache, ClaimCacheError

REF = ClaimRef("ns", "shared", "uid-1")


def test_a_shared_claim_is_prepared_once_and_released_by_its_last_pod(tmp_path: Path) -> None:
    cache = ClaimCache(tmp_path / "state")
    assert cache.reference("pod-a", REF, ["drv"]) is True
    cache.set_devices(REF, "drv", [PreparedDevice([], "pool", "d0", ["v/c=d0"])])
    cache.set_prepared([REF])
    assert cache.reference("pod-b", REF, ["drv"]) is False  # already prepared: no second prepare
    assert cache.release("pod-a") == []  # pod-b still uses it
    info = cache.get("ns", "shared")
    assert info is not None and info.pod_uids == {"pod-b"}
    last = cache.release("pod-b")
    assert [i.ref for i in last] == [REF] and last[0].unpreparing
    cache.forget([REF])
    assert cache.get("ns", "shared") is None and cache.pod_uids() == set()


def test_a_pod_is_recorded_before_prepare_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state"
    ClaimCache(path).reference("pod-a", REF, ["drv"])  # prepare then fails or times out
    restarted = ClaimCache(path)
    assert restarted.pod_uids() == {"pod-a"}
    assert [i.ref for i in restarted.release("pod-a")] == [REF]  # still unprepared


def test_a_claim_being_unprepared_or_replaced_takes_no_new_pod(tmp_path: Path) -> None:
    cache = ClaimCache(tmp_path / "state")
    cache.reference("pod-a", REF, ["drv"])
    with pytest.raises(ClaimCacheError, match="UID uid-1"):
        cache.reference("pod-b", ClaimRef("ns", "shared", "uid-2"), ["drv"])
    cache.release("pod-a")
    with pytest.raises(ClaimCacheError, match="being unprepared"):
        cache.reference("pod-b", REF, ["drv"])


def test_a_corrupt_checkpoint_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_text("{broken")
    with pytest.raises(CdriverError, match=f"claim checkpoint {path} cannot be read"):
        ClaimCache(path)
