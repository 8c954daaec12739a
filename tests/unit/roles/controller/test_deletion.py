"""The deletion plan: order of deletes, label removal, finalizer release."""

from __future__ import annotations

from cdriver.roles.controller.deletion import (
    ROLE_DAEMON_SET,
    ROLE_DAEMON_TEMPLATE,
    ROLE_WORKLOAD_TEMPLATE,
    Action,
    Generated,
    WorkloadUse,
    generated_from,
    holds_channel,
    plan_deletion,
    workloads_in_use,
)


def obj(role: str, terminating: bool = False, finalizer: bool = True) -> Generated:
    ns = "team" if role == ROLE_WORKLOAD_TEMPLATE else "driver"
    return Generated(role, ns, role, terminating, finalizer)


def actions(plan) -> list[tuple[str, str]]:
    return [(s.action.value, s.target.role if s.target else s.node) for s in plan.steps]


def test_first_pass_deletes_everything_and_unlabels_nodes():
    plan = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE), obj(ROLE_DAEMON_TEMPLATE),
                          obj(ROLE_DAEMON_SET)], ["node-b", "node-a"])
    assert actions(plan) == [
        ("delete", ROLE_WORKLOAD_TEMPLATE), ("delete", ROLE_DAEMON_TEMPLATE),
        ("delete", ROLE_DAEMON_SET), ("unlabel-node", "node-a"), ("unlabel-node", "node-b"),
    ]
    assert not plan.releases_domain and not plan.finished


def test_workload_template_released_before_daemon_objects():
    plan = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE, True), obj(ROLE_DAEMON_TEMPLATE, True),
                          obj(ROLE_DAEMON_SET, True)], [])
    assert actions(plan) == [("remove-finalizer", ROLE_WORKLOAD_TEMPLATE)]
    assert any("ResourceClaimTemplate team/" in w for w in plan.waiting_for)


def test_daemon_objects_released_once_workload_template_is_gone():
    plan = plan_deletion([obj(ROLE_DAEMON_TEMPLATE, True), obj(ROLE_DAEMON_SET, True)], [])
    assert actions(plan) == [("remove-finalizer", ROLE_DAEMON_TEMPLATE),
                             ("remove-finalizer", ROLE_DAEMON_SET)]
    assert len(plan.waiting_for) == 2 and not plan.releases_domain


def test_stuck_case_daemon_template_without_daemon_set_is_deleted():
    # A crash between creating the daemon template and the DaemonSet must not block deletion.
    first = plan_deletion([obj(ROLE_DAEMON_TEMPLATE)], [])
    assert actions(first) == [("delete", ROLE_DAEMON_TEMPLATE)]
    second = plan_deletion([obj(ROLE_DAEMON_TEMPLATE, True)], [])
    assert actions(second) == [("remove-finalizer", ROLE_DAEMON_TEMPLATE)]


def test_terminating_object_held_by_another_finalizer_is_waited_for():
    plan = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE, True, finalizer=False)], [])
    assert actions(plan) == [] and plan.waiting_for and not plan.finished


def test_domain_released_when_nothing_is_left():
    plan = plan_deletion([], [])
    assert actions(plan) == [("release-domain", "")]
    assert plan.releases_domain and plan.finished
    labelled = plan_deletion([], ["n1"])
    assert actions(labelled) == [("unlabel-node", "n1"), ("release-domain", "")]


def test_orphan_cleanup_never_releases_a_domain():
    plan = plan_deletion([obj(ROLE_DAEMON_SET, True)], ["n1"], domain_exists=False)
    assert actions(plan) == [("unlabel-node", "n1"), ("remove-finalizer", ROLE_DAEMON_SET)]
    done = plan_deletion([], [], domain_exists=False)
    assert done.steps == () and done.finished


def test_generated_from_reads_metadata():
    g = generated_from({"metadata": {"name": "x", "namespace": "ns", "deletionTimestamp": "t",
                                     "finalizers": ["other", "resource.nvidia.com/computeDomain"]}},
                       ROLE_DAEMON_SET)
    assert g == Generated(ROLE_DAEMON_SET, "ns", "x", True, True)
    assert g.describe() == "DaemonSet ns/x"
    assert Action.DELETE.value == "delete"


