"""The /etc/hosts daemon block: idempotent rendering and in-place rewrite."""

from __future__ import annotations

import os

import pytest

from cdriver.imex import hosts
from cdriver.imex.hosts import HOSTS_BLOCK_HEADER, HostsError
from cdriver.imex.names import UNUSED_SLOT_IP, dns_names, with_unused_slots

KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "\n"
    "10.244.1.7\tworkload-pod-abc\n"
)
MAP_A = {"compute-domain-daemon-0000": "10.244.1.7", "compute-domain-daemon-0001": "10.244.2.9"}
MAP_B = {"compute-domain-daemon-0001": "10.244.2.10", "compute-domain-daemon-0003": "10.244.3.3"}


def test_block_is_appended_after_other_lines():
    out = hosts.render_hosts(KUBELET_HOSTS, MAP_A)
    assert out == (
        KUBELET_HOSTS
        + "\n"
        + HOSTS_BLOCK_HEADER
        + "\n10.244.1.7\tcompute-domain-daemon-0000\n10.244.2.9\tcompute-domain-daemon-0001\n"
    )


def test_render_is_idempotent_without_accumulating_headers():
    once = hosts.render_hosts(KUBELET_HOSTS, MAP_A)
    text = once
    for _ in range(5):
        text = hosts.render_hosts(text, MAP_A)
    assert text == once
    assert text.count(HOSTS_BLOCK_HEADER) == 1
    assert text.count("\n\n\n") == 0


def test_new_mapping_replaces_old_block():
    out = hosts.render_hosts(hosts.render_hosts(KUBELET_HOSTS, MAP_A), MAP_B)
    assert out == hosts.render_hosts(KUBELET_HOSTS, MAP_B)
    assert "10.244.2.9" not in out
    assert "compute-domain-daemon-0000" not in out
    assert hosts.parse_hosts(out)["compute-domain-daemon-0001"] == "10.244.2.10"


def test_other_lines_are_kept_in_order():
    out = hosts.render_hosts(hosts.render_hosts(KUBELET_HOSTS, MAP_A), MAP_B)
    kept = out.split(HOSTS_BLOCK_HEADER)[0].rstrip("\n") + "\n"
    assert kept == KUBELET_HOSTS


def test_empty_mapping_removes_block():
    out = hosts.render_hosts(hosts.render_hosts(KUBELET_HOSTS, MAP_A), {})
    assert out == KUBELET_HOSTS
    assert hosts.render_hosts("", {}) == ""


def test_stray_daemon_lines_anywhere_are_replaced():
    text = "127.0.0.1 localhost\n10.0.0.5 compute-domain-daemon-0007\n192.168.0.1 gw\n"
    out = hosts.render_hosts(text, {"compute-domain-daemon-0000": "10.0.0.1"})
    assert "compute-domain-daemon-0007" not in out
    assert out.startswith("127.0.0.1 localhost\n192.168.0.1 gw\n\n")


@pytest.mark.parametrize(
    "mapping, fragment",
    [
        ({"compute-domain-daemon-0000": "10.0.0.300"}, "not an IP address"),
        ({"bad name": "10.0.0.1"}, "not a valid host name"),
        ({"-lead": "10.0.0.1"}, "not a valid host name"),
    ],
)
def test_invalid_mapping_is_rejected(mapping, fragment):
    with pytest.raises(HostsError) as err:
        hosts.render_hosts(KUBELET_HOSTS, mapping)
    assert fragment in str(err.value)


def test_parse_hosts_first_entry_wins_and_ignores_comments():
    text = "# x\n10.0.0.1 a b # c\n10.0.0.2 A\nnot-an-ip z\n"
    assert hosts.parse_hosts(text) == {"a": "10.0.0.1", "b": "10.0.0.1"}


def test_rewrite_hosts_file_in_place(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(KUBELET_HOSTS)
    inode = os.stat(path).st_ino
    assert hosts.rewrite_hosts_file(path, MAP_A) is True
    assert os.stat(path).st_ino == inode  # same file: a bind mount would survive this
    assert path.read_text() == hosts.render_hosts(KUBELET_HOSTS, MAP_A)
    assert hosts.rewrite_hosts_file(path, MAP_A) is False
    assert hosts.rewrite_hosts_file(path, {"compute-domain-daemon-0000": "10.9.9.9"}) is True
    assert os.stat(path).st_ino == inode
    assert path.read_text() == hosts.render_hosts(KUBELET_HOSTS, {"compute-domain-daemon-0000": "10.9.9.9"})


def test_rewrite_validates_before_touching_the_file(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(KUBELET_HOSTS)
    with pytest.raises(HostsError):
        hosts.rewrite_hosts_file(path, {"compute-domain-daemon-0000": "nope"})
    assert path.read_text() == KUBELET_HOSTS


def test_rewrite_creates_missing_file(tmp_path):
    path = tmp_path / "hosts"
    assert hosts.rewrite_hosts_file(path, MAP_A) is True
    assert path.read_text().startswith(HOSTS_BLOCK_HEADER + "\n")
    assert os.stat(path).st_mode & 0o777 == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_read_hosts_file_missing_is_empty(tmp_path):
    assert hosts.read_hosts_file(tmp_path / "none") == ""


def test_per_domain_block_replaces_the_fixed_names_and_lists_unused_slots_at_the_sentinel():
    # a hosts file written with the fixed names (upstream 95932046) gets the domain's names,
    # each slot resolving: a member to its pod IP, the others to 127.0.0.2
    old = hosts.render_hosts(KUBELET_HOSTS, MAP_A)
    names = dns_names("6a1b2c3d-0000-4000-8000-00000000abcd", 4)
    out = hosts.render_hosts(old, with_unused_slots(names, {names[0]: "10.244.1.7"}))
    assert out == (KUBELET_HOSTS + "\n" + HOSTS_BLOCK_HEADER + "\n"
                   + "".join(f"{'10.244.1.7' if name == names[0] else UNUSED_SLOT_IP}\t{name}\n"
                             for name in sorted(names)))
    assert "compute-domain-daemon-0000" not in out and "compute-domain-daemon-0001" not in out
    assert {hosts.parse_hosts(out)[name] for name in names[1:]} == {"127.0.0.2"}
