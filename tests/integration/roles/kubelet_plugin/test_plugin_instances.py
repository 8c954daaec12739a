"""Two instances of the kubelet plugin on one node, as the old and the new pod of a rolling
update (per-pod sockets, `--pod-uid`): both serve from the same plugin directory, a claim one
prepared the other unprepares, a stopping instance finishes its calls in flight before its
sockets go, leaves the node's clique label to the other, and a new instance removes the sockets
of a killed one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdriver.api import constants
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from tests.support.kubelet import Kubelet
from tests.support.objects import allocated_claim, channel_params, make_cd, node_label, set_clique_ready, uid_of
from tests.support.plugin_process import PREPARE_TIMEOUT, PluginProcess, SimNode
from tests.support.waiting import wait_for

NODES = RESOURCES["nodes"]


def clique_label(raw: RawClient, node: SimNode) -> str | None:
    return ((raw.get(NODES, node.name).get("metadata") or {}).get("labels") or {}).get(constants.LABEL_NODE_CLIQUE)


def dead_socket(path: Path) -> Path:
    """A socket file nobody serves (what a killed plugin leaves)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


def test_two_instances_share_the_node_and_the_old_one_finishes_its_call_before_leaving(
        plugin_factory: Callable[..., PluginProcess], raw: RawClient, namespace: str, node: SimNode,
        driver_ns: str) -> None:
    label = ["--gpu-clique-label-enabled"]
    old = plugin_factory(node, extra_args=label, pod_uid="0ld-pod")
    new = plugin_factory(node, extra_args=label, beside=old, pod_uid="new-pod")
    assert old.reg_socket != new.reg_socket and old.dra_socket != new.dra_socket
    assert old.reg_socket.parent == new.reg_socket.parent and old.reg_socket.exists() and new.reg_socket.exists()
    assert clique_label(raw, node)

    # stateless across calls: one instance prepares, the other unprepares
    cd = make_cd(raw, namespace)
    set_clique_ready(raw, driver_ns, cd, node)
    first = allocated_claim(raw, namespace, node.name, channel_params(cd))
    assert Kubelet(old).prepare(first)[uid_of(first)].error == ""
    assert uid_of(first) in new.checkpoint()
    assert Kubelet(new).unprepare(first) == {uid_of(first): ""}
    assert old.checkpoint() == {} and old.claim_specs() == []

    # a Prepare in flight on the old instance when it is told to stop: it is answered, not cut off
    set_clique_ready(raw, driver_ns, cd, node, status="NotReady")
    second = allocated_claim(raw, namespace, node.name, channel_params(cd), device="channel-0")
    answer: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: answer.update(resp=Kubelet(old).prepare(second)))
    waiter.start()
    wait_for("the old instance to wait in Prepare (the node carries the domain's label)",
             lambda: node_label(raw, node) == uid_of(cd), 10)
    assert old.proc is not None
    old.proc.terminate()
    wait_for("the old instance to say it waits for its call", lambda: "in flight" in old.log_tail(20), 10)
    assert old.proc.poll() is None and old.reg_socket.exists(), "the registration must stay while a call is in flight"
    assert waiter.is_alive()
    set_clique_ready(raw, driver_ns, cd, node)
    waiter.join(PREPARE_TIMEOUT + 5)
    assert answer["resp"][uid_of(second)].error == ""
    assert old.proc.wait(15) == 0, old.log_tail()
    assert not old.reg_socket.exists() and not old.dra_socket.exists()
    assert "calls in flight finished" in old.log_path.read_text()
    # the new instance serves on, with the clique label the old one left in place
    assert clique_label(raw, node), "the stopping instance removed the label the other one owns"
    assert Kubelet(new).unprepare(second) == {uid_of(second): ""}
    assert new.checkpoint() == {}


def test_a_new_instance_removes_the_sockets_of_a_killed_one_and_keeps_a_live_ones(
        plugin_factory: Callable[..., PluginProcess], node: SimNode) -> None:
    live = plugin_factory(node, pod_uid="live-pod")
    killed_reg = dead_socket(live.registry_dir / f"{constants.DRIVER_NAME}-killed-pod-reg.sock")
    killed_dra = dead_socket(live.plugin_dir / "dra-killed-pod.sock")
    fixed_reg = dead_socket(live.registry_dir / f"{constants.DRIVER_NAME}-reg.sock")  # an older plugin's
    other_driver = dead_socket(live.registry_dir / "other.example.com-killed-pod-reg.sock")
    plugin_factory(node, beside=live, pod_uid="next-pod")
    assert not killed_reg.exists() and not killed_dra.exists() and not fixed_reg.exists()
    assert other_driver.exists(), "another driver's socket is not ours to remove"
    assert live.reg_socket.exists() and live.dra_socket.exists()
    assert Kubelet(live).get_info().name == constants.DRIVER_NAME
