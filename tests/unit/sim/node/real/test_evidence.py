"""Evidence that a (re)started kubelet is at work: its Lease, its metrics, the containers it started."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdriver.sim.node.real import evidence

STARTED = datetime(2026, 12, 2, 13, 36, 52, 497000, tzinfo=UTC).timestamp()

METRICS = """# HELP kubelet_pod_worker_duration_seconds Duration in seconds to sync a single pod.
# TYPE kubelet_pod_worker_duration_seconds histogram
kubelet_pod_worker_duration_seconds_bucket{operation_type="create",le="0.005"} 0
kubelet_pod_worker_duration_seconds_count{operation_type="create"} 2
kubelet_pod_worker_duration_seconds_count{operation_type="sync"} {sync}
kubelet_started_containers_total{container_type="container"} {started}
kubelet_started_containers_total{container_type="init_container"} 0
process_start_time_seconds 1.79621861179e+09
"""


def metrics(sync: int, started: int = 0) -> list:
    return evidence.parse_metrics(METRICS.replace("{sync}", str(sync)).replace("{started}", str(started)))


def pod(name: str, started_at: str, node: str = "worker-1", phase: str = "Running") -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node},
            "status": {"phase": phase, "containerStatuses": [{"state": {"running": {"startedAt": started_at}}}]}}


def test_metrics_are_parsed_with_their_labels_and_summed_by_label() -> None:
    samples = metrics(3, 1)
    assert ("kubelet_pod_worker_duration_seconds_count", {"operation_type": "sync"}, 3.0) in samples
    assert evidence.total(samples, evidence.POD_SYNCS) == 5
    assert evidence.total(samples, evidence.POD_SYNCS, operation_type="create") == 2
    assert evidence.total(samples, evidence.STARTED_CONTAINERS) == 1
    assert evidence.total(samples, "process_start_time_seconds") == pytest.approx(1.79621861179e9)


def test_a_lease_renewed_after_the_start_is_the_new_kubelets_heartbeat() -> None:
    assert evidence.lease_renewed_since({"spec": {"renewTime": "2026-12-02T13:36:52.860809Z"}}, STARTED)
    assert not evidence.lease_renewed_since({"spec": {"renewTime": "2026-12-02T13:36:46.948609Z"}}, STARTED)
    assert not evidence.lease_renewed_since({"spec": {}}, STARTED) and not evidence.lease_renewed_since(None, STARTED)


def test_pods_count_as_synced_after_a_first_sync_and_a_resync_each() -> None:
    pods = [pod("a", "2026-12-02T13:30:00Z"), pod("b", "2026-12-02T13:31:00Z")]
    assert evidence.pods_synced(metrics(1), STARTED, pods) == "3 pod syncs finished (1 resyncs) for 2 pods"
    assert evidence.pods_synced(metrics(2), STARTED, pods) == ""


def test_a_container_the_kubelet_started_must_show_in_the_api_first() -> None:
    old = pod("a", "2026-12-02T13:30:00Z")
    assert evidence.pods_synced(metrics(2, started=1), STARTED, [old]) == \
        "the kubelet started 1 containers, the API shows 0 yet"
    # the old kubelet's start within the same second is not the new one's
    assert evidence.containers_started_since([pod("b", "2026-12-02T13:36:52Z")], STARTED) == 0
    recreated = pod("a", "2026-12-02T13:36:54Z")
    assert evidence.pods_synced(metrics(2, started=1), STARTED, [recreated]) == ""


def test_finished_pods_and_other_nodes_pods_are_not_waited_for() -> None:
    pods = [pod("a", "x"), pod("b", "x", phase="Succeeded"), pod("c", "x", node="worker-2")]
    assert [p["metadata"]["name"] for p in evidence.live_pods(pods, "worker-1")] == ["a"]
