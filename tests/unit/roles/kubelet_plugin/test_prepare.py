"""Orphan CDI specs: claim specs no checkpoint record owns are removed."""

from __future__ import annotations

from pathlib import Path

from cdriver.cdi.model import ContainerEdits, DeviceNode
from cdriver.cdi.writer import claim_spec_name, list_specs, write_spec
from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.roles.kubelet_plugin import cdi_edits
from cdriver.roles.kubelet_plugin.prepare import remove_orphan_specs
from tests.unit.roles.kubelet_plugin.fixtures import plugin_state


def test_orphan_claim_specs_are_removed_and_owned_ones_kept(tmp_path: Path):
    state = plugin_state(tmp_path)
    cfg, store = state.config, state.store
    edits = ContainerEdits(device_nodes=[DeviceNode(path="/dev/x", type="c", major=1, minor=1)])
    for uid in ("owned", "orphan"):
        write_spec(cfg.cdi_root, claim_spec_name(uid), cdi_edits.claim_spec(uid, [("channel-0", edits)]))
    write_spec(cfg.cdi_root, cdi_edits.BASE_SPEC_NAME, cdi_edits.base_spec([]))
    with store.locked() as cp:
        cp.claims["owned"] = ClaimRecord(uid="owned", state=ClaimState.PREPARE_COMPLETED, kind="channel")
    assert remove_orphan_specs(state) == ["orphan"]
    assert list_specs(cfg.cdi_root) == sorted([claim_spec_name("owned"), cdi_edits.BASE_SPEC_NAME])