def channel_claim(name: str, domain: str, pods: list[str], allocated: bool = True) -> dict:
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig", "domainID": domain}
    status: dict = {"reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    config = {"opaque": {"driver": "compute-domain.nvidia.com", "parameters": params}}
    return {"metadata": {"name": name, "namespace": "team"},
            "spec": {"devices": {"config": [config]}}, "status": status}


def test_claims_in_use_are_the_domains_reserved_channel_claims():
    claims = [channel_claim("c2", "d1", ["p2"]), channel_claim("c1", "d1", ["p1", "p3"]),
              channel_claim("idle", "d1", []), channel_claim("other", "d2", ["p9"]),
              channel_claim("pending", "d1", ["p4"], allocated=False)]
    uses = workloads_in_use(claims, "d1")
    assert uses == [WorkloadUse("team", "c1", (("p1", "uid-p1"), ("p3", "uid-p3"))),
                    WorkloadUse("team", "c2", (("p2", "uid-p2"),))]
    assert uses[1].describe() == "pod team/p2 (claim c2)"


def test_while_pods_hold_channels_only_the_workload_template_goes():
    """Running jobs keep their daemons and node labels; no new workload can join."""
    use = WorkloadUse("team", "c1", (("p1", "u1"),))
    plan = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE), obj(ROLE_DAEMON_TEMPLATE), obj(ROLE_DAEMON_SET)],
                         ["node-a"], in_use=[use])
    assert actions(plan) == [("delete", ROLE_WORKLOAD_TEMPLATE)]
    assert not plan.releases_domain and plan.waiting_for == ("pod team/p1 (claim c1) to end",)
    again = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE, True), obj(ROLE_DAEMON_SET)], ["node-a"], in_use=[use])
    assert actions(again) == [("remove-finalizer", ROLE_WORKLOAD_TEMPLATE)] and not again.finished
    gone = plan_deletion([obj(ROLE_DAEMON_SET)], ["node-a"], in_use=[use])
    assert actions(gone) == [] and not gone.finished


def pod(uid: str, ready_to_start: str | None = None, **container: object) -> dict:
    status: dict = {}
    if ready_to_start is not None:
        status["conditions"] = [{"type": "PodReadyToStartContainers", "status": ready_to_start}]
    if container:
        status["containerStatuses"] = [{"name": "c", "restartCount": 0, "lastState": {}, **container}]
    return {"metadata": {"name": uid, "uid": uid}, "status": status}


WAITING = {"state": {"waiting": {"reason": "ContainerCreating"}}}


def test_a_pod_whose_claim_was_never_prepared_holds_no_channel():
    """kubelet reports no sandbox (Prepare never succeeded) and no container ever ran."""
    assert not holds_channel(pod("p", "False"))
    assert not holds_channel(pod("p", "False", **WAITING))


def test_a_pod_holds_its_channel_once_prepared_even_before_its_container_runs():
    assert holds_channel(pod("p", "True", **WAITING))  # sandbox up: image still pulling
    assert holds_channel(pod("p", "False", state={"running": {}}))
    assert holds_channel(pod("p", "False", state={"terminated": {"exitCode": 0}}))  # pod ended, claim still reserved
    assert holds_channel(pod("p", "False", state={"waiting": {"reason": "CrashLoopBackOff"}}, restartCount=3))
    init = pod("p", "False")
    init["status"]["initContainerStatuses"] = [{"name": "i", "state": {"terminated": {"exitCode": 0}}}]
    assert holds_channel(init)


def test_a_pod_kubelet_says_nothing_about_counts_as_holding():
    """No status yet, a kubelet without the condition, or a pod missing from the list."""
    assert holds_channel(pod("p"))
    assert holds_channel(pod("p", None, **WAITING))
    assert holds_channel(None)


def test_deletion_waits_only_for_pods_that_hold_their_channel():
    claims = [channel_claim("c1", "d1", ["held", "late"]), channel_claim("c2", "d1", ["late2"])]
    pods = {"uid-held": pod("held", "True", state={"running": {}}), "uid-late": pod("late", "False", **WAITING),
            "uid-late2": pod("late2", "False", **WAITING)}
    assert workloads_in_use(claims, "d1", pods) == [WorkloadUse("team", "c1", (("held", "uid-held"),))]
    del pods["uid-held"]["status"]
    pods["uid-held"]["status"] = {"conditions": [{"type": "PodReadyToStartContainers", "status": "False"}]}
    assert workloads_in_use(claims, "d1", pods) == []
    plan = plan_deletion([obj(ROLE_WORKLOAD_TEMPLATE), obj(ROLE_DAEMON_SET)], ["node-a"],
                         in_use=workloads_in_use(claims, "d1", pods))
    assert actions(plan) == [("delete", ROLE_WORKLOAD_TEMPLATE), ("delete", ROLE_DAEMON_SET),
                             ("unlabel-node", "node-a")]
    # pods unknown (cannot be listed): every reserved pod counts, as before
    assert [u.claim for u in workloads_in_use(claims, "d1", None)] == ["c1", "c2"]
