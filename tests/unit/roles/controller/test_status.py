"""ComputeDomain status aggregation: node lists, the numNodes rule, conditions, pruning."""

from __future__ import annotations

import pytest

from cdriver.api import constants
from cdriver.roles.controller.status import (
    CONDITION_READY,
    REASON_AWAITING_WORKLOADS,
    REASON_HOST_MANAGED,
    REASON_NODES_NOT_READY,
    REASON_WAITING_FOR_NODES,
    Problem,
    aggregate_nodes,
    corrected_clique,
    desired_status,
    entries_by_status,
    global_status,
    nodes_from_cliques,
    pod_node_name,
    prune_clique,
    pruned_fields,
    status_differs,
    without_fields,
)

UID = "u-1"
NOW = "2030-01-01T00:00:00Z"


def daemon(node: str, ip: str, index: int, status: str = constants.STATUS_READY, clique="c.0") -> dict:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": clique, "index": index,
            "status": status}


def clique(*daemons: dict, name: str = f"{UID}.c.0") -> dict:
    return {"kind": constants.KIND_COMPUTE_DOMAIN_CLIQUE,
            "metadata": {"name": name, "labels": {constants.LABEL_COMPUTE_DOMAIN: UID}},
            "daemons": list(daemons)}


def pod(node: str, ip: str = "", ready: bool = True, clique_label: str | None = None,
        bound: bool = True) -> dict:
    labels = {constants.LABEL_COMPUTE_DOMAIN: UID}
    if clique_label is not None:
        labels[constants.LABEL_CLIQUE_ID] = clique_label
    spec: dict = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}
    if bound:
        spec["nodeName"] = node
    return {"metadata": {"name": f"p-{node}", "labels": labels}, "spec": spec,
            "status": {"podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


def test_nodes_from_cliques_and_non_fabric_pods():
    cliques = [clique(daemon("n2", "10.0.0.2", 1), daemon("n1", "10.0.0.1", 0,
                                                           constants.STATUS_NOT_READY)),
               clique(daemon("n3", "10.0.0.3", 0, clique="c.1"), name=f"{UID}.c.1")]
    pods = [pod("n1", "10.0.0.1", clique_label="c.0"), pod("n4", "10.0.0.4", ready=False,
                                                            clique_label=""),
            pod("n5", "10.0.0.5", clique_label="")]
    nodes = aggregate_nodes([], cliques, pods, cliques_enabled=True)
    assert [n["name"] for n in nodes] == ["n1", "n2", "n3", "n4", "n5"]
    assert nodes[0] == {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0,
                        "status": constants.STATUS_NOT_READY}
    assert nodes[3] == {"name": "n4", "ipAddress": "10.0.0.4", "cliqueID": "", "index": -1,
                        "status": constants.STATUS_NOT_READY}
    assert nodes[4]["status"] == constants.STATUS_READY


def test_non_fabric_pod_without_ip_or_node_is_skipped():
    pods = [pod("n1", "", clique_label=""), pod("n2", "10.0.0.2", clique_label="", bound=False)]
    assert aggregate_nodes([], [], pods, cliques_enabled=True) == []


def test_clique_entry_without_status_counts_as_not_ready_like_the_crd_default():
    entry = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0}
    nodes = nodes_from_cliques([clique(entry)], [])
    assert nodes[0]["status"] == constants.STATUS_NOT_READY


def test_legacy_keeps_entries_of_live_fabric_pods_only():
    current = [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0, "status": "Ready"},
        {"name": "n2", "ipAddress": "10.0.0.9", "cliqueID": "c.0", "index": 1, "status": "Ready"},
        {"name": "n3", "ipAddress": "10.0.0.3", "cliqueID": "", "index": -1, "status": "Ready"},
    ]
    pods = [pod("n1", "10.0.0.1"), pod("n2", "10.0.0.2"),
            pod("n3", "10.0.0.3", ready=False, clique_label="")]
    nodes = aggregate_nodes(current, [clique(daemon("x", "1.1.1.1", 0))], pods,
                            cliques_enabled=False)
    # n2's entry names an IP no daemon pod has any more; n3 is rebuilt from its pod.
    assert [(n["name"], n["status"]) for n in nodes] == [("n1", "Ready"), ("n3", "NotReady")]


