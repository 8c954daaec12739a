"""Errors kubelet gets and the reasons they are counted under."""

from __future__ import annotations

from cdriver.checkpoint import CheckpointError
from cdriver.errors import CdriverError
from cdriver.kube.errors import ApiError
from cdriver.roles.kubelet_plugin.errors import ClaimError, ClaimSeen, as_claim_error, retryable


def test_other_errors_become_retryable_with_the_reason_of_their_source() -> None:
    seen = ClaimSeen("channel")
    api = as_claim_error("ns/c:u", ApiError(500, "InternalError", "etcd timeout"), seen)
    assert (api.permanent, api.reason, api.claim_kind) == (False, "api_error", "channel")
    assert "claim ns/c:u" in str(api) and "etcd timeout" in str(api)
    local = as_claim_error("ns/c:u", CheckpointError("cannot read checkpoint"), ClaimSeen())
    assert (local.reason, local.claim_kind) == ("internal", "unknown")
    assert as_claim_error("r", CdriverError("x"), seen).reason == "internal"


def test_a_claim_error_keeps_its_reason_and_learns_the_kind() -> None:
    exc = retryable("waiting", reason="waiting_for_daemon")
    assert as_claim_error("r", exc, ClaimSeen("channel")) is exc
    assert (exc.reason, exc.claim_kind) == ("waiting_for_daemon", "channel")


def test_an_unknown_reason_is_counted_as_other() -> None:
    assert ClaimError("x", reason="made-up").reason == "other"
