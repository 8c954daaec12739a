"""Pod addresses of a simulated node: one per pod, kept across an agent restart, freed when the pod goes."""

from __future__ import annotations

from cdriver.sim.node.simulated.pod_addresses import PodAddresses


def test_each_pod_has_its_own_address_and_keeps_it() -> None:
    pods = PodAddresses()
    try:
        a, b = pods.address("a"), pods.address("b")
        assert a != b and a.rsplit(".", 1)[0] == b.rsplit(".", 1)[0]
        assert pods.address("a") == a
        pods.release("a")
        assert pods.address("c") == a  # the lowest free one
        restarted = PodAddresses()
        try:
            # a new agent object reads a pod's address back; one outside its block is not taken
            assert restarted.address("b", kept="192.0.2.7") != "192.0.2.7"
        finally:
            restarted.close()
    finally:
        pods.close()


def test_an_address_kept_from_before_a_restart_is_given_back_when_free() -> None:
    pods = PodAddresses()
    try:
        first = pods.address("first")
        kept = first.rsplit(".", 1)[0] + ".9"
        assert pods.address("back", kept=kept) == kept
        assert pods.address("clash", kept=kept) != kept
    finally:
        pods.close()