@pytest.mark.parametrize("num_nodes,statuses,expected", [
    (0, [], constants.STATUS_READY),
    (2, ["Ready"], constants.STATUS_NOT_READY),
    (2, ["Ready", "Ready"], constants.STATUS_READY),
    (1, ["Ready", "Ready", "Ready"], constants.STATUS_READY),  # numNodes is a minimum
    (0, ["Ready", "NotReady"], constants.STATUS_NOT_READY),
    (3, ["Ready", "NotReady"], constants.STATUS_NOT_READY),
])
def test_global_status_numnodes_rule(num_nodes, statuses, expected):
    nodes = [{"name": f"n{i}", "status": s} for i, s in enumerate(statuses)]
    assert global_status(num_nodes, nodes) == expected


def test_host_managed_is_ready_regardless_of_nodes_but_problems_win():
    assert global_status(8, [], host_managed=True) == constants.STATUS_READY
    assert global_status(8, [], host_managed=False) == constants.STATUS_NOT_READY
    problem = Problem("ResourceClaimTemplateConflict", "taken")
    assert global_status(0, [], host_managed=True, problem=problem) == constants.STATUS_NOT_READY
    assert global_status(0, [], problem=problem) == constants.STATUS_NOT_READY


def _ready_condition(status: dict) -> dict:
    (cond,) = status["conditions"]
    assert cond["type"] == CONDITION_READY
    return cond


def test_desired_status_condition_explains_host_mode_meaning():
    out = desired_status({}, 4, [], "imex-channel-0", True, None, 1, NOW, forced_single=True)
    assert out["status"] == constants.STATUS_READY and "nodes" not in out
    cond = _ready_condition(out)
    assert cond["status"] == "True" and cond["reason"] == REASON_HOST_MANAGED
    assert "admitted" in cond["message"] and "NOT report the health" in cond["message"]
    assert "reduced to Single" in cond["message"]
    assert cond["observedGeneration"] == 1 and cond["lastTransitionTime"] == NOW


def test_desired_status_problem_reason_and_counts():
    nodes = [{"name": "a", "status": "Ready"}, {"name": "b", "status": "NotReady"}]
    out = desired_status({}, 0, nodes, "t", False, None, 3, NOW)
    assert out["readyNodes"] == "1/2" and out["nodes"] == nodes
    assert _ready_condition(out)["reason"] == REASON_NODES_NOT_READY
    assert "b" in _ready_condition(out)["message"]
    waiting = desired_status({}, 3, nodes[:1], "t", False, None, 3, NOW)
    assert _ready_condition(waiting)["reason"] == REASON_WAITING_FOR_NODES
    blocked = desired_status({}, 0, [], "t", False, Problem("XConflict", "fix it"), 3, NOW)
    assert blocked["status"] == constants.STATUS_NOT_READY
    assert (_ready_condition(blocked)["reason"], _ready_condition(blocked)["message"]) == \
        ("XConflict", "fix it")
    idle = desired_status({}, 0, [], "t", False, None, 3, NOW)
    assert idle["status"] == constants.STATUS_READY
    assert _ready_condition(idle)["reason"] == REASON_AWAITING_WORKLOADS


def test_transition_time_kept_while_condition_status_unchanged():
    first = desired_status({}, 0, [], "t", False, None, 1, "2030-01-01T00:00:00Z")
    nodes = [{"name": "a", "status": "Ready"}]
    again = desired_status(first, 0, nodes, "t", False, None, 1, "2030-01-02T00:00:00Z")
    assert _ready_condition(again)["lastTransitionTime"] == "2030-01-01T00:00:00Z"
    flipped = desired_status(again, 2, nodes, "t", False, None, 1, "2030-01-03T00:00:00Z")
    assert _ready_condition(flipped)["lastTransitionTime"] == "2030-01-03T00:00:00Z"


def test_status_written_only_on_change():
    nodes = [{"name": "a", "ipAddress": "1", "cliqueID": "c", "index": 0, "status": "Ready"},
             {"name": "b", "ipAddress": "2", "cliqueID": "c", "index": 1, "status": "Ready"}]
    current = desired_status({}, 0, nodes, "t", False, None, 1, NOW)
    same = desired_status(current, 0, list(reversed(nodes)), "t", False, None, 1, "later")
    assert not status_differs(current, same)  # order and clock do not matter
    changed = [dict(nodes[0], status="NotReady"), nodes[1]]
    assert status_differs(current, desired_status(current, 0, changed, "t", False, None, 1,
                                                  NOW))
    assert status_differs({}, current)


