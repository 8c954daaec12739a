"""A claim's status.devices entries: what they say, what they keep, and the background writer."""

from __future__ import annotations

import logging
import threading

import pytest

from cdriver.api import constants
from cdriver.kube.errors import ApiError
from cdriver.roles.kubelet_plugin import device_status as ds
from cdriver.roles.kubelet_plugin import errors
from cdriver.roles.kubelet_plugin.status_writer import ClaimStatusWriter

CD = "124dd925-96b9-448d-a0fd-d8e1018a903b"


def report(**kw: object) -> ds.ClaimStatusReport:
    base = dict(namespace="ns", name="c", uid="u1", devices=(ds.DeviceRef("node-a", "channel-0"),), ready=True,
                reason=ds.REASON_DAEMON_READY, message="ready", domain_uid=CD, domain_name="cd",
                domain_namespace="ns", kind="channel", clique_id="x.1", daemon_index=3,
                daemon_dns_name="compute-domain-daemon-0003", channels=(0,),
                cdi_device_ids=("k8s.x/claim=u1-channel-0",))
    base.update(kw)
    return ds.ClaimStatusReport(**base)  # type: ignore[arg-type]


def test_a_ready_channel_claim_names_the_chain_from_claim_to_daemon() -> None:
    (entry,) = ds.status_entries(report(), "2026-12-04T10:00:00Z")
    assert (entry["driver"], entry["pool"], entry["device"]) == (constants.DRIVER_NAME, "node-a", "channel-0")
    assert entry["conditions"] == [{"type": "Ready", "status": "True", "reason": "DaemonReady", "message": "ready",
                                    "lastTransitionTime": "2026-12-04T10:00:00Z"}]
    assert entry["data"] == {"computeDomain": {"uid": CD, "name": "cd", "namespace": "ns"}, "kind": "channel",
                             "cliqueID": "x.1", "daemon": {"index": 3, "dnsName": "compute-domain-daemon-0003"},
                             "channels": [0], "cdiDeviceIDs": ["k8s.x/claim=u1-channel-0"]}


