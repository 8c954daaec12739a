"""Domain status membership: ComputeDomain.status.nodes entries and IP-mode peer lists."""

from __future__ import annotations

import pytest

from cdriver.api import constants
from cdriver.roles.imex_daemon import clique as cl
from cdriver.roles.imex_daemon import domain_status

CQ = "uuid.0"


def n(name: str, ip: str, index, clique: str = CQ) -> dict:
    return {"name": name, "ipAddress": ip, "cliqueID": clique, "index": index, "status": constants.STATUS_NOT_READY}


def test_status_nodes_use_the_name_key_and_count_only_own_clique() -> None:
    entries = [n("a", "10.0.0.1", 0), n("x", "10.0.9.9", 1, clique="uuid.1")]
    out, changed = cl.upsert_entry(entries, cl.Member("b", "10.0.0.2", CQ), 18, key=cl.KEY_CD_STATUS)
    assert changed
    assert out[-1] == n("b", "10.0.0.2", 1)
    out, changed = cl.remove_entry(out, "a", key=cl.KEY_CD_STATUS)
    assert changed and [e["name"] for e in out] == ["x", "b"]


def test_peer_ips_are_same_clique_in_index_order() -> None:
    entries = [n("c", "10.0.0.3", 2), n("a", "10.0.0.1", 0), n("x", "10.0.9.9", 1, clique="uuid.1"),
               n("b", "10.0.0.2", 1)]
    assert domain_status.peer_ips(entries, CQ) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert domain_status.ip_nodes_config(domain_status.peer_ips(entries, CQ)) == "10.0.0.1\n10.0.0.2\n10.0.0.3\n"


def test_ip_mode_waits_for_num_nodes_of_all_cliques() -> None:
    cd = {"spec": {"numNodes": 3}}
    entries = [n("a", "10.0.0.1", 0), n("x", "10.0.9.9", 0, clique="uuid.1")]
    assert domain_status.peers_complete(cd, entries) == (False, 2, 3)
    assert domain_status.peers_complete(cd, [*entries, n("b", "10.0.0.2", 1)]) == (True, 3, 3)
    assert domain_status.peers_complete({"spec": {}}, []) == (True, 0, 0)


class FakeRaw:
    def __init__(self, obj):
        self.obj = obj

    def get_or_none(self, res, name, namespace=None):
        return self.obj


def test_domain_store_ignores_a_same_named_domain_with_another_uid() -> None:
    store = domain_status.DomainStatusStore(FakeRaw({"metadata": {"name": "cd", "uid": "other"}}), "ns", "cd", "mine")
    assert store.refresh() is None
    with pytest.raises(domain_status.DomainMissing, match="uid mine does not exist"):
        store.ensure()


def test_domain_store_keeps_required_status_field() -> None:
    store = domain_status.DomainStatusStore(FakeRaw(None), "ns", "cd", "mine")
    out = store.with_entries({"metadata": {"name": "cd"}}, [n("a", "10.0.0.1", 0)])
    assert out["status"] == {"status": constants.STATUS_NOT_READY, "nodes": [n("a", "10.0.0.1", 0)]}
    assert "nodes" not in store.with_entries(out, [])["status"]
