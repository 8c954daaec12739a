"""Prepare failures carry upstream's stable phrases, followed by cdriver's explanation and fix."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from cdriver.api import constants
from cdriver.dra.node_service import ClaimRef
from cdriver.roles.kubelet_plugin import claims
from cdriver.roles.kubelet_plugin.driver import ComputeDomainDriver
from cdriver.roles.kubelet_plugin.errors import permanent, retryable, strict_decoding
from cdriver.roles.kubelet_plugin.metrics import PluginMetrics

REF = ClaimRef(namespace="team-a", name="wl-claim", uid="claim-uid-1")
CD_UID = "0d5f8a3e-1111-2222-3333-444455556666"


class _Failing:
    """A preparer whose every Prepare raises ``exc``."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def prepare(self, ref: ClaimRef, deadline: float) -> None:
        raise self.exc


def _driver(exc: Exception) -> ComputeDomainDriver:
    state = SimpleNamespace(config=SimpleNamespace(prepare_timeout=1.0), metrics=PluginMetrics("node-a"), labeler=None)
    driver = ComputeDomainDriver(state, max_parallel_claims=1)  # type: ignore[arg-type]
    driver.preparer = _Failing(exc)  # type: ignore[assignment]
    return driver


def _claim_with(params: dict) -> dict:
    config = {"source": "FromClaim", "requests": ["channel"],
              "opaque": {"driver": constants.DRIVER_NAME, "parameters": params}}
    return {"metadata": {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid},
            "status": {"allocation": {"devices": {"config": [config]}}}}


def _channel_params(**extra: object) -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND_CHANNEL_CONFIG, "domainID": CD_UID, **extra}


@pytest.mark.parametrize("exc", [permanent("claim x: bad config; fix it"), retryable("claim x: not ready; wait")])
def test_the_claim_error_kubelet_gets_starts_with_upstreams_phrase(exc):
    driver = _driver(exc)
    try:
        error = driver.prepare_claims([REF])[REF.uid].error
    finally:
        driver.close()
    assert error == f"error preparing devices for claim '{REF}': {exc}"


def test_an_unexpected_error_also_carries_upstreams_phrase():
    driver = _driver(RuntimeError("boom"))
    try:
        error = driver.prepare_claims([REF])[REF.uid].error
    finally:
        driver.close()
    assert error.startswith(f"error preparing devices for claim '{REF}': ") and error.endswith("internal error: boom")


def test_a_permanent_failure_logs_upstreams_permanent_phrase(caplog):
    driver = _driver(permanent("claim x: bad config; fix it"))
    with caplog.at_level(logging.INFO, logger="cdriver.roles.kubelet_plugin.driver"):
        driver.prepare_claims([REF])
    driver.close()
    [record] = [r for r in caplog.records if r.name == "cdriver.roles.kubelet_plugin.driver"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"Permanent error preparing devices for claim {REF} ")
    assert record.getMessage().endswith(": claim x: bad config; fix it")


def test_a_retryable_failure_logs_upstreams_phrase_and_says_kubelet_retries(caplog):
    driver = _driver(retryable("claim x: not ready; wait"))
    with caplog.at_level(logging.INFO, logger="cdriver.roles.kubelet_plugin.driver"):
        driver.prepare_claims([REF])
    driver.close()
    [record] = [r for r in caplog.records if r.name == "cdriver.roles.kubelet_plugin.driver"]
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert message.startswith(f"error preparing devices for claim '{REF}'") and "Permanent" not in message
    assert "kubelet retries" in message and message.endswith(": claim x: not ready; wait")


def test_an_unknown_opaque_field_reads_as_upstreams_strict_decoding_error_then_the_fix():
    with pytest.raises(claims.ClaimError) as err:
        claims.decode_configs(_claim_with(_channel_params(allocationMod="All")))
    message = str(err.value)
    assert err.value.permanent
    assert 'error decoding config parameters: strict decoding error: unknown field "allocationMod"' in message
    assert "field allocationMod: unknown field 'allocationMod' (allowed: " in message
    assert message.endswith("remove it or fix its spelling")


def test_every_unknown_opaque_field_is_named_as_upstream_names_them():
    with pytest.raises(claims.ClaimError) as err:
        claims.decode_configs(_claim_with(_channel_params(zeta=1, alpha=2)))
    assert 'strict decoding error: unknown field "alpha", unknown field "zeta"; ' in str(err.value)


def test_other_decoding_problems_keep_cdrivers_message_without_the_strict_phrase():
    with pytest.raises(claims.ClaimError) as err:
        claims.decode_configs(_claim_with(_channel_params(domainID="")))
    assert "error decoding config parameters: " in str(err.value)
    assert "strict decoding error" not in str(err.value)


def test_strict_decoding_quotes_paths_as_go_does():
    assert strict_decoding(["a", 'b"c']) == 'strict decoding error: unknown field "a", unknown field "b\\"c"'
