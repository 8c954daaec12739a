"""diagnose: each boundary of the troubleshooting table, as a snapshot, is named first with its evidence."""

from __future__ import annotations

import json

import pytest

from cdriver.api import constants
from cdriver.diagnose import names
from cdriver.diagnose.chain import TargetNotFound, diagnose_all, diagnose_computedomain, diagnose_pod
from cdriver.diagnose.model import EXIT_COULD_NOT_RUN, EXIT_FAILED, EXIT_PASS, EXIT_WAITING, Chain, Diagnosis
from cdriver.diagnose.render import render_json, render_text
from cdriver.diagnose.snapshot import Snapshot
from tests.unit.diagnose.fixtures import (
    NOW,
    NS,
    UID,
    drop,
    event,
    find,
    healthy,
    make_young,
    workload_pod,
)


def run(data: dict) -> Chain:
    return diagnose_computedomain(Snapshot(data), NS, "cd")


def verdicts(chain: Chain) -> dict[str, str]:
    return {link.key: link.verdict.value for link in chain.links}


def first(chain: Chain) -> tuple[str, str]:
    link = chain.first_broken
    assert link is not None, verdicts(chain)
    return link.key, link.verdict.value


def evidence(chain: Chain, key: str) -> str:
    link = next(lk for lk in chain.links if lk.key == key)
    return link.summary + "\n" + "\n".join(link.evidence)


def test_healthy_domain_passes_every_link_with_identifiers() -> None:
    chain = run(healthy())
    assert chain.first_broken is None
    assert chain.exit_code == EXIT_PASS
    assert verdicts(chain) == {"installation": "PASS", "resourceslices": "PASS", "computedomain": "PASS",
                               "template": "PASS", "workload": "PASS", "allocation": "PASS", "node-label": "PASS",
                               "daemon": "PASS", "clique": "PASS", "cdi": "PASS", "device": "SKIP"}
    ids = {lk.key: lk.ids for lk in chain.links}
    assert ids["computedomain"]["cdUID"] == UID
    assert ids["allocation"][f"pod {NS}/w0"] == {"claimUID": "claim-uid-0", "pool": "node-0",
                                                 "device": constants.DEVICE_CHANNEL_0, "node": "node-0"}
    assert ids["clique"][f"pod {NS}/w1"]["index"] == 1
    assert ids["daemon"][f"pod {NS}/w1"]["daemonIP"] == "10.0.1.1"
    assert ids["cdi"][f"pod {NS}/w0"]["cdiID"] == f"{constants.CDI_KIND_CLAIM}=claim-uid-0-{constants.DEVICE_CHANNEL_0}"


def test_exec_output_with_the_channel_passes_the_device_link() -> None:
    data = healthy()
    data["execEnabled"] = True
    for pod in ("w0", "w1"):
        data["exec"][f"{NS}/{pod}"] = {"rc": 0, "output": "total 0\ncrw-rw-rw- 1 root root 511, 0 Jan 1 channel0\n"}
    chain = run(data)
    assert verdicts(chain)["device"] == "PASS"
    data["exec"][f"{NS}/w1"] = {"rc": 2, "output": "ls: cannot access '/dev/nvidia-caps-imex-channels'"}
    chain = run(data)
    assert first(chain) == ("device", "FAIL")
    assert "cannot access" in evidence(chain, "device")


def test_controller_scaled_to_zero_is_the_installation() -> None:
    data = healthy()
    find(data, "deployments", "cdriver-controller")["spec"]["replicas"] = 0
    chain = run(data)
    assert first(chain) == ("installation", "FAIL")
    assert "scaled to 0" in chain.first_broken.summary
    assert chain.exit_code == EXIT_FAILED


def test_missing_device_class_is_the_installation() -> None:
    data = healthy()
    drop(data, "deviceclasses", constants.DEVICE_CLASS_DEFAULT_CHANNEL)
    chain = run(data)
    assert first(chain) == ("installation", "FAIL")
    assert f"DeviceClass {constants.DEVICE_CLASS_DEFAULT_CHANNEL} is missing" in chain.first_broken.summary


