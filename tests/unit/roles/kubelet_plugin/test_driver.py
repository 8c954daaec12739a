"""What the driver counts per claim: results by kind, outcome and reason, and claims that wait."""

from __future__ import annotations

from cdriver.dra.node_service import ClaimRef
from cdriver.roles.kubelet_plugin.driver import ComputeDomainDriver
from tests.unit.roles.kubelet_plugin import test_prepare_deleting as deleting
from tests.unit.roles.kubelet_plugin.test_prepare_deleting import begin_deletion, channel_claim

world = deleting.world  # the fixture: a node labelled for a domain whose daemon is Ready


def sample(plugin: ComputeDomainDriver, name: str, **labels: str) -> float | None:
    return plugin.state.metrics.registry.get_sample_value(name, labels)


def test_a_refused_prepare_is_counted_with_its_reason_and_waits_until_unprepared(world) -> None:
    preparer, claims, cd = world
    driver = ComputeDomainDriver(preparer.state)
    claims.items["late"] = channel_claim("late")
    ref = ClaimRef(namespace="team", name="late", uid="uid-late")
    for reason in ("waiting_for_daemon", "host_imex_not_ready"):  # a series to query before any claim waits
        assert sample(driver, "cdriver_kubelet_plugin_claims_waiting", kind="channel", reason=reason) == 0
    begin_deletion(cd)
    for _ in range(2):
        assert driver.prepare_claims([ref])["uid-late"].error
    assert sample(driver, "cdriver_kubelet_plugin_claim_operations_total", operation="prepare", kind="channel",
                  outcome="retryable", reason="domain_deleting") == 2
    assert sample(driver, "cdriver_kubelet_plugin_claims_waiting", kind="channel", reason="domain_deleting") == 1
    assert sample(driver, "nvidia_dra_node_prepare_errors_total", driver="compute-domain.nvidia.com",
                  error_type="prepare_devices") == 2  # upstream's series unchanged
    claims.patch = lambda *_args, **_kw: {}  # the node label's removal
    assert driver.unprepare_claims([ref]) == {"uid-late": ""}
    assert sample(driver, "cdriver_kubelet_plugin_claims_waiting", kind="channel", reason="domain_deleting") == 0
    assert sample(driver, "cdriver_kubelet_plugin_oldest_waiting_claim_seconds", kind="channel") == 0
    assert sample(driver, "cdriver_kubelet_plugin_claim_operations_total", operation="unprepare", kind="channel",
                  outcome="ok", reason="none") == 1
    driver.close()


def test_a_prepared_claim_is_counted_ok_by_kind(world) -> None:
    preparer, claims, _cd = world
    driver = ComputeDomainDriver(preparer.state)
    claims.items["early"] = channel_claim("early")
    ref = ClaimRef(namespace="team", name="early", uid="uid-early")
    assert not driver.prepare_claims([ref])["uid-early"].error
    assert sample(driver, "cdriver_kubelet_plugin_claim_operations_total", operation="prepare", kind="channel",
                  outcome="ok", reason="none") == 1
    assert sample(driver, "cdriver_kubelet_plugin_claim_operation_duration_seconds_count", operation="prepare",
                  kind="channel", outcome="ok") == 1
    driver.close()