def test_prune_drops_entries_of_nodes_without_daemon_pods():
    c = clique(daemon("n1", "1", 0), daemon("n2", "2", 1))
    assert prune_clique(c, {"n1", "n2", "n3"}) is None
    assert prune_clique(c, {"n2"}) == [daemon("n2", "2", 1)]
    assert prune_clique(c, set()) == []


def test_ready_entries_of_nodes_whose_daemon_pod_is_not_ready_are_demoted():
    # n1's daemon was killed: its entry still says Ready, kubelet says its pod is not.
    c = clique(daemon("n1", "1", 0), daemon("n2", "2", 1), daemon("n3", "3", 2, constants.STATUS_NOT_READY))
    assert corrected_clique(c, {"n1", "n2", "n3"}, {"n2"}) == [
        daemon("n1", "1", 0, constants.STATUS_NOT_READY), daemon("n2", "2", 1),
        daemon("n3", "3", 2, constants.STATUS_NOT_READY)]
    # Pruning and demotion together; nothing to change gives None (no write).
    assert corrected_clique(c, {"n1", "n2"}, {"n2"}) == [
        daemon("n1", "1", 0, constants.STATUS_NOT_READY), daemon("n2", "2", 1)]
    assert corrected_clique(c, {"n1", "n2", "n3"}, {"n1", "n2"}) is None
    assert corrected_clique(c, {"n2", "n3"}, {"n2"}) == [daemon("n2", "2", 1),
                                                        daemon("n3", "3", 2, constants.STATUS_NOT_READY)]


def test_entries_without_an_index_are_given_one_with_pruning_and_demotion():
    joined = {"nodeName": "n3", "ipAddress": "3", "cliqueID": "c.0", "status": constants.STATUS_NOT_READY}
    c = clique(daemon("n1", "1", 1), daemon("n2", "2", 0), joined)
    # n3 applied its entry without an index: it gets the lowest free one (2) in the same write
    assert corrected_clique(c, {"n1", "n2", "n3"}, {"n1", "n2"}) == [
        daemon("n1", "1", 1), daemon("n2", "2", 0), {**joined, "index": 2}]
    # n2 has gone and n1's pod is not Ready: one write prunes, demotes and assigns (n3 takes 0)
    assert corrected_clique(c, {"n1", "n3"}, set()) == [
        daemon("n1", "1", 1, constants.STATUS_NOT_READY), {**joined, "index": 0}]
    # the controller's --max-nodes-per-imex-domain bounds the indices it gives
    assert corrected_clique(c, {"n1", "n2", "n3"}, {"n1", "n2"}, max_nodes=2) is None


def test_legacy_entry_of_a_daemon_whose_pod_is_not_ready_is_not_ready():
    current = [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0, "status": "Ready"}]
    nodes = aggregate_nodes(current, [], [pod("n1", "10.0.0.1", ready=False)], cliques_enabled=False)
    assert [(n["name"], n["status"]) for n in nodes] == [("n1", "NotReady")]


def test_pod_node_name_known_before_binding():
    assert pod_node_name(pod("n7", bound=False)) == "n7"
    assert pod_node_name(pod("n7")) == "n7"
    assert pod_node_name({"spec": {}}) == ""


def test_status_fields_an_older_crd_prunes_stop_the_rewrites():
    """With the upstream CRD installed, readyNodes/conditions and node fields it does not know
    are dropped by the server; once seen, they are left out so the status settles."""
    node = {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "Ready",
            "extra": "x"}
    want = {"status": "Ready", "nodes": [node], "readyNodes": "1/1",
            "conditions": [{"type": "Ready", "status": "True"}]}
    stored = {"status": "Ready", "nodes": [{k: v for k, v in node.items() if k != "extra"}]}
    assert status_differs(stored, want)  # without the fix: written again on every pass
    dropped = pruned_fields(want, stored)
    assert dropped == {"readyNodes", "conditions", "nodes.extra"}
    assert not status_differs(stored, without_fields(want, dropped))
    assert pruned_fields(want, want) == set()
    assert without_fields(want, set()) is want


def test_daemon_entries_by_status_count_an_absent_status_as_not_ready():
    entries = [{"status": constants.STATUS_READY}, {"status": constants.STATUS_NOT_READY}, {}]
    assert entries_by_status(entries) == {constants.STATUS_READY: 1, constants.STATUS_NOT_READY: 2}
    assert entries_by_status([]) == {constants.STATUS_READY: 0, constants.STATUS_NOT_READY: 0}
