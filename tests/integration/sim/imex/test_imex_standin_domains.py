"""Two IMEX domains and a reused pod IP (upstream #1447), with the stand-ins as processes.

An old domain's daemon at the IP of a peer that went away keeps dialling that peer's name;
the address now belongs to a new domain's daemon. With the fixed names every domain's nodes
config lists (`compute-domain-daemon-NNNN`, upstream 95932046), the two node maps are the same,
the new daemon takes the old one for its own node 1, and the old domain's shutdown closes the
new domain's connections. With each domain's own names (`cdriver.imex.names`, the hosts block
the daemon writes, unused slots at 127.0.0.2) the handshake is refused and nothing reaches it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdriver.imex.hosts import rewrite_hosts_file
from cdriver.imex.names import dns_names
from cdriver.roles.imex_daemon.dnsnames import hosts_block
from cdriver.sim.imex.protocol import ENV_SIM_HOSTS_FILE
from cdriver.sim.node.addresses import lease_block
from tests.support.imex_standin import StandInWorld
from tests.support.waiting import wait_for

BLOCK = lease_block()
#: the old domain's node 0 (its pod goes; the address is then the new domain's node 0), the old
#: domain's node 1, and the new domain's node 1
REUSED_IP, OLD_1_IP, NEW_1_IP = BLOCK.ip(1), BLOCK.ip(2), BLOCK.ip(3)
OLD_UID = "1c6f0e0a-1111-4a0b-8c0d-00000000a001"
NEW_UID = "1c6f0e0a-2222-4a0b-8c0d-00000000b002"
SLOTS = 4
FIXED_NAMES = [f"compute-domain-daemon-{i:04d}" for i in range(SLOTS)]  # every domain's, before


@pytest.fixture
def world(tmp_path: Path) -> Iterator[StandInWorld]:
    w = StandInWorld(tmp_path, [REUSED_IP, OLD_1_IP, NEW_1_IP])
    yield w
    w.cleanup()


def domain_names(uid: str, per_domain: bool) -> list[str]:
    return dns_names(uid, SLOTS) if per_domain else FIXED_NAMES


def start_daemon(world: StandInWorld, name: str, ip: str, uid: str, members: list[str], per_domain: bool):
    """One daemon pod: its nodes config and its own hosts file, as the daemon writes them."""
    names = domain_names(uid, per_domain)
    live = {names[i]: member_ip for i, member_ip in enumerate(members)}
    hosts = world.dir / f"hosts-{name}"
    hosts.write_text(f"127.0.0.1\tlocalhost\n{ip}\t{name}\n")
    rewrite_hosts_file(hosts, hosts_block(uid, SLOTS, live) if per_domain else live)
    cfg = world.config(name, ip, names)
    proc = world.start(cfg, {**world.env, ENV_SIM_HOSTS_FILE: str(hosts)})
    world.wait_ready(cfg)
    return cfg, proc


@pytest.mark.parametrize("per_domain", [False, True], ids=["fixed-names", "per-domain-names"])
def test_an_old_domains_shutdown_reaches_a_new_domain_only_with_shared_names(world: StandInWorld,
                                                                           per_domain: bool) -> None:
    old_0, old_0_proc = start_daemon(world, "old-0", REUSED_IP, OLD_UID, [REUSED_IP, OLD_1_IP], per_domain)
    old_1, old_1_proc = start_daemon(world, "old-1", OLD_1_IP, OLD_UID, [REUSED_IP, OLD_1_IP], per_domain)
    wait_for("the old domain UP", lambda: world.status(old_1) == "UP", 15)

    # the old domain's node 0 goes away without a word; node 1 keeps its name at that address
    old_0_proc.send_signal(signal.SIGKILL)
    old_0_proc.wait(10)
    wait_for("old node 1 to miss node 0", lambda: world.status(old_1) == "DEGRADED", 10)

    # a new domain: its node 0 gets the old node 0's pod IP
    new_0, _ = start_daemon(world, "new-0", REUSED_IP, NEW_UID, [REUSED_IP, NEW_1_IP], per_domain)
    new_1, _ = start_daemon(world, "new-1", NEW_1_IP, NEW_UID, [REUSED_IP, NEW_1_IP], per_domain)
    wait_for("the new domain UP", lambda: world.status(new_0) == "UP" and world.status(new_1) == "UP", 15)

    if per_domain:
        # old node 1 dials the reused address: refused, its node map is not the new domain's
        wait_for("the new node 0 to refuse the old node 1",
                 lambda: f"refused the connection of {OLD_1_IP}: its node map" in world.log(new_0), 15)
        assert "another IMEX domain" in world.log(new_0)
        assert world.domain(old_1)["nodes"]["0"]["status"] == "UNAVAILABLE"
    else:
        # old node 1 dials the reused address and is taken for the new domain's node 1
        wait_for("old node 1 to be connected to the new node 0",
                 lambda: world.domain(old_1)["nodes"]["0"]["status"] == "READY", 15)

    # the old domain is deleted: its last daemon stops and notifies every peer it has
    old_1_proc.send_signal(signal.SIGTERM)
    assert old_1_proc.wait(10) == 0

    notified = f"received notification of shutdown from node 1 - {domain_names(NEW_UID, per_domain)[1]}"
    if per_domain:
        # nothing reached the new domain: no notification, no connection lost, still UP
        assert notified not in world.log(new_0)
        assert "lost" not in world.log(new_0) and "lost" not in world.log(new_1)
        assert world.status(new_0) == "UP"
        assert world.domain(new_0)["nodes"]["0"]["connections"]["1"]["status"] == "CONNECTED"
    else:
        # #1447: the new node 0 drops its connections with its real node 1
        wait_for("the new node 0 to act on the old domain's shutdown", lambda: notified in world.log(new_0), 10)
        assert f"(at {OLD_1_IP})" in world.log(new_0)
        assert "node disconnect event for node 1" in world.log(new_0)
        wait_for("the new node 1 to lose the new node 0",
                 lambda: f"peer node 0 - {FIXED_NAMES[0]} at {REUSED_IP} lost" in world.log(new_1), 10)
