"""Pod worker decisions on simulated nodes: backoff, restarts, hosts file, claims, state."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdriver.sim.node.simulated import claims, pods, runtime


def test_crash_loop_backoff_starts_immediately_then_doubles_up_to_the_cap() -> None:
    assert [pods.backoff_delay(n, 10, 300) for n in range(7)] == [0, 10, 20, 40, 80, 160, 300]


@pytest.mark.parametrize(("policy", "code", "restart"), [
    ("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 2, True),
    ("Never", 1, False)])
def test_should_restart(policy: str, code: int, restart: bool) -> None:
    assert pods.should_restart(policy, code) is restart


def test_hosts_file_names_the_pod_and_host_aliases() -> None:
    pod = {"metadata": {"name": "web-0", "namespace": "ns"},
           "spec": {"hostname": "web-0", "subdomain": "web",
                    "hostAliases": [{"ip": "127.0.1.9", "hostnames": ["peer", "peer.local"]}]}}
    text = pods.hosts_file(pod, "127.0.1.2", "node-2")
    assert "127.0.0.1\tlocalhost" in text
    assert "127.0.1.2\tweb-0.web.ns.svc.cluster.local web-0" in text
    assert "127.0.1.9\tpeer peer.local" in text
    host_net = pods.hosts_file({"metadata": {"name": "p"}, "spec": {"hostNetwork": True}}, "127.0.1.2", "node-2")
    assert "127.0.1.2\tnode-2" in host_net


def test_pod_claim_names_from_spec_and_status() -> None:
    pod = {"spec": {"resourceClaims": [
        {"name": "direct", "resourceClaimName": "shared-claim"},
        {"name": "templated", "resourceClaimTemplateName": "t"},
        {"name": "unneeded", "resourceClaimTemplateName": "t"},
        {"name": "pending", "resourceClaimTemplateName": "t"}]},
        "status": {"resourceClaimStatuses": [{"name": "templated", "resourceClaimName": "pod-templated-x"},
                                             {"name": "unneeded"}]}}
    assert claims.pod_claim_names(pod) == [("direct", "shared-claim"), ("templated", "pod-templated-x"),
                                         ("pending", None)]


def test_claim_drivers_and_reservation() -> None:
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": "b.example.com"}, {"driver": "a.example.com"}, {"driver": "b.example.com"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}
    assert claims.claim_drivers(claim) == ["a.example.com", "b.example.com"]
    assert claims.reserved_for(claim, "u1") and not claims.reserved_for(claim, "u2")
    assert claims.claim_drivers({}) == []


def test_pod_state_round_trip_and_corrupt_file(tmp_path: Path) -> None:
    state = claims.PodState("ns", "p", "2026-01-01T00:00:00Z", {"main": 3}, {"main"})
    path = tmp_path / "state.json"
    state.save(path)
    loaded = claims.PodState.load(path)
    assert loaded == state
    path.write_text("{broken")
    assert claims.PodState.load(path) == claims.PodState()


def test_options_fast_is_faster_everywhere() -> None:
    slow, fast = runtime.NodeOptions(), runtime.NodeOptions.fast()
    for name in ("heartbeat_interval", "backoff_base", "backoff_max", "setup_retry_base", "plugin_scan_interval"):
        assert getattr(fast, name) < getattr(slow, name)


class FlakyApi:
    """Refuses the first `failures` deletes as an API server that is restarting would."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.deletes = 0

    def delete(self, *args: object, **kwargs: object) -> None:
        from cdriver.kube.errors import ApiError

        self.deletes += 1
        if self.deletes <= self.failures:
            raise ApiError(0, "ProtocolError", "Connection aborted")


def test_the_final_delete_of_a_terminated_pod_is_retried_while_the_api_server_is_away() -> None:
    """A pod whose final delete met a restarting API server must not stay Terminating forever."""
    import logging
    from types import SimpleNamespace

    worker = object.__new__(pods.PodWorker)
    worker.rt = SimpleNamespace(raw=FlakyApi(failures=2), options=runtime.NodeOptions.fast())
    worker.name, worker.namespace, worker.uid = "w", "ns", "uid-1"
    worker.log = logging.getLogger("test")
    worker._deleted = worker._shutdown = False
    assert worker._final_delete() is True
    assert worker.rt.raw.deletes == 3


def test_a_prepare_call_that_failed_as_a_whole_is_named_timeout_at_its_deadline_else_failed() -> None:
    import grpc

    from cdriver.dra.client import DRAError

    assert pods.call_outcome(DRAError("deadline", grpc.StatusCode.DEADLINE_EXCEEDED)) == "timeout"
    assert pods.call_outcome(DRAError("gone", grpc.StatusCode.UNAVAILABLE)) == "failed"
    assert pods.call_outcome(DRAError("pod going away", grpc.StatusCode.CANCELLED)) == "cancelled"
    assert pods.call_outcome(DRAError("bad answer")) == "failed"
