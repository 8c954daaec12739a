"""Clique membership logic: index assignment, upsert/remove/status, optimistic retry loop."""

from __future__ import annotations

import pytest

from cdriver.api import constants
from cdriver.roles.imex_daemon import clique as cl

CQ = "00000000-0000-0000-0000-0000000000ab.0"


def entry(node: str, ip: str, index: int, status: str = constants.STATUS_NOT_READY, clique: str = CQ) -> dict:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": clique, "index": index, "status": status}


def test_next_free_index_fills_holes_and_respects_max() -> None:
    assert cl.next_free_index(set(), 4) == 0
    assert cl.next_free_index({0, 1, 3}, 4) == 2
    assert cl.next_free_index({1, 2}, 4) == 0
    with pytest.raises(cl.IndexExhausted, match="all 2 indices"):
        cl.next_free_index({0, 1}, 2)


def test_new_member_gets_lowest_free_index_and_starts_not_ready() -> None:
    entries = [entry("a", "10.0.0.1", 0), entry("c", "10.0.0.3", 2)]
    out, changed = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 18)
    assert changed
    assert out[-1] == entry("b", "10.0.0.2", 1)
    assert entries == [entry("a", "10.0.0.1", 0), entry("c", "10.0.0.3", 2)]  # input untouched


def test_indices_of_other_cliques_do_not_count() -> None:
    entries = [entry("x", "10.0.1.1", 0, clique="other.1")]
    out, _ = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 18, key="nodeName")
    assert out[-1]["index"] == 0


def test_existing_member_keeps_index_and_status_and_only_ip_changes() -> None:
    entries = [entry("a", "10.0.0.1", 3, constants.STATUS_READY)]
    out, changed = cl.upsert_entry(entries, cl.Member("a", "10.0.0.9", CQ), 18)
    assert changed
    assert out == [entry("a", "10.0.0.9", 3, constants.STATUS_READY)]
    same, changed = cl.upsert_entry(out, cl.Member("a", "10.0.0.9", CQ), 18)
    assert not changed and same == out


def test_existing_member_with_unusable_index_gets_a_free_one() -> None:
    entries = [entry("a", "10.0.0.1", 0), {"nodeName": "b", "ipAddress": "10.0.0.2", "cliqueID": CQ}]
    out, changed = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 18)
    assert changed and cl.find_entry(out, "b")["index"] == 1
    entries = [entry("a", "10.0.0.1", 0), entry("b", "10.0.0.2", 0)]
    out, changed = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 18)
    assert changed and cl.find_entry(out, "b")["index"] == 1
    entries = [entry("b", "10.0.0.2", 7)]
    out, changed = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 4)
    assert changed and cl.find_entry(out, "b")["index"] == 0


def test_full_clique_raises_index_exhausted() -> None:
    entries = [entry("a", "10.0.0.1", 0), entry("b", "10.0.0.2", 1)]
    with pytest.raises(cl.IndexExhausted, match="MAX_NODES_PER_IMEX_DOMAIN"):
        cl.upsert_entry(entries, cl.Member("c", "10.0.0.3", CQ), 2)


def test_remove_matches_node_name_not_ip() -> None:
    entries = [entry("a", "10.0.0.1", 0), entry("b", "10.0.0.1", 1)]
    out, changed = cl.remove_entry(entries, "a")
    assert changed and out == [entry("b", "10.0.0.1", 1)]
    out2, changed = cl.remove_entry(out, "a")
    assert not changed and out2 == out


def test_set_status_only_changes_own_entry() -> None:
    entries = [entry("a", "10.0.0.1", 0), entry("b", "10.0.0.2", 1)]
    out, changed = cl.set_entry_status(entries, "b", constants.STATUS_READY)
    assert changed and out[1]["status"] == constants.STATUS_READY and out[0]["status"] == constants.STATUS_NOT_READY
    _, changed = cl.set_entry_status(out, "b", constants.STATUS_READY)
    assert not changed
    _, changed = cl.set_entry_status(out, "zz", constants.STATUS_READY)
    assert not changed


def test_absent_status_reads_as_not_ready() -> None:
    assert cl.entry_status({"nodeName": "a"}) == constants.STATUS_NOT_READY
    assert cl.entry_status(None) is None
    _, changed = cl.set_entry_status([{"nodeName": "a"}], "a", constants.STATUS_NOT_READY)
    assert not changed


