"""Local readiness decision and the watch-driven waiter."""

from __future__ import annotations

import threading
import time

from cdriver.roles.kubelet_plugin.readiness import ChangeNotifier, node_readiness

NODE = "node-a"
UID = "cd-uid"
CLIQUE = "c0ffee00-0000-0000-0000-000000000001.3"


def clique(status="Ready", node=NODE):
    return {"metadata": {"name": f"{UID}.{CLIQUE}"},
            "daemons": [{"nodeName": "other", "status": "Ready"}, {"nodeName": node, "status": status}]}


def cd(status=None):
    nodes = [] if status is None else [{"name": NODE, "status": status}]
    return {"metadata": {"uid": UID}, "status": {"nodes": nodes}}


def test_ready_in_clique():
    assert node_readiness(NODE, UID, CLIQUE, clique(), cd(), True, "drv") == (True, "")


def test_not_ready_in_clique_says_what_it_waits_for():
    ready, why = node_readiness(NODE, UID, CLIQUE, clique("NotReady"), cd(), True, "drv")
    assert not ready
    assert f"node {NODE} is NotReady in ComputeDomainClique drv/{UID}.{CLIQUE}" in why


def test_missing_clique_and_entry_are_named():
    assert "does not exist yet" in node_readiness(NODE, UID, CLIQUE, None, cd(), True, "drv")[1]
    assert "has no daemon entry" in node_readiness(NODE, UID, CLIQUE, clique(node="x"), cd(), True, "drv")[1]


def test_legacy_status_nodes_fallback():
    assert node_readiness(NODE, UID, CLIQUE, None, cd("Ready"), True, "drv")[0]
    # Cliques disabled: only status.nodes counts, even with a Ready clique present.
    assert not node_readiness(NODE, UID, CLIQUE, clique(), cd("NotReady"), False, "drv")[0]
    assert node_readiness(NODE, UID, CLIQUE, clique("NotReady"), cd("Ready"), False, "drv")[0]


def test_non_fabric_node_uses_status_nodes():
    ready, why = node_readiness(NODE, UID, "", None, cd(), True, "drv")
    assert not ready and "status.nodes has no entry" in why
    assert node_readiness(NODE, UID, "", None, cd("Ready"), True, "drv")[0]


def test_waiter_wakes_on_notify_not_on_timeout():
    notifier = ChangeNotifier()
    state = {"ready": False}
    woke = {}

    def waiter():
        woke["result"] = notifier.wait_for(lambda: True if state["ready"] else None, time.monotonic() + 30)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    notifier.notify()  # a change that does not make it ready: keeps waiting
    time.sleep(0.05)
    assert t.is_alive()
    state["ready"] = True
    notifier.notify()
    t.join(5)
    assert not t.is_alive() and woke["result"] is True


def test_waiter_gives_up_at_deadline():
    notifier = ChangeNotifier()
    assert notifier.wait_for(lambda: None, time.monotonic() + 0.05) is None


def test_change_between_check_and_wait_is_not_lost():
    notifier = ChangeNotifier()
    calls = {"n": 0}

    def check():
        calls["n"] += 1
        if calls["n"] == 1:
            notifier.notify()  # the change lands while the first check runs
            return None
        return "ok"

    assert notifier.wait_for(check, time.monotonic() + 30) == "ok"
