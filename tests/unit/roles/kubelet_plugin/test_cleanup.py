"""Stale domain directories, aborted entries and the leftovers of deleted domains."""

from __future__ import annotations

from cdriver.checkpoint import ClaimRecord, ClaimState
from cdriver.roles.kubelet_plugin.cleanup import stale_domain_dirs


def test_stale_domain_dirs():
    assert stale_domain_dirs(["a", "b", "c"], known_domains={"a"}, used_domains={"b"}) == ["c"]


def test_aborted_entries_expire_after_their_time_to_live():
    from cdriver.roles.kubelet_plugin.cleanup import ABORTED_ENTRY_TTL, expired_aborted

    claims = {
        "old": ClaimRecord(uid="old", state=ClaimState.PREPARE_ABORTED, updated=1000.0),
        "new": ClaimRecord(uid="new", state=ClaimState.PREPARE_ABORTED, updated=1000.0 + ABORTED_ENTRY_TTL),
        "started": ClaimRecord(uid="started", state=ClaimState.PREPARE_STARTED, updated=0.0),
    }
    assert expired_aborted(claims, 1000.0 + ABORTED_ENTRY_TTL, ABORTED_ENTRY_TTL) == ["old"]


def test_aborted_entries_of_deleted_domains_are_forgotten_at_once():
    from cdriver.roles.kubelet_plugin.cleanup import ABORTED_ENTRY_TTL, expired_aborted

    claims = {
        "gone": ClaimRecord(uid="gone", state=ClaimState.PREPARE_ABORTED, domain_id="deleted", updated=1000.0),
        "live": ClaimRecord(uid="live", state=ClaimState.PREPARE_ABORTED, domain_id="cd", updated=1000.0),
    }
    assert expired_aborted(claims, 1001.0, ABORTED_ENTRY_TTL, known_domains={"cd"}) == ["gone"]


def test_aborted_claims_do_not_keep_a_domain_directory():
    from cdriver.roles.kubelet_plugin.cleanup import domains_in_use

    claims = {
        "a": ClaimRecord(uid="a", state=ClaimState.PREPARE_ABORTED, domain_id="d1"),
        "s": ClaimRecord(uid="s", state=ClaimState.PREPARE_STARTED, domain_id="d2"),
        "c": ClaimRecord(uid="c", state=ClaimState.PREPARE_COMPLETED, domain_id="d3"),
    }
    assert domains_in_use(claims) == {"d2", "d3"}
    assert stale_domain_dirs(["d1", "d2", "d3"], set(), domains_in_use(claims)) == ["d1"]


def test_sweeps_follow_up_while_leftovers_of_deleted_domains_remain():
    from cdriver.roles.kubelet_plugin.cleanup import leftovers_of_deleted_domains

    started = {"s": ClaimRecord(uid="s", state=ClaimState.PREPARE_STARTED, domain_id="deleted")}
    completed = {"c": ClaimRecord(uid="c", state=ClaimState.PREPARE_COMPLETED, domain_id="deleted")}
    assert leftovers_of_deleted_domains(started, [], {"cd"})
    assert leftovers_of_deleted_domains({}, ["deleted"], {"cd"})
    assert not leftovers_of_deleted_domains(started, ["deleted"], {"deleted"})
    # A prepared claim of a deleted domain waits for kubelet's Unprepare, not for sweeps.
    assert not leftovers_of_deleted_domains(completed, [], {"cd"})
