"""Pure parts of the IMEX stand-ins: timings, name resolution, messages, domain report."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cdriver.imex.config import ImexConfig
from cdriver.sim.imex import protocol
from cdriver.sim.imex.cli import command
from cdriver.sim.imex.protocol import (
    ENV_SIM_HOSTS_FILE,
    ENV_SIM_IMEX_HEARTBEAT,
    ENV_SIM_IMEX_PEER_TIMEOUT,
    ENV_SIM_IMEX_RETRY_MAX,
    IMEX_NO_GPU_VERSION,
)

HOSTS = "127.0.0.1 localhost\n10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tCompute-Domain-Daemon-0001\n"


def test_timing_defaults_and_env_overrides():
    assert protocol.Timing.from_env({}) == protocol.Timing()
    t = protocol.Timing.from_env({ENV_SIM_IMEX_HEARTBEAT: "0.1", ENV_SIM_IMEX_PEER_TIMEOUT: "0.5"})
    assert (t.heartbeat, t.peer_timeout) == (0.1, 0.5)


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({ENV_SIM_IMEX_RETRY_MAX: "soon"}, ENV_SIM_IMEX_RETRY_MAX),
        ({ENV_SIM_IMEX_HEARTBEAT: "-1"}, ENV_SIM_IMEX_HEARTBEAT),
        ({ENV_SIM_IMEX_HEARTBEAT: "2", ENV_SIM_IMEX_PEER_TIMEOUT: "1"}, "must be larger"),
    ],
)
def test_timing_rejects_bad_env(env, fragment):
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.Timing.from_env(env)
    assert fragment in str(err.value)


def test_retry_delay_doubles_and_caps():
    t = protocol.Timing(retry_initial=0.5, retry_max=3.0)
    assert [protocol.retry_delay(n, t) for n in range(6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_hosts_file_path_override():
    assert protocol.hosts_file_path({}) == "/etc/hosts"
    assert protocol.hosts_file_path({ENV_SIM_HOSTS_FILE: "/tmp/h"}) == "/tmp/h"


def test_members_resolve_ips_and_names_through_hosts_text():
    entries = ["compute-domain-daemon-0000", "compute-domain-daemon-0001", "compute-domain-daemon-0002", "10.0.0.9"]
    members = protocol.resolve_members(entries, HOSTS)
    assert [(m.index, m.ip) for m in members] == [(0, "10.0.0.1"), (1, "10.0.0.2"), (2, None), (3, "10.0.0.9")]


def test_self_address_precedence():
    members = protocol.resolve_members(["10.0.0.1", "10.0.0.2"], "")
    cfg = ImexConfig.from_values({})
    assert protocol.choose_self_address(cfg, members, ["127.0.0.1", "10.0.0.2"]) == "10.0.0.2"
    assert protocol.choose_self_address(cfg, members, ["127.0.0.1"]) is None
    cfg = ImexConfig.from_values({"IMEX_CMD_BIND_INTERFACE_IP": "10.0.0.1"})
    assert protocol.choose_self_address(cfg, members, ["10.0.0.2"]) == "10.0.0.1"
    cfg = ImexConfig.from_values({"IMEX_CMD_BIND_INTERFACE_IP": "10.0.0.1", "BIND_INTERFACE_IP": "10.0.0.2"})
    assert protocol.choose_self_address(cfg, members, []) == "10.0.0.2"


def test_messages_round_trip_and_reject_garbage():
    msg = protocol.hello("10.0.0.1", protocol.STATE_READY, 1, "abc")
    assert protocol.parse_hello(protocol.decode(protocol.encode(msg))) == protocol.Hello(
        "10.0.0.1", 1, "abc", IMEX_NO_GPU_VERSION, "READY")
    for bad in (b"not json\n", b"[1,2]\n", b"\xff\n", b"{" + b" " * protocol.MAX_LINE + b"}"):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode(bad)
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_hello({"type": "hello", "node": "../x"})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_hello({"type": "hello", "node": "10.0.0.1", "index": -1})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_hello(protocol.heartbeat(1, "READY", []))
    with pytest.raises(protocol.ProtocolError, match="refused the connection: not ours"):
        protocol.parse_hello(protocol.refused("not ours"))


def test_a_peer_is_accepted_only_with_this_nodes_node_map():
    entries = ["compute-domain-daemon-0000", "compute-domain-daemon-0001"]
    ours = protocol.node_map_digest(entries)
    assert protocol.node_map_digest([e.upper() for e in entries]) == ours  # names are case-blind
    assert protocol.node_map_digest(entries[::-1]) != ours  # the order is the node IDs

    def peer(index, node_map=ours):
        return protocol.Hello("10.0.0.2", index, node_map, IMEX_NO_GPU_VERSION, "READY")

    assert protocol.refusal(peer(1), ours, 0, 2) is None
    other = protocol.node_map_digest(["compute-domain-daemon-abc-0000", "compute-domain-daemon-abc-0001"])
    assert "another IMEX domain" in protocol.refusal(peer(1, other), ours, 0, 2)
    assert "not a node" in protocol.refusal(peer(None), ours, 0, 2)
    assert "not a node" in protocol.refusal(peer(2), ours, 0, 2)
    assert "this node's ID 0" in protocol.refusal(peer(0), ours, 0, 2)


def test_self_index_is_the_first_entry_at_this_address():
    members = protocol.resolve_members(["10.0.0.1", "10.0.0.2", "10.0.0.2"], "")
    assert protocol.self_index(members, "10.0.0.2") == 1
    assert protocol.self_index(members, "10.0.0.9") is None
    assert protocol.self_index(members, None) is None


def test_a_name_at_the_unused_slot_address_is_no_member():
    hosts = HOSTS + "127.0.0.2\tcompute-domain-daemon-0002\n"
    members = protocol.resolve_members(["compute-domain-daemon-0000", "compute-domain-daemon-0002"], hosts)
    assert [(m.index, m.ip) for m in members] == [(0, "10.0.0.1"), (1, None)]


@pytest.mark.parametrize(
    "is_member, statuses, want",
    [
        (True, ["READY", "READY"], "UP"),
        (True, ["READY"], "UP"),
        (True, ["READY", "UNAVAILABLE"], "DEGRADED"),
        (False, ["READY", "READY"], "DOWN"),
        (True, [], "DOWN"),
    ],
)
def test_domain_status(is_member, statuses, want):
    assert protocol.domain_status(is_member, statuses) == want


def test_domain_report_shape():
    members = protocol.resolve_members(["10.0.0.1", "10.0.0.2", "10.0.0.3"], "")
    peers = {
        1: protocol.PeerView(connected=True, version="NO_GPU", sees=frozenset({0})),
    }
    report, seen = protocol.build_domain_report(members, "10.0.0.1", protocol.STATE_READY, peers, 0.0, hostnames=True)
    json.dumps(report)  # serialisable
    assert report["status"] == "DEGRADED"
    assert list(report["nodes"]) == ["0", "1", "2"]
    n0, n1, n2 = (report["nodes"][k] for k in ("0", "1", "2"))
    assert (n0["status"], n0["version"], n0["host"], n0["hostName"]) == ("READY", "NO_GPU", "10.0.0.1", "10.0.0.1")
    assert {k: v["status"] for k, v in n0["connections"].items()} == {"1": "CONNECTED", "2": "INVALID"}
    assert (n1["status"], n1["version"]) == ("READY", "NO_GPU")
    assert {k: v["status"] for k, v in n1["connections"].items()} == {"0": "CONNECTED", "2": "INVALID"}
    assert (n2["status"], n2["version"], n2["connections"]) == ("UNAVAILABLE", "", {})
    assert all(n["changed"] for n in report["nodes"].values())
    again, _ = protocol.build_domain_report(members, "10.0.0.1", protocol.STATE_READY, peers, 0.0, previous=seen)
    assert not any(n["changed"] for n in again["nodes"].values())
    assert "hostName" not in again["nodes"]["0"]


def test_domain_report_leaves_out_unresolved_names():
    members = protocol.resolve_members(["compute-domain-daemon-0000", "compute-domain-daemon-0002"], HOSTS)
    report, _ = protocol.build_domain_report(members, "10.0.0.1", protocol.STATE_READY, {}, 0.0)
    assert list(report["nodes"]) == ["0"]
    assert report["status"] == "UP"


def test_domain_report_down_when_not_a_member_or_shutting_down():
    members = protocol.resolve_members(["10.0.0.1", "10.0.0.2"], "")
    report, _ = protocol.build_domain_report(members, "10.0.0.7", protocol.STATE_READY, {}, 0.0)
    assert report["status"] == "DOWN"
    report, _ = protocol.build_domain_report(members, "10.0.0.1", protocol.STATE_SHUTTING_DOWN, {}, 0.0)
    assert report["status"] == "DEGRADED"
    assert report["nodes"]["0"]["status"] == "UNAVAILABLE"


def test_timestamp_format():
    import re

    assert re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4} \d\d:\d\d:\d\d\.\d{3}", protocol.format_timestamp(1_700_000_000.25))


def test_cli_passes_arguments_through_untouched():
    runner = CliRunner()
    result = runner.invoke(command, ["ctl", "-q", "--u=/nonexistent/imex.sock"])
    assert result.exit_code == 1
    assert "cannot reach the IMEX daemon command service at /nonexistent/imex.sock" in result.output
    result = runner.invoke(command, ["ctl", "-q", "-u", "/nonexistent/imex.sock"])
    assert result.exit_code == 1
    result = runner.invoke(command, ["daemon", "--bogus"])
    assert result.exit_code == 2