def test_missing_crd_version_is_the_installation() -> None:
    data = healthy()
    data["crds"][0]["spec"]["versions"] = [{"name": "v1alpha1", "served": True}]
    assert first(run(data)) == ("installation", "FAIL")


def test_node_without_channel_slice_and_plugin_is_named() -> None:
    data = healthy()
    drop(data, "resourceslices", "node-1-slice")
    drop(data, "pods", "plugin-node-1")
    chain = run(data)
    assert first(chain) == ("resourceslices", "FAIL")
    assert "node node-1" in chain.first_broken.summary and "no plugin pod" in chain.first_broken.summary


def test_template_missing_on_a_young_domain_is_a_wait_then_a_failure() -> None:
    data = healthy()
    drop(data, "resourceclaimtemplates", "cd-channel")
    for pod in ("w0", "w1"):
        drop(data, "pods", pod)
    make_young(find(data, "computedomains", "cd"))
    chain = run(data)
    assert first(chain) == ("template", "WAIT")
    assert chain.exit_code == EXIT_WAITING
    find(data, "computedomains", "cd")["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    assert first(run(data)) == ("template", "FAIL")


def test_template_name_conflict_names_the_foreign_template() -> None:
    data = healthy()
    rct = find(data, "resourceclaimtemplates", "cd-channel")
    rct["metadata"]["labels"] = {}
    rct["spec"]["spec"]["devices"]["config"] = []
    data["events"].append(event(find(data, "computedomains", "cd"), "ResourceClaimTemplateConflict",
                                "ResourceClaimTemplate ml/cd-channel already exists"))
    chain = run(data)
    assert first(chain) == ("template", "FAIL")
    assert "name conflict" in chain.first_broken.summary
    assert "ResourceClaimTemplateConflict" in evidence(chain, "template")


def test_no_workload_yet_means_zero_daemon_pods_is_expected() -> None:
    data = healthy()
    for name in ("w0", "w1", "computedomain-daemon-0", "computedomain-daemon-1"):
        drop(data, "pods", name)
    chain = run(data)
    assert chain.first_broken is None
    assert verdicts(chain)["workload"] == "SKIP"
    assert chain.exit_code == EXIT_PASS


def unallocated_young_w1(data: dict) -> dict:
    """Make w1's claim unallocated and w1 a young unscheduled pod; returns the pod."""
    find(data, "resourceclaims", "w1-channel-abc")["status"] = {}
    pod = find(data, "pods", "w1")
    pod["spec"].pop("nodeName")
    pod["status"] = {"phase": "Pending", "resourceClaimStatuses": pod["status"]["resourceClaimStatuses"]}
    make_young(pod)
    return pod


def test_unallocated_claim_waits_then_fails_on_repeated_scheduling_failures() -> None:
    data = healthy()
    pod = unallocated_young_w1(data)
    assert first(run(data)) == ("allocation", "WAIT")
    data["events"].append(event(pod, "FailedScheduling", "0/3 nodes are available: cannot allocate all claims",
                                count=5))
    chain = run(data)
    assert first(chain) == ("allocation", "FAIL")
    assert "cannot allocate all claims" in chain.first_broken.summary


def test_a_claim_kept_off_a_tainted_channel_fails_at_once_naming_the_taint() -> None:
    data = healthy()
    pod = unallocated_young_w1(data)
    sl = find(data, "resourceslices", "node-1-slice")
    sl["spec"]["devices"][0]["taints"] = [{"key": "compute-domain.nvidia.com/unusable", "value": "fabric-unhealthy",
                                           "effect": "NoSchedule"}]
    data["events"].append(event(pod, "FailedScheduling", "0/3 nodes are available: cannot allocate all claims"))
    chain = run(data)
    assert first(chain) == ("allocation", "FAIL"), "a young pod, but no bootstrap delay"
    assert "channel-0 on node node-1 is tainted compute-domain.nvidia.com/unusable=fabric-unhealthy:NoSchedule" \
        in chain.first_broken.summary
    assert "kubectl get resourceslices -o yaml" in chain.first_broken.next_command


def test_non_fabric_placement_is_the_allocation() -> None:
    data = healthy()
    find(data, "nodes", "node-1")["metadata"]["labels"].pop(constants.LABEL_NODE_CLIQUE)
    chain = run(data)
    assert first(chain) == ("allocation", "FAIL")
    assert "not attached to an NVLink fabric" in chain.first_broken.summary


def test_claim_not_referenced_by_a_container_is_the_workload() -> None:
    data = healthy()
    drop(data, "pods", "w1")
    data["pods"].append(workload_pod("w1", "node-1", "w1-channel-abc", use_claim=False))
    chain = run(data)
    assert first(chain) == ("workload", "FAIL")
    assert "no container lists it" in chain.first_broken.summary


def test_label_removed_by_hand_after_prepare_is_the_node_label() -> None:
    data = healthy()
    find(data, "nodes", "node-1")["metadata"]["labels"].pop(constants.LABEL_COMPUTE_DOMAIN)
    drop(data, "pods", "computedomain-daemon-1")
    chain = run(data)
    assert first(chain) == ("node-label", "FAIL")
    assert "node node-1 lost its label" in chain.first_broken.summary


def test_label_not_yet_set_while_preparing_is_a_wait_and_repeated_failures_make_it_stable() -> None:
    data = healthy()
    find(data, "nodes", "node-1")["metadata"]["labels"].pop(constants.LABEL_COMPUTE_DOMAIN)
    drop(data, "pods", "computedomain-daemon-1")
    pod = find(data, "pods", "w1")
    pod["status"] = {"phase": "Pending", "resourceClaimStatuses": pod["status"]["resourceClaimStatuses"],
                     "containerStatuses": [{"name": "workload", "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    make_young(pod)
    chain = run(data)
    assert first(chain) == ("node-label", "WAIT")
    assert chain.exit_code == EXIT_WAITING
    pod["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    data["events"].append(event(pod, "FailedPrepareDynamicResources", "prepare failed", count=12))
    assert first(run(data)) == ("node-label", "FAIL")


def test_node_held_by_another_domain_is_the_node_label() -> None:
    data = healthy()
    find(data, "nodes", "node-0")["metadata"]["labels"][constants.LABEL_COMPUTE_DOMAIN] = "other-uid"
    chain = run(data)
    assert first(chain) == ("node-label", "FAIL")
    assert "other-uid" in chain.first_broken.summary


def test_labelled_node_without_daemon_pod_waits_then_fails() -> None:
    data = healthy()
    drop(data, "pods", "computedomain-daemon-1")
    make_young(find(data, "pods", "w1"))
    assert first(run(data)) == ("daemon", "WAIT")
    find(data, "pods", "w1")["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    chain = run(data)
    assert first(chain) == ("daemon", "FAIL")
    assert "mismatch" in chain.first_broken.summary


def test_imex_start_failure_event_is_the_daemon() -> None:
    data = healthy()
    pod = find(data, "pods", "computedomain-daemon-1")
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    make_young(pod)
    data["events"].append(event(pod, names.EVENT_IMEX_PORT_CONFLICT,
                                "IMEX port 50000 on pod IP 10.0.1.1 is already in use by process 42"))
    chain = run(data)
    assert first(chain) == ("daemon", "FAIL")
    assert names.EVENT_IMEX_PORT_CONFLICT in chain.first_broken.summary
    assert "computedomain-daemon-1" in evidence(chain, "daemon")


def test_crash_looping_daemon_is_the_daemon() -> None:
    data = healthy()
    pod = find(data, "pods", "computedomain-daemon-0")
    pod["status"]["containerStatuses"][0].update(restartCount=7, state={"waiting": {"reason": "CrashLoopBackOff"}})
    assert first(run(data)) == ("daemon", "FAIL")


def test_clique_entry_not_ready_waits_while_the_daemon_is_young() -> None:
    data = healthy()
    data["cliques"][0]["daemons"][1]["status"] = constants.STATUS_NOT_READY
    make_young(find(data, "pods", "computedomain-daemon-1"))
    chain = run(data)
    assert first(chain) == ("clique", "WAIT")
    assert "index 1 IP 10.0.1.1" in evidence(chain, "clique")
    find(data, "pods", "computedomain-daemon-1")["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    assert first(run(data)) == ("clique", "FAIL")


def test_prepare_waiting_on_a_converging_clique_is_a_wait() -> None:
    data = healthy()
    pod = find(data, "pods", "w1")
    pod["status"] = {"phase": "Pending", "resourceClaimStatuses": pod["status"]["resourceClaimStatuses"]}
    make_young(pod)
    claim = find(data, "resourceclaims", "w1-channel-abc")
    data["events"].append(event(claim, names.EVENT_WAITING_FOR_DAEMON, "not ready on node node-1", "Normal"))
    chain = run(data)
    assert first(chain) == ("cdi", "WAIT")
    assert names.EVENT_WAITING_FOR_DAEMON in evidence(chain, "cdi")


def test_the_claims_device_status_is_evidence_of_why_prepare_waits() -> None:
    data = healthy()
    pod = find(data, "pods", "w1")
    pod["status"] = {"phase": "Pending", "resourceClaimStatuses": pod["status"]["resourceClaimStatuses"]}
    make_young(pod)
    claim = find(data, "resourceclaims", "w1-channel-abc")
    result = claim["status"]["allocation"]["devices"]["results"][0]
    claim["status"]["devices"] = [
        {"driver": "gpu.example.com", "pool": "p", "device": "gpu-0", "conditions": []},
        {"driver": constants.DRIVER_NAME, "pool": result["pool"], "device": result["device"], "conditions": [
            {"type": "Ready", "status": "False", "reason": "WaitingForDaemon", "lastTransitionTime": NOW,
             "message": "claim ns/w1-channel-abc:uid-1: ComputeDomain ns/cd (UID x) is not ready on node node-1 "
                        "after 3.0s: node node-1 is NotReady in ComputeDomainClique q; waiting (kubelet retries)"}]}]
    chain = run(data)
    assert first(chain) == ("cdi", "WAIT")
    cdi = next(lk for lk in chain.links if lk.key == "cdi")
    assert "the plugin reports WaitingForDaemon" in cdi.summary
    assert (f"claim status.devices {result['pool']}/{result['device']}: Ready=False WaitingForDaemon: "
            "ComputeDomain ns/cd (UID x) is not ready on node node-1 after 3.0s") in evidence(chain, "cdi")


def test_the_channels_health_in_pod_status_is_evidence() -> None:
    data = healthy()
    pod = find(data, "pods", "w0")
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "claim:channel", "resources": [{"resourceID": "k8s.compute-domain.nvidia.com/claim=x-channel-0",
                                                 "health": "Unhealthy", "message": "IMEX daemon ... is not Ready"}]}]
    chain = run(data)
    assert "pod ml/w0: container workload: k8s.compute-domain.nvidia.com/claim=x-channel-0 is Unhealthy: " \
        "IMEX daemon ... is not Ready" in evidence(chain, "cdi")
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["resources"][0]["health"] = "Healthy"
    assert "kubelet reports the channel Healthy" in evidence(run(data), "cdi")


def test_channel_not_injected_on_a_non_fabric_node_is_the_cdi() -> None:
    data = healthy()
    claim = find(data, "resourceclaims", "w0-channel-abc")
    data["events"].append(event(claim, names.EVENT_CHANNEL_NOT_INJECTED, "not attached to a fabric"))
    assert first(run(data)) == ("cdi", "FAIL")


def test_deletion_blocked_by_a_foreign_finalizer() -> None:
    data = healthy()
    cd = find(data, "computedomains", "cd")
    cd["metadata"].update(deletionTimestamp="2026-01-01T10:59:58Z", finalizers=["example.com/hold"])
    chain = run(data)
    assert first(chain) == ("computedomain", "FAIL")
    assert "example.com/hold" in chain.first_broken.summary


def test_deletion_in_progress_with_the_driver_finalizer_is_a_wait() -> None:
    data = healthy()
    find(data, "computedomains", "cd")["metadata"]["deletionTimestamp"] = "2026-01-01T10:59:58Z"
    assert first(run(data)) == ("computedomain", "WAIT")


def not_prepared(pod: dict) -> None:
    """kubelet's view of a pod whose channel claim Prepare refused: no sandbox, container waiting."""
    pod["status"].update(phase="Pending", conditions=[{"type": "PodReadyToStartContainers", "status": "False"}],
                         containerStatuses=[{"name": "workload", "restartCount": 0,
                                             "state": {"waiting": {"reason": "ContainerCreating"}}}])


def test_pods_without_a_channel_when_the_deletion_began_are_named_with_the_fix() -> None:
    data = healthy()
    find(data, "computedomains", "cd")["metadata"]["deletionTimestamp"] = "2026-01-01T10:59:58Z"
    not_prepared(find(data, "pods", "w1"))
    chain = run(data)
    assert first(chain) == ("computedomain", "FAIL")
    summary = chain.first_broken.summary
    assert f"{NS}/w1 had no IMEX channel when the deletion began" in summary and f"{NS}/w0" not in summary
    assert chain.first_broken.next_command == f"kubectl -n {NS} delete pod w1"
    # a pod whose sandbox exists holds its channel (image still pulling): not named
    find(data, "pods", "w1")["status"]["conditions"][0]["status"] = "True"
    assert first(run(data)) == ("computedomain", "WAIT")


def test_a_deletion_that_waits_for_pods_holding_channels_says_so() -> None:
    data = healthy()
    cd = find(data, "computedomains", "cd")
    cd["metadata"]["deletionTimestamp"] = "2026-01-01T10:00:00Z"
    cd["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": names.REASON_DELETION_WAITS,
                                   "message": f"pods still use its IMEX channels: pod {NS}/w0 (claim c)"}]
    chain = run(data)
    assert first(chain) == ("computedomain", "WAIT")
    assert "deletion waits for the pods that hold its IMEX channels" in chain.first_broken.summary


def test_a_pod_refused_because_its_domain_was_deleted_says_so() -> None:
    data = healthy()
    drop(data, "computedomains", "cd")
    pod = find(data, "pods", "w1")
    not_prepared(pod)
    data["events"].append(event(pod, names.EVENT_FAILED_PREPARE,
                                "Failed to prepare dynamic resources: claim team/w1-channel: ComputeDomain with UID "
                                f"{UID} not found; it was deleted, or the claim was not created from its "
                                "ResourceClaimTemplate", count=4))
    chain = diagnose_pod(Snapshot(data), NS, "w1")
    assert first(chain) == ("computedomain", "FAIL")
    assert "deleted before the claim was prepared" in chain.first_broken.summary
    assert chain.first_broken.next_command == f"kubectl -n {NS} delete pod w1"


def test_num_nodes_larger_than_fabric_nodes_is_the_domain() -> None:
    data = healthy()
    find(data, "computedomains", "cd")["spec"]["numNodes"] = 8
    chain = run(data)
    assert first(chain) == ("computedomain", "FAIL")
    assert "numNodes is 8 but only 3" in chain.first_broken.summary


def test_host_managed_expects_no_daemon_objects_and_checks_the_socket() -> None:
    data = healthy(names.IMEX_MODE_HOST_MANAGED)
    chain = run(data)
    assert chain.mode == names.IMEX_MODE_HOST_MANAGED
    assert chain.first_broken is None
    v = verdicts(chain)
    assert (v["node-label"], v["daemon"], v["host-socket"]) == ("SKIP", "SKIP", "PASS")
    pod = find(data, "pods", "w1")
    pod["status"] = {"phase": "Pending", "resourceClaimStatuses": pod["status"]["resourceClaimStatuses"]}
    claim = find(data, "resourceclaims", "w1-channel-abc")
    data["events"].append(event(claim, names.EVENT_HOST_IMEX_NOT_READY,
                                "claim ml/w1-channel-abc:claim-uid-1: readiness check failed for socket "
                                "/etc/nvidia-imex/x.sock: no such file; start the host service", count=4))
    chain = run(data)
    assert first(chain) == ("host-socket", "FAIL")
    assert chain.first_broken.summary == ("host IMEX service on node-1 is not READY: readiness check failed for "
                                          "socket /etc/nvidia-imex/x.sock: no such file")


def test_rbac_hidden_slices_are_reported_and_exit_could_not_run() -> None:
    data = healthy()
    data["resourceslices"] = []
    data["forbidden"]["resourceslices"] = 'resourceslices is forbidden: User "dev" cannot list'
    chain = run(data)
    link = next(lk for lk in chain.links if lk.key == "resourceslices")
    assert link.verdict.value == "SKIP" and "cannot list resourceslices: forbidden" in link.hidden
    assert chain.exit_code == EXIT_COULD_NOT_RUN


def test_pod_target_follows_its_template_to_the_domain() -> None:
    data = healthy()
    find(data, "nodes", "node-1")["metadata"]["labels"].pop(constants.LABEL_COMPUTE_DOMAIN)
    snap = Snapshot(data)
    assert diagnose_pod(snap, NS, "w0").first_broken is None
    assert first(diagnose_pod(snap, NS, "w1")) == ("node-label", "FAIL")
    data["pods"].append(workload_pod("stray", "node-2", "x", template="nope"))
    chain = diagnose_pod(Snapshot(data), NS, "stray")
    assert first(chain) == ("workload", "FAIL")
    with pytest.raises(TargetNotFound):
        diagnose_pod(snap, NS, "missing")


def test_all_covers_every_domain() -> None:
    data = healthy()
    other = json.loads(json.dumps(find(data, "computedomains", "cd")))
    other["metadata"].update(name="cd2", uid="uid-2")
    other["spec"]["channel"]["resourceClaimTemplate"]["name"] = "cd2-channel"
    data["computedomains"].append(other)
    chains = diagnose_all(Snapshot(data))
    assert [c.target for c in chains] == [f"computedomain {NS}/cd", f"computedomain {NS}/cd2"]
    assert first(chains[1])[0] == "template"


def test_text_leads_with_the_first_broken_link_and_json_names_it() -> None:
    data = healthy()
    find(data, "deployments", "cdriver-controller")["spec"]["replicas"] = 0
    diagnosis = Diagnosis([run(data)])
    text = render_text(diagnosis)
    lines = text.splitlines()
    assert lines[1].startswith("FIRST BROKEN LINK: FAIL installation")
    assert "likely causes:" in text and "next: kubectl -n cdriver-system get deployment" in text
    assert lines[-1] == "result: FAILED (exit 1)"
    doc = json.loads(render_json(diagnosis))
    assert doc["exitCode"] == EXIT_FAILED
    assert doc["chains"][0]["firstBroken"] == "installation"
    assert doc["chains"][0]["links"][0]["nextCommand"].startswith("kubectl")
    assert Diagnosis(error="cannot reach").exit_code == EXIT_COULD_NOT_RUN



def test_refusal_in_the_driver_namespace_hides_only_the_daemon_links() -> None:
    data = healthy()
    data["pods"] = [p for p in data["pods"] if p["metadata"]["namespace"] == NS]
    data["forbidden"]["pods/cdriver-system"] = 'pods is forbidden: User "dev" cannot list'
    chain = run(data)
    v = verdicts(chain)
    assert (v["workload"], v["allocation"], v["daemon"]) == ("PASS", "PASS", "SKIP")
    assert "cannot list pods: forbidden" in next(lk for lk in chain.links if lk.key == "daemon").hidden
    assert chain.exit_code == EXIT_COULD_NOT_RUN


def test_cdi_id_is_the_one_the_kubelet_plugin_returns() -> None:
    from cdriver.diagnose.pod_links import claim_cdi_id
    from cdriver.roles.kubelet_plugin.cdi_edits import claim_device_id

    device = constants.DEVICE_CHANNEL_0
    assert claim_cdi_id("3f39d516", device) == claim_device_id("3f39d516", device)
