"""DNS-name mode: static peer list, name mapping, hosts block rewrite."""

from __future__ import annotations

from pathlib import Path

from cdriver.imex.hosts import HOSTS_BLOCK_HEADER
from cdriver.roles.imex_daemon import dnsnames

CQ = "uuid.0"


def e(node: str, ip: str, index, clique: str = CQ) -> dict:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": clique, "index": index}


def test_static_nodes_config_lists_every_name_up_to_max() -> None:
    text = dnsnames.static_nodes_config(3)
    assert text == "compute-domain-daemon-0000\ncompute-domain-daemon-0001\ncompute-domain-daemon-0002\n"
    assert dnsnames.static_nodes_config(18).splitlines()[-1] == "compute-domain-daemon-0017"


def test_mapping_covers_same_clique_members_including_self() -> None:
    entries = [e("a", "127.0.1.1", 0), e("b", "127.0.1.2", 1), e("x", "127.0.1.9", 0, clique="uuid.1")]
    mapping, problems = dnsnames.dns_mapping(entries, CQ, 18)
    assert mapping == {"compute-domain-daemon-0000": "127.0.1.1", "compute-domain-daemon-0001": "127.0.1.2"}
    assert problems == []


def test_unusable_entries_are_reported_not_mapped() -> None:
    entries = [e("a", "127.0.1.1", 0), e("b", "127.0.1.2", 18), e("c", "", 2), e("d", "127.0.1.4", None),
               e("dup", "127.0.1.5", 0)]
    mapping, problems = dnsnames.dns_mapping(entries, CQ, 18)
    assert mapping == {"compute-domain-daemon-0000": "127.0.1.1"}
    assert len(problems) == 4
    assert any("node b has index 18, outside 0..17" in p for p in problems)
    assert any("node c has no ipAddress" in p for p in problems)
    assert any("index 0 is claimed by two entries" in p for p in problems)


def test_hosts_rewrite_is_idempotent_and_keeps_other_lines(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n10.1.1.1\tpod-a\n")
    m1 = {"compute-domain-daemon-0000": "127.0.1.1", "compute-domain-daemon-0001": "127.0.1.2"}
    assert dnsnames.update_hosts_file(hosts, m1)
    first = hosts.read_text()
    assert not dnsnames.update_hosts_file(hosts, m1)
    assert hosts.read_text() == first
    m2 = {"compute-domain-daemon-0000": "127.0.1.1"}
    assert dnsnames.update_hosts_file(hosts, m2)
    assert dnsnames.update_hosts_file(hosts, m1)
    text = hosts.read_text()
    assert text == first
    assert text.count(HOSTS_BLOCK_HEADER) == 1
    assert text.startswith("127.0.0.1\tlocalhost\n10.1.1.1\tpod-a\n")
    assert "127.0.1.2\tcompute-domain-daemon-0001" in text.splitlines()


def test_describe_mapping_is_sorted_by_name() -> None:
    m = {"compute-domain-daemon-0001": "b", "compute-domain-daemon-0000": "a"}
    assert dnsnames.describe_mapping(m) == "compute-domain-daemon-0000 -> a, compute-domain-daemon-0001 -> b"
    assert dnsnames.describe_mapping({}) == "empty"
