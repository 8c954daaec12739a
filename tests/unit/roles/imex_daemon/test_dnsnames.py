"""DNS-name mode: static peer list, name mapping, hosts block rewrite."""

from __future__ import annotations

from pathlib import Path

from cdriver.imex.hosts import HOSTS_BLOCK_HEADER, parse_hosts
from cdriver.imex.names import UNUSED_SLOT_IP, dns_name, dns_names
from cdriver.roles.imex_daemon import dnsnames

CQ = "uuid.0"
UID = "6a1b2c3d-0000-4000-8000-00000000abcd"
OTHER_UID = "6a1b2c3d-0000-4000-8000-00000000abce"


def e(node: str, ip: str, index, clique: str = CQ) -> dict:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": clique, "index": index}


def n(index: int) -> str:
    return dns_name(UID, index)


def test_static_nodes_config_lists_every_name_of_the_domain_up_to_max() -> None:
    text = dnsnames.static_nodes_config(UID, 3)
    assert text == f"{n(0)}\n{n(1)}\n{n(2)}\n"
    assert dnsnames.static_nodes_config(UID, 18).splitlines()[-1] == n(17)
    assert not set(text.split()) & set(dnsnames.static_nodes_config(OTHER_UID, 3).split())


def test_mapping_covers_same_clique_members_including_self() -> None:
    entries = [e("a", "127.0.1.1", 0), e("b", "127.0.1.2", 1), e("x", "127.0.1.9", 0, clique="uuid.1")]
    mapping, problems = dnsnames.dns_mapping(entries, CQ, UID, 18)
    assert mapping == {n(0): "127.0.1.1", n(1): "127.0.1.2"}
    assert problems == []


def test_unusable_entries_are_reported_not_mapped() -> None:
    entries = [e("a", "127.0.1.1", 0), e("b", "127.0.1.2", 18), e("c", "", 2), e("d", "127.0.1.4", None),
               e("dup", "127.0.1.5", 0)]
    mapping, problems = dnsnames.dns_mapping(entries, CQ, UID, 18)
    assert mapping == {n(0): "127.0.1.1"}
    assert len(problems) == 4
    assert any("node b has index 18, outside 0..17" in p for p in problems)
    assert any("node c has no ipAddress" in p for p in problems)
    assert any("index 0 is claimed by two entries" in p for p in problems)


def test_hosts_block_names_every_slot_unused_ones_at_the_sentinel() -> None:
    block = dnsnames.hosts_block(UID, 4, {n(1): "127.0.1.2"})
    assert block == {n(0): UNUSED_SLOT_IP, n(1): "127.0.1.2", n(2): UNUSED_SLOT_IP, n(3): UNUSED_SLOT_IP}
    assert UNUSED_SLOT_IP == "127.0.0.2"
    # every name of the nodes config resolves in the pod: none is left for the cluster DNS
    assert set(dnsnames.hosts_block(UID, 18, {})) == set(dns_names(UID, 18))


def test_hosts_rewrite_is_idempotent_and_keeps_other_lines(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n10.1.1.1\tpod-a\n")
    m1 = dnsnames.hosts_block(UID, 3, {n(0): "127.0.1.1", n(1): "127.0.1.2"})
    assert dnsnames.update_hosts_file(hosts, m1)
    first = hosts.read_text()
    assert not dnsnames.update_hosts_file(hosts, m1)
    assert hosts.read_text() == first
    m2 = dnsnames.hosts_block(UID, 3, {n(0): "127.0.1.1"})
    assert dnsnames.update_hosts_file(hosts, m2)
    assert parse_hosts(hosts.read_text())[n(1)] == UNUSED_SLOT_IP
    assert dnsnames.update_hosts_file(hosts, m1)
    text = hosts.read_text()
    assert text == first
    assert text.count(HOSTS_BLOCK_HEADER) == 1
    assert text.startswith("127.0.0.1\tlocalhost\n10.1.1.1\tpod-a\n")
    assert f"127.0.1.2\t{n(1)}" in text.splitlines()
    assert f"127.0.0.2\t{n(2)}" in text.splitlines()


def test_describe_mapping_is_sorted_by_name() -> None:
    m = {n(1): "b", n(0): "a"}
    assert dnsnames.describe_mapping(m) == f"{n(0)} -> a, {n(1)} -> b"
    assert dnsnames.describe_mapping({}) == "empty"
