"""Unprepare of a claim whose prepare never finished."""

from __future__ import annotations

from pathlib import Path

from cdriver.checkpoint import ClaimRecord, ClaimState
from tests.unit.roles.kubelet_plugin.fixtures import plugin_state


def test_unprepare_of_an_unfinished_prepare_leaves_an_aborted_entry(tmp_path: Path):
    from cdriver.dra.node_service import ClaimRef
    from cdriver.roles.kubelet_plugin.unprepare import Unpreparer

    state = plugin_state(tmp_path, imex_mode="hostManaged")  # no node label to manage here
    with state.store.locked() as cp:
        cp.claims["u1"] = ClaimRecord(uid="u1", name="c", namespace="ns", state=ClaimState.PREPARE_STARTED,
                                      devices=[{"type": "channel", "id": 0}], kind="channel", updated=0)
        cp.claims["u2"] = ClaimRecord(uid="u2", state=ClaimState.PREPARE_COMPLETED, kind="channel")
    unpreparer = Unpreparer(state)
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c", uid="u1")) is True
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c2", uid="u2")) is True
    claims = state.store.read().claims
    assert list(claims) == ["u1"]
    assert claims["u1"].state is ClaimState.PREPARE_ABORTED and claims["u1"].devices == []
    assert claims["u1"].updated > 0
    # A second Unprepare of the aborted claim is a no-op.
    assert unpreparer.unprepare(ClaimRef(namespace="ns", name="c", uid="u1")) is False
