"""The deletion plan: order of deletes, label removal, finalizer release."""

from __future__ import annotations

import pytest

from cdriver.roles.controller.deletion import (
    ROLE_DAEMON_SET,
    ROLE_DAEMON_TEMPLATE,
    ROLE_WORKLOAD_TEMPLATE,
    Action,
    Generated,
    generated_from,
    plan_deletion,
)

pytestmark = pytest.mark.unit


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