def test_what_is_not_known_is_left_out_and_many_channels_are_summarised() -> None:
    waiting = report(ready=False, reason=ds.REASON_WAITING_FOR_DAEMON, daemon_index=None, daemon_dns_name="",
                     channels=(), cdi_device_ids=(), clique_id="")
    (entry,) = ds.status_entries(waiting, "t")
    assert entry["data"] == {"computeDomain": {"uid": CD, "name": "cd", "namespace": "ns"}, "kind": "channel"}
    assert ds.report_data(report(channels=tuple(range(2048))))["channelCount"] == 2048
    assert ds.report_data(report(channels=tuple(range(2048))))["channelRange"] == "0-2047"
    assert "channels" not in ds.report_data(report(channels=tuple(range(2048))))
    assert len(ds.status_entries(report(message="m" * 40000), "t")[0]["conditions"][0]["message"]) == 32768


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    before = ds.status_entries(report(ready=False, reason=ds.REASON_WAITING_FOR_DAEMON), "2026-01-01T00:00:00Z")
    still = ds.status_entries(report(ready=False, reason=ds.REASON_WAITING_FOR_DAEMON), "2026-01-01T00:05:00Z",
                              before)
    assert still[0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = ds.status_entries(report(), "2026-01-01T00:06:00Z", still)
    assert flipped[0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:06:00Z"


def test_a_shared_channel_is_reported_under_its_share() -> None:
    share = "5e1f0000-aaaa-bbbb-cccc-000000000001"
    shared = report(devices=(ds.DeviceRef("node-a", "channel-0", share),))
    (entry,) = ds.status_entries(shared, "2026-12-04T10:00:00Z")
    assert (entry["pool"], entry["device"], entry["shareID"]) == ("node-a", "channel-0", share)
    (later,) = ds.status_entries(shared, "2026-12-04T11:00:00Z", previous=[entry])
    assert later["conditions"][0]["lastTransitionTime"] == "2026-12-04T10:00:00Z"
    unshared = {"driver": constants.DRIVER_NAME, "pool": "node-a", "device": "channel-0", "conditions": []}
    assert ds.merged_devices([unshared], [entry]) == [unshared, entry]


def test_other_drivers_entries_are_kept_in_place() -> None:
    other = {"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0", "conditions": []}
    old_ours = {"driver": constants.DRIVER_NAME, "pool": "node-a", "device": "channel-0", "conditions": []}
    (new_ours,) = ds.status_entries(report(), "t")
    assert ds.merged_devices([old_ours, other], [new_ours]) == [new_ours, other]
    assert ds.merged_devices([other], [new_ours]) == [other, new_ours]
    assert ds.merged_devices([], []) == []


def test_every_prepare_failure_has_a_reason_or_is_left_to_the_next_call() -> None:
    assert set(ds.ERROR_REASONS) <= set(errors.REASONS)
    assert ds.ERROR_REASONS[errors.REASON_WAITING_FOR_DAEMON] == "WaitingForDaemon"
    assert ds.ERROR_REASONS[errors.REASON_CANCELLED] is None
    for reason in ds.ERROR_REASONS.values():
        assert reason is None or reason.isalnum(), "condition reasons are CamelCase"


class FakeRaw:
    """Claims by name; update_status records what was written, or raises the next queued error."""

    def __init__(self, claims: dict[str, dict]) -> None:
        self.claims = claims
        self.writes: list[dict] = []
        self.errors: list[ApiError] = []
        self.gate = threading.Event()
        self.gate.set()

    def get(self, res: object, name: str, namespace: str) -> dict:
        if name not in self.claims:
            raise ApiError(404, "NotFound", "gone")
        return {**self.claims[name], "status": dict(self.claims[name]["status"])}

    def update_status(self, res: object, body: dict, namespace: str) -> dict:
        self.gate.wait(5)
        if self.errors:
            raise self.errors.pop(0)
        self.writes.append(body)
        self.claims[body["metadata"]["name"]] = body
        return body


def claim(name: str = "c", uid: str = "u1") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "status": {"allocation": {"devices": {}}}}


def test_the_writer_writes_the_latest_report_of_each_claim_and_skips_what_is_already_said() -> None:
    raw = FakeRaw({"c": claim()})
    writer = ClaimStatusWriter(raw, "node-a")  # type: ignore[arg-type]
    try:
        raw.gate.clear()
        writer.report(report(name="c", ready=False, reason=ds.REASON_WAITING_FOR_DAEMON))
        writer.report(report(name="c", ready=False, reason=ds.REASON_WAITING_FOR_DAEMON, message="later"))
        writer.report(report(name="c"))
        raw.gate.set()
        assert writer.flush()
        reasons = [w["status"]["devices"][0]["conditions"][0]["reason"] for w in raw.writes]
        assert reasons[-1] == "DaemonReady" and len(reasons) <= 2, "queued reports of one claim coalesce"
        count = len(raw.writes)
        writer.report(report(name="c"))
        assert writer.flush() and len(raw.writes) == count, "an unchanged status is not written again"
    finally:
        writer.close()


def test_the_writer_skips_gone_or_replaced_claims_and_logs_a_refusal_once(caplog: pytest.LogCaptureFixture) -> None:
    raw = FakeRaw({"replaced": claim("replaced", uid="other"), "c": claim()})
    writer = ClaimStatusWriter(raw, "node-a")  # type: ignore[arg-type]
    try:
        writer.report(report(name="gone", uid="u9"))
        writer.report(report(name="replaced", uid="u2"))
        assert writer.flush() and raw.writes == []
        raw.errors = [ApiError(403, "Forbidden", "no"), ApiError(403, "Forbidden", "no")]
        with caplog.at_level(logging.DEBUG, logger="cdriver.roles.kubelet_plugin.status_writer"):
            writer.report(report(name="c"))
            assert writer.flush()
            writer.report(report(name="c", message="again"))
            assert writer.flush()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "not affected" in warnings[0].getMessage()
        assert writer.failed == 2 and raw.writes == []
        raw.errors = [ApiError(409, "Conflict", "changed")]
        writer.report(report(name="c", message="third"))
        assert writer.flush() and len(raw.writes) == 1, "a conflict is retried on a fresh read"
    finally:
        writer.close()
