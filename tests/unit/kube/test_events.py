"""Event recorder pure parts: object references and message truncation."""

from __future__ import annotations

from cdriver.kube.events import MAX_MESSAGE_LEN, involved_object, truncate


def test_involved_object_from_a_dict() -> None:
    obj = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
           "metadata": {"name": "cd", "namespace": "team", "uid": "u-1",
                        "resourceVersion": "42", "labels": {"x": "y"}}}
    assert involved_object(obj) == {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "name": "cd",
        "namespace": "team", "uid": "u-1", "resourceVersion": "42"}
    assert involved_object({"kind": "Node", "metadata": {"name": "n1"}}) == {
        "kind": "Node", "name": "n1"}


def test_truncate_keeps_short_messages_and_cuts_long_ones() -> None:
    assert truncate("ok") == "ok"
    long = "x" * (MAX_MESSAGE_LEN + 500)
    cut = truncate(long)
    assert len(cut) == MAX_MESSAGE_LEN and cut.endswith("...")
    assert truncate("y" * MAX_MESSAGE_LEN) == "y" * MAX_MESSAGE_LEN