def test_new_clique_has_labels_and_pod_owner() -> None:
    owner = cl.pod_owner_reference("pod-1", "uid-1")
    obj = cl.new_clique("u.cq", "drv", "u", "cq", owner)
    assert obj["kind"] == "ComputeDomainClique"
    assert obj["metadata"]["labels"] == {constants.LABEL_COMPUTE_DOMAIN: "u", constants.LABEL_CLIQUE_ID: "cq"}
    assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "pod-1",
                                                   "uid": "uid-1"}]
    assert not cl.ensure_owner_reference(obj, owner)
    assert cl.ensure_owner_reference(obj, cl.pod_owner_reference("pod-2", "uid-2"))
    assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == ["uid-1", "uid-2"]


def test_backoff_doubles_caps_and_jitters_within_25_percent() -> None:
    assert cl.backoff_delay(1, rng=lambda: 0.5) == pytest.approx(0.005)
    assert cl.backoff_delay(3, rng=lambda: 0.5) == pytest.approx(0.02)
    assert cl.backoff_delay(30, rng=lambda: 0.5) == pytest.approx(6.0)
    assert cl.backoff_delay(30, rng=lambda: 0.0) == pytest.approx(4.5)
    assert cl.backoff_delay(30, rng=lambda: 0.999999) == pytest.approx(7.5, rel=1e-5)


class ConflictingStore:
    """A membership object whose first `conflicts` writes answer 409, and then a 500 when `fail`."""

    key, description = cl.KEY_CLIQUE, "clique test"

    def __init__(self, conflicts: int, fail: bool = False) -> None:
        self.obj: dict = {"metadata": {"resourceVersion": "1"}}
        self.conflicts, self.fail = conflicts, fail

    def current(self) -> dict:
        return dict(self.obj)

    refresh = ensure = current

    def needs_write(self, obj: dict) -> bool:
        return False

    def entries(self, obj: dict | None) -> list[dict]:
        return list((obj or {}).get("daemons") or [])

    def with_entries(self, obj: dict, entries: list[dict]) -> dict:
        return {**obj, "daemons": entries}

    def write(self, obj: dict) -> dict:
        from cdriver.kube.errors import ApiError

        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        if self.fail:
            raise ApiError(500, "InternalError", "etcd")
        self.obj = obj
        return obj


def test_every_write_of_the_entry_is_reported_with_its_result() -> None:
    results: list[str] = []
    member = cl.Member("node-a", "10.0.0.1", CQ)
    join = lambda entries: cl.upsert_entry(entries, member, 4)  # noqa: E731
    cl.update_with_retry(ConflictingStore(conflicts=2), join, sleep=lambda _s: None, on_write=results.append)
    assert results == [cl.WRITE_CONFLICT, cl.WRITE_CONFLICT, cl.WRITE_OK]
    results.clear()
    with pytest.raises(Exception, match="etcd"):
        cl.update_with_retry(ConflictingStore(conflicts=0, fail=True), join, sleep=lambda _s: None,
                             on_write=results.append)
    assert results == [cl.WRITE_ERROR]


def test_an_entry_is_outdated_when_missing_or_naming_another_ip_or_clique() -> None:
    me = cl.Member("n1", "10.0.0.1", CQ)
    assert cl.entry_outdated([], me)
    assert not cl.entry_outdated([entry("n1", "10.0.0.1", 0)], me)
    assert cl.entry_outdated([entry("n1", "10.0.0.9", 0)], me)
    assert cl.entry_outdated([entry("n1", "10.0.0.1", 0, clique="other.1")], me)
    assert not cl.entry_outdated([{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": CQ}], me)


def test_each_node_applies_with_its_own_field_manager_within_the_length_limit() -> None:
    assert cl.field_manager("node-1") == "cdriver-imex-daemon-node-1"
    assert cl.field_manager("node-1") != cl.field_manager("node-2")
    long_a, long_b = "a" * 200 + ".x", "a" * 200 + ".y"
    assert len(cl.field_manager(long_a)) == 128 and cl.field_manager(long_a) != cl.field_manager(long_b)


def test_the_applied_body_holds_only_this_daemons_entry_labels_and_owner() -> None:
    owner = cl.pod_owner_reference("pod-a", "uid-a")
    body = cl.own_entry_applied("cd.c", "drv", "cd", owner, cl.Member("n1", "10.0.0.1", CQ), constants.STATUS_READY)
    assert body["daemons"] == [{"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": CQ, "status": "Ready"}]
    assert body["metadata"]["ownerReferences"] == [owner]
    assert body["metadata"]["labels"] == {constants.LABEL_COMPUTE_DOMAIN: "cd", constants.LABEL_CLIQUE_ID: CQ}
