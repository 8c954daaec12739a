"""Which prepared ComputeDomains lost their node label."""

from __future__ import annotations

from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.roles.kubelet_plugin.node_labels import domains_missing_label


def record(uid: str, domain: str, kind: str = "channel", state: ClaimState = ClaimState.PREPARE_COMPLETED):
    return ClaimRecord(uid=uid, state=state, domain_id=domain, kind=kind)


def test_a_prepared_channel_claim_whose_label_is_gone_or_replaced_is_missing_its_label() -> None:
    records = [record("a", "d1"), record("b", "d1")]
    assert domains_missing_label(records, "d1") == set()
    assert domains_missing_label(records, None) == {"d1"}
    assert domains_missing_label(records, "d2") == {"d1"}


def test_daemon_claims_and_unfinished_or_unexplained_records_need_no_label() -> None:
    records = [record("d", "d1", kind="daemon"), record("s", "d2", state=ClaimState.PREPARE_STARTED),
               record("x", "d3", state=ClaimState.PREPARE_ABORTED),
               ClaimRecord(uid="u", state=ClaimState.PREPARE_COMPLETED)]
    assert domains_missing_label(records, None) == set()
