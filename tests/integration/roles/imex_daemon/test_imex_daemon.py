"""`cdriver imex-daemon` against a real control plane and the simulation kit's IMEX stand-ins.

Each daemon runs as its own process with the environment CDI and the DaemonSet give it, its
own loopback IP, a private hosts file and /imexd directory, and a Pod object bound to a test
Node. No kubelet runs: the test plays it, running `imex-daemon check` as the readiness probe
and writing the Pod's Ready condition through the status subresource.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.imex import config as imex_config
from cdriver.imex import ctl as imex_ctl
from cdriver.imex.config import IMEXD_TEMPLATE_NAME
from cdriver.imex.hosts import HOSTS_BLOCK_HEADER, parse_hosts
from cdriver.imex.names import UNUSED_SLOT_IP, dns_name
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.imex_daemon.cli import IMEX_CHECK_NOOP_MESSAGE
from cdriver.roles.imex_daemon.failures import (
    EVENT_REASON_IMEX_PORT_CONFLICT,
    EVENT_REASON_IMEX_RESTARTED,
    EVENT_REASON_IMEX_START_FAILED,
)
from cdriver.roles.imex_daemon.health import NOOP_TEXT
from cdriver.sim.imex.protocol import (
    IMEX_DOMAIN_UP,
)
from cdriver.sim.node.addresses import lease_block
from cdriver.sim.world.scenario import compute_domain
from tests.support.imex_daemon import Harness, Member, mapping_in, ready_and_reported
from tests.support.waiting import wait_for

PODS, EVENTS = RESOURCES["pods"], RESOURCES["events"]
CLIQUES, CDS = COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
CQ0 = "00000000-0000-0000-0000-0000000000ab.0"
CQ1 = "00000000-0000-0000-0000-0000000000ab.1"


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crds(chart_crds: None) -> None:
    """The chart's CRDs, installed once per session (tests/conftest.py)."""


def _served(raw: RawClient, plural: str) -> bool:
    try:
        raw.list(RESOURCES[plural], "default")
        return True
    except ApiError as exc:
        if exc.not_found:
            return False
        raise


@pytest.fixture(scope="module")
def imex_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin dir of a simulated driver root: nvidia-imex / nvidia-imex-ctl stand-in wrappers."""
    from cdriver.sim.gpu.driver_root import create_driver_root

    root = create_driver_root(tmp_path_factory.mktemp("driver-root"), "imex-test-node", None,
                              fabric_state="not_supported")
    return root.bin_dir


@pytest.fixture(scope="module")
def ip_base() -> Iterator[str]:
    """A loopback /24 leased for this module, so stand-ins never meet other runs' ports."""
    with lease_block() as block:
        yield block.prefix


@pytest.fixture
def daemons(raw: RawClient, cluster: Any, namespace: str, crds: None, imex_bin: Path, ip_base: str,
            tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(raw, cluster, namespace, imex_bin, ip_base, tmp_path)
    yield harness
    harness.cleanup()


# --- tests ------------------------------------------------------------------------------


def test_three_daemons_two_cliques_join_name_and_connect(daemons: Harness) -> None:
    h = daemons
    a, b, x = h.add(CQ0), h.add(CQ0), h.add(CQ1)
    h.start(a)
    h.wait_entry(a, index=0)
    h.start(b)
    h.start(x)
    eb = h.wait_entry(b, index=1)
    ex = h.wait_entry(x, index=0)
    assert eb == {"nodeName": b.node, "ipAddress": b.ip, "cliqueID": CQ0, "index": 1, "status": "NotReady"}
    assert ex["ipAddress"] == x.ip and ex["cliqueID"] == CQ1

    obj = h.clique(CQ0)
    assert obj["metadata"]["labels"] == {constants.LABEL_COMPUTE_DOMAIN: h.cd_uid, constants.LABEL_CLIQUE_ID: CQ0}
    owners = {(r["kind"], r["name"], r["uid"]) for r in obj["metadata"]["ownerReferences"]}
    assert owners == {("Pod", a.pod_name, a.pod_uid), ("Pod", b.pod_name, b.pod_uid)}
    assert [r["uid"] for r in h.clique(CQ1)["metadata"]["ownerReferences"]] == [x.pod_uid]
    for m in (a, b, x):
        pod = h.raw.get(PODS, m.pod_name, h.ns)
        assert pod["metadata"]["labels"][constants.LABEL_CLIQUE_ID] == m.clique

    both = {dns_name(h.cd_uid, 0): a.ip, dns_name(h.cd_uid, 1): b.ip}
    wait_for("a's hosts block to list a and b", lambda: mapping_in(a.hosts) == both, 20)
    wait_for("b's hosts block to list a and b", lambda: mapping_in(b.hosts) == both, 20)
    wait_for("x's hosts block", lambda: mapping_in(x.hosts) == {dns_name(h.cd_uid, 0): x.ip}, 20)
    for m in (a, b):
        text = m.hosts.read_text()
        assert text.startswith(f"127.0.0.1\tlocalhost\n{m.ip}\t{m.pod_name}\n")
        assert text.count(HOSTS_BLOCK_HEADER) == 1
        names = (m.imexd / "nodes.cfg").read_text().split()
        assert names == [dns_name(h.cd_uid, i) for i in range(h.max_nodes)]
        # every listed name resolves in the pod: the slots without a daemon to the sentinel
        assert {name: parse_hosts(text)[name] for name in names[2:]} == dict.fromkeys(names[2:], UNUSED_SLOT_IP)
        cfg = imex_config.parse_config(m.config.read_text())
        assert cfg["IMEX_CMD_BIND_INTERFACE_IP"] == m.ip
        assert cfg["IMEX_NODE_CONFIG_FILE"] == str(m.imexd / "nodes.cfg")

    def up(m: Member) -> bool:
        try:
            return h.domain(m)["status"] == IMEX_DOMAIN_UP and len(h.domain(m)["nodes"]) == 2
        except imex_ctl.ImexCtlError:
            return False

    wait_for("the two stand-ins of clique 0 to report domain UP", lambda: up(a) and up(b), 30)
    for m in (a, b, x):
        ready_and_reported(h, m)
        assert h.check(m).stdout == ""


def up_with(h: Harness, m: Member, nodes: int) -> bool:
    """m's stand-in reports the domain UP with `nodes` nodes."""
    try:
        doc = h.domain(m)
    except imex_ctl.ImexCtlError:
        return False
    return doc["status"] == IMEX_DOMAIN_UP and len(doc["nodes"]) == nodes


def test_a_reused_pod_ip_does_not_let_an_old_domain_disturb_a_new_one(
        daemons: Harness, raw: RawClient, cluster: Any, namespace: str, imex_bin: Path, ip_base: str,
        tmp_path: Path) -> None:
    """Upstream #1447: an old domain's daemon keeps dialling the name of a peer whose pod went;
    that pod IP now serves a new domain's daemon. Each domain's own names make the new daemon
    refuse it, so the old domain's shutdown never reaches the new domain's connections."""
    old = daemons
    old_0, old_1 = old.add(CQ0), old.add(CQ0)
    for m in (old_0, old_1):
        old.start(m)
        ready_and_reported(old, m)
    wait_for("the old domain UP", lambda: up_with(old, old_1, 2), 30)
    old.kill_container(old_0)  # its pod goes; old_1 still has old_0's name at that address

    new = Harness(raw, cluster, namespace, imex_bin, ip_base, tmp_path / "new-domain")
    try:
        new._next_ip = old._next_ip + 10
        new_0, new_1 = new.add(CQ0, ip=old_0.ip), new.add(CQ0)
        for m in (new_0, new_1):
            new.start(m)
            ready_and_reported(new, m)
        wait_for("the new domain UP", lambda: up_with(new, new_0, 2) and up_with(new, new_1, 2), 30)

        def outcome() -> str | None:
            """What became of old_1's nvidia-imex dialling its node 0 at the reused address."""
            if f"refused the connection of {old_1.ip}: its node map" in new_0.log():
                return "refused"
            return "joined" if old.domain(old_1)["nodes"]["0"]["status"] == "READY" else None

        seen = wait_for(lambda: f"old_1's nvidia-imex to reach new_0\n{new_0.log()[-3000:]}", outcome, 30)
        assert seen == "refused", "old_1's nvidia-imex was taken for a node of the new domain (upstream #1447)"
        assert not set(mapping_in(new_0.hosts)) & set(mapping_in(old_1.hosts))
        # the old domain goes: its last daemon stops, its nvidia-imex notifies its peers
        assert old.stop(old_1) == 0
        assert "clean shutdown" in old_1.log()
        assert "received notification of shutdown" not in new_0.log() + new_1.log()
        assert " lost: " not in new_0.log() + new_1.log()
        assert up_with(new, new_0, 2)
        assert all_connected(new, new_0)
    finally:
        new.cleanup()


def all_connected(h: Harness, m: Member) -> bool:
    """m's stand-in has its connection with the domain's other node."""
    nodes = h.domain(m)["nodes"]
    return all(conn["status"] == "CONNECTED" for node in nodes.values() for conn in node["connections"].values())


def test_killed_imex_is_restarted_and_readiness_follows(daemons: Harness) -> None:
    h = daemons
    a = h.start(h.add(CQ0))
    entry = ready_and_reported(h, a)
    first = h.imex_pid(a)
    assert first is not None
    # its metrics endpoint (on the pod IP) says so too
    wait_for("the daemon to report READY on its metrics endpoint",
             lambda: h.metric(a, "cdriver_imex_daemon_ready") == 1, 10)
    assert h.metric(a, "cdriver_imex_daemon_index") == entry["index"]
    assert h.metric(a, "cdriver_imex_daemon_index_assignment_seconds") > 0
    assert (h.metric(a, "cdriver_imex_daemon_imex_starts_total"), h.metric(a, "cdriver_imex_daemon_imex_running")) \
        == (1, 1)
    assert h.metric(a, "cdriver_imex_daemon_clique_updates_total", result="ok") >= 2  # joined, then Ready
    assert h.metric(a, "cdriver_api_client_requests_total", verb="update", code="200") >= 2
    # the pod's probes, answered by the daemon: what `check` decides
    for path in ("/startupz", "/readyz", "/livez"):
        status, why = h.http_probe(a, path)
        assert status == 200 and why.endswith("answers READY"), (path, why)
    os.kill(first, signal.SIGKILL)
    seen: list[str] = []

    def flipped_back() -> bool:
        status = (h.entry(a) or {}).get("status")
        if not seen or seen[-1] != status:
            seen.append(status)
        return constants.STATUS_NOT_READY in seen and seen[-1] == constants.STATUS_READY

    wait_for(lambda: f"entry to go NotReady and back (saw {seen})\n{a.log()[-3000:]}", flipped_back, 30, interval=0.02)
    second = h.imex_pid(a)
    assert second is not None and second != first
    assert h.check(a).returncode == 0
    assert "exited unexpectedly" in a.log()
    assert h.events(a, EVENT_REASON_IMEX_RESTARTED)
    assert h.metric(a, "cdriver_imex_daemon_imex_starts_total") == 2
    assert h.metric(a, "cdriver_imex_daemon_imex_restarts_total", reason="exited") == 1


def test_new_peer_is_signalled_not_restarted_and_leaving_prunes_the_entry(daemons: Harness) -> None:
    h = daemons
    a, b = h.add(CQ0), h.add(CQ0)
    h.start(a)
    ready_and_reported(h, a)
    pid = h.imex_pid(a)
    h.start(b)
    h.wait_entry(b, index=1)
    wait_for("a to learn b's name", lambda: mapping_in(a.hosts).get(dns_name(h.cd_uid, 1)) == b.ip, 20)
    wait_for(lambda: f"a to signal its nvidia-imex\n{a.log()[-3000:]}",
             lambda: "Sent SIGUSR1" in a.log() and "SIGUSR1: re-read" in a.log(), 20)
    assert h.imex_pid(a) == pid
    wait_for("a's stand-in to connect to b",
             lambda: (h.domain(a)["status"] == IMEX_DOMAIN_UP and len(h.domain(a)["nodes"]) == 2), 30)

    assert h.stop(b) == 0
    assert h.entry(b) is None
    assert "Successfully removed daemon" in b.log()
    assert f"from ComputeDomain {h.cd_namespace}/{h.cd_name}" in b.log()
    assert h.imex_pid(b) is None
    wait_for("a to forget b's name", lambda: mapping_in(a.hosts) == {dns_name(h.cd_uid, 0): a.ip}, 20)
    assert h.imex_pid(a) == pid
    assert [e["nodeName"] for e in h.entries(CQ0)] == [a.node]


def test_a_new_own_index_restarts_imex_and_says_so(daemons: Harness) -> None:
    """nvidia-imex reads its own node ID only at start: a re-assigned index is a restart, not a SIGUSR1."""
    h = daemons
    a = h.start(h.add(CQ0))
    ready_and_reported(h, a)
    pid = h.imex_pid(a)

    def reassign() -> bool:
        obj = h.clique(CQ0)
        obj["daemons"][0]["index"] = 3
        try:
            h.raw.update(CLIQUES, obj, h.ns)
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        return True

    wait_for("the clique to give a index 3", reassign, 20)
    wait_for("a's hosts block to name it by index 3", lambda: mapping_in(a.hosts) == {dns_name(h.cd_uid, 3): a.ip}, 20)
    wait_for(lambda: f"a's nvidia-imex to restart\n{a.log()[-3000:]}", lambda: h.imex_pid(a) not in (None, pid), 30)
    (event,) = wait_for("the restart Event", lambda: h.events(a, EVENT_REASON_IMEX_RESTARTED), 20)
    assert event["type"] == "Normal" and "changed from 0 to 3" in event["message"], event
    assert "Sent SIGUSR1" not in a.log()
    ready_and_reported(h, a)
    assert h.entry(a)["index"] == 3


def test_concurrent_joins_end_with_distinct_indices(daemons: Harness) -> None:
    h = daemons
    group = [h.add(CQ0) for _ in range(3)]
    for m in group:
        h.start(m)
    for m in group:
        h.wait_entry(m, what="to appear")
    indices = sorted(e["index"] for e in h.entries(CQ0))
    assert indices == [0, 1, 2]


def test_joins_apply_their_own_entries_and_take_the_assigned_index(daemons: Harness) -> None:
    """The default join: daemons starting at once each apply only their own entry (no
    resourceVersion, so no conflict), the index comes from the controller's assignment (played
    by the harness), and the clique forms with every member named."""
    h = daemons
    h.assign_indices(CQ0)
    group = [h.add(CQ0) for _ in range(4)]
    for m in group:
        h.start(m)

    def indexed() -> list[int] | None:
        indices = [e.get("index") for e in h.entries(CQ0)]
        return sorted(indices) if len(indices) == 4 and None not in indices else None

    logs = lambda: "\n".join(f"--- {m.node}:\n{m.log()[-2000:]}" for m in group)  # noqa: E731
    assert wait_for(lambda: f"four indexed entries\n{logs()}", indexed, 30) == [0, 1, 2, 3]
    # the assigner records a decision after its update returns, so the entries may show it first
    members = sorted(m.node for m in group)
    wait_for(lambda: f"the assigner to record every member, has {h.assigned}",
             lambda: sorted(node for node, _ in h.assigned) == members, 10)
    for m in group:
        wait_for(lambda m=m: f"{m.node}'s hosts block to name all four\n{logs()}",
                 lambda m=m: len(mapping_in(m.hosts)) == 4, 30)
        assert h.metric(m, "cdriver_imex_daemon_clique_update_conflicts_total") == 0
        assert h.metric(m, "cdriver_imex_daemon_index_assignment_seconds") > 0
        assert "No index assigned" not in m.log()


def test_without_an_assignment_a_daemon_takes_the_lowest_free_index(daemons: Harness) -> None:
    """No controller assigns (down, or an older one): after --index-wait the daemons take the
    lowest free indices themselves, still distinct."""
    h = daemons
    h.index_wait = "1"
    a, b = h.add(CQ0), h.add(CQ0)
    h.start(a)
    h.start(b)
    wait_for("both entries indexed", lambda: sorted(e.get("index", -1) for e in h.entries(CQ0)) == [0, 1], 30)
    for m in (a, b):
        assert "No index assigned" in m.log()


def test_restarted_daemon_keeps_its_index(daemons: Harness) -> None:
    h = daemons
    a, b, d = h.add(CQ0), h.add(CQ0), h.add(CQ0)
    for m in (a, b, d):
        h.start(m)
        h.wait_entry(m, what="to appear")
    before = {e["nodeName"]: e["index"] for e in h.entries(CQ0)}
    assert sorted(before.values()) == [0, 1, 2]

    # Graceful restart: the entry leaves and comes back with the same index.
    assert h.stop(b) == 0
    h.start(b)
    h.wait_entry(b, index=before[b.node])
    # Container killed (no clean-up): the entry stays and the new daemon takes it over.
    h.kill_container(a)
    h.start(a)
    h.wait_entry(a, index=before[a.node])
    wait_for("a's nvidia-imex to start again", lambda: h.imex_pid(a), 20)
    after = {e["nodeName"]: e["index"] for e in h.entries(CQ0)}
    assert after == before, "\n".join(f"--- {m.node}:\n{m.log()[-2500:]}" for m in (a, b, d))


def test_imex_start_failure_is_reported_with_its_error_line(daemons: Harness) -> None:
    h = daemons
    broken = imex_config.load_template().replace("SERVER_PORT={{ server_port }}", "SERVER_PORT=fifty")
    a = h.start(h.add(CQ0, template=broken))

    def failure_event() -> dict | None:
        found = h.events(a, EVENT_REASON_IMEX_START_FAILED)
        return found[0] if found else None

    event = wait_for(lambda: f"a start-failure Event\n{a.log()[-3000:]}", failure_event, 30)
    assert event["type"] == "Warning"
    assert "nvidia-imex exited during start-up" in event["message"]
    assert "SERVER_PORT='fifty'" in event["message"]
    assert "restart count" in event["message"]
    assert "SERVER_PORT='fifty'" in a.log()
    h.set_ready(a, True)  # even a (wrongly) Ready pod does not make the entry Ready
    # the daemon's decision, made from the Ready pod: it says it leaves the entry as it is
    wait_for(lambda: f"a to decide on its Ready pod\n{a.log()[-3000:]}",
             lambda: "stays NotReady (pod Ready, nvidia-imex not READY" in a.log(), 20)
    assert h.entry(a)["status"] == constants.STATUS_NOT_READY
    result = h.check(a)
    assert result.returncode == 1 and "IMEX daemon check failed" in result.stderr
    status, why = h.http_probe(a, "/readyz")
    assert status == 503 and ("has not answered READY yet" in why or why == "nvidia-imex is not running")


def test_port_held_by_another_process_is_named_with_the_fix(daemons: Harness) -> None:
    h = daemons
    a = h.add(CQ0)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         # SO_REUSEADDR: an earlier test's daemon on this IP may have left TIME_WAIT connections.
         "import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
         "s.bind((sys.argv[1], 50000)); s.listen();"
         "print('listening', flush=True); time.sleep(600)", a.ip],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "listening"
        h.start(a)
        expected = f"IMEX port 50000 on pod IP {a.ip} is already in use by process {holder.pid}"
        wait_for(lambda: f"the port-conflict message\n{a.log()[-3000:]}", lambda: expected in a.log(), 30)
        assert "systemctl disable --now nvidia-imex.service" in a.log()
        assert h.imex_pid(a) is None
        events = h.events(a, EVENT_REASON_IMEX_PORT_CONFLICT)
        assert events and expected in events[0]["message"]
        result = h.check(a)
        assert result.returncode == 1 and expected in result.stderr
        # the HTTP probes decide the same; the startup probe does not wait out a port conflict
        for path in ("/startupz", "/readyz", "/livez"):
            status, why = h.http_probe(a, path)
            assert status == 503 and expected in why
        assert h.entry(a)["status"] == constants.STATUS_NOT_READY
    finally:
        holder.kill()
        holder.wait()
    wait_for(lambda: f"nvidia-imex to start once the port is free\n{a.log()[-3000:]}", lambda: h.imex_pid(a), 30)
    ready_and_reported(h, a)


def test_empty_clique_runs_no_imex_and_check_is_a_noop(daemons: Harness) -> None:
    h = daemons
    a = h.start(h.add(""))

    def labelled() -> bool:
        labels = h.raw.get(PODS, a.pod_name, h.ns)["metadata"].get("labels") or {}
        return labels.get(constants.LABEL_CLIQUE_ID) == ""

    wait_for(lambda: f"the pod's empty clique label\n{a.log()[-3000:]}", labelled, 30)
    result = h.check(a)
    assert result.returncode == 0 and result.stdout.strip() == IMEX_CHECK_NOOP_MESSAGE
    assert h.http_probe(a, "/readyz") == (200, NOOP_TEXT)
    wait_for("the empty-clique log line", lambda: "no IMEX daemon runs here" in a.log(), 20)
    assert h.imex_pid(a) is None
    assert not (a.imexd / "imexd.cfg").exists()
    assert h.raw.list(CLIQUES, h.ns)["items"] == []
    assert h.stop(a) == 0


def test_missing_cdi_identity_exits_saying_cdi_was_not_applied(daemons: Harness) -> None:
    h = daemons
    a = h.add(CQ0)
    env = h.env(a)
    del env[constants.ENV_CD_UUID]
    result = subprocess.run([sys.executable, "-m", "cdriver", "imex-daemon", "run"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "COMPUTE_DOMAIN_UUID is empty" in result.stderr and "CDI container edits" in result.stderr
    assert "Traceback" not in result.stderr


def test_legacy_ip_mode_writes_domain_status_and_restarts_on_peer_change(daemons: Harness) -> None:
    h = daemons
    h.gates = "IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false"
    cd = h.raw.create(CDS, compute_domain(h.cd_name, h.ns, "cd-channel", mode=None, num_nodes=2), h.ns)
    h.cd_uid = cd["metadata"]["uid"]
    a, b = h.add(CQ0), h.add(CQ0)
    h.start(a)
    wait_for(lambda: f"a to wait for all nodes\n{a.log()[-3000:]}", lambda: "numNodes: 2, nodes seen: 1" in a.log(),
             30)
    assert h.imex_pid(a) is None
    h.start(b)

    def nodes() -> list[dict]:
        return (h.raw.get(CDS, h.cd_name, h.ns).get("status") or {}).get("nodes") or []

    wait_for("both nodes in ComputeDomain status", lambda: len(nodes()) == 2, 30)
    assert sorted((n["name"], n["ipAddress"], n["index"]) for n in nodes()) == sorted(
        [(a.node, a.ip, 0), (b.node, b.ip, 1)])
    wait_for("both stand-ins to start", lambda: h.imex_pid(a) and h.imex_pid(b), 30)
    for m in (a, b):
        wait_for("nodes.cfg with both IPs", lambda m=m: (m.imexd / "nodes.cfg").read_text().split() == [a.ip, b.ip],
                 20)
    assert h.clique(CQ0) is None
    wait_for("a's check to pass", lambda: h.probe(a), 30, interval=0.2)
    wait_for("a's status.nodes entry to turn Ready",
             lambda: any(n["name"] == a.node and n.get("status") == constants.STATUS_READY for n in nodes()), 30)
    pid = h.imex_pid(a)
    assert h.stop(b) == 0
    wait_for("b to leave ComputeDomain status", lambda: [n["name"] for n in nodes()] == [a.node], 30)
    assert h.imex_pid(a) == pid  # one node short of numNodes: keep the running daemon
    # b comes back in a new pod with a new IP: a complete, changed peer list restarts a's daemon.
    b.ip = f"{h.ip_base}.{h._next_ip + 100}"
    h.start(b)
    wait_for(lambda: f"a's nodes.cfg with b's new IP\n{a.log()[-3000:]}",
             lambda: (a.imexd / "nodes.cfg").read_text().split() == [a.ip, b.ip], 30)
    wait_for(lambda: f"a's nvidia-imex to restart\n{a.log()[-3000:]}", lambda: h.imex_pid(a) not in (None, pid), 30)


def test_missing_config_template_exits_naming_the_plugin_step(daemons: Harness) -> None:
    h = daemons
    a = h.add(CQ0)
    (a.imexd / IMEXD_TEMPLATE_NAME).unlink()
    result = subprocess.run([sys.executable, "-m", "cdriver", "imex-daemon", "run"], env=h.env(a),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"IMEX config template {a.imexd / IMEXD_TEMPLATE_NAME} does not exist" in result.stderr
    assert "kubelet plugin writes it when it prepares the daemon claim" in result.stderr
    assert h.clique(CQ0) is None


def test_a_stale_writer_conflicts_and_recomputes_its_index(raw: RawClient, namespace: str, crds: None) -> None:
    from cdriver.roles.imex_daemon import clique as cl

    cd_uid = str(uuid.uuid4())
    name = constants.clique_object_name(cd_uid, CQ0)

    def store(pod_name: str) -> cl.CliqueStore:
        # Real owner pods: the garbage collector deletes objects whose owners are all gone.
        pod = raw.create(PODS, {"metadata": {"name": pod_name}, "spec": {"containers": [
            {"name": "c", "image": "cdriver:test"}]}}, namespace)
        owner = cl.pod_owner_reference(pod_name, pod["metadata"]["uid"])
        return cl.CliqueStore(raw, namespace, name, cd_uid, CQ0, owner)

    first, second = store("p1"), store("p2")
    first.ensure()
    second.ensure()  # both now cache the same resourceVersion
    assert cl.resource_version(first.current()) == cl.resource_version(second.current())
    sleeps: list[float] = []
    cl.update_with_retry(first, lambda e: cl.upsert_entry(e, cl.Member("n1", "10.0.0.1", CQ0), 4),
                         sleep=sleeps.append)
    assert sleeps == []
    out = cl.update_with_retry(second, lambda e: cl.upsert_entry(e, cl.Member("n2", "10.0.0.2", CQ0), 4),
                               sleep=sleeps.append)
    assert len(sleeps) == 1  # exactly one 409, then a fresh read
    assert sorted((d["nodeName"], d["index"]) for d in out["daemons"]) == [("n1", 0), ("n2", 1)]
    stored = raw.get(CLIQUES, name, namespace)
    assert {r["name"] for r in stored["metadata"]["ownerReferences"]} == {"p1", "p2"}
    version = stored["metadata"]["resourceVersion"]
    cl.update_with_retry(second, lambda e: cl.upsert_entry(e, cl.Member("n2", "10.0.0.2", CQ0), 4),
                         sleep=sleeps.append)
    assert raw.get(CLIQUES, name, namespace)["metadata"]["resourceVersion"] == version  # no-op: no write


def test_leaving_a_deleted_clique_does_not_create_it_again(raw: RawClient, namespace: str, crds: None) -> None:
    """A daemon stopping after its domain was deleted (cliques removed) must not recreate them."""
    from cdriver.roles.imex_daemon import clique as cl

    cd_uid = str(uuid.uuid4())
    name = constants.clique_object_name(cd_uid, CQ0)
    pod = raw.create(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "cdriver:test"}]}}, namespace)
    store = cl.CliqueStore(raw, namespace, name, cd_uid, CQ0, cl.pod_owner_reference("p", pod["metadata"]["uid"]))
    store.ensure()
    cl.update_with_retry(store, lambda e: cl.upsert_entry(e, cl.Member("n1", "10.0.0.1", CQ0), 4),
                         sleep=lambda _: None)
    raw.delete(CLIQUES, name, namespace)  # the store still holds its last copy
    assert store.current() is not None
    out = cl.update_with_retry(store, lambda e: cl.remove_entry(e, "n1"), sleep=lambda _: None,
                               what="leave", create_missing=False)
    assert out is None
    assert raw.get_or_none(CLIQUES, name, namespace) is None


def test_deleted_clique_is_rejoined_only_while_the_domain_lives(daemons: Harness) -> None:
    """Someone deletes the clique: the daemon joins again. Its ComputeDomain is being deleted
    (the controller removes the cliques): it stays out, so the domain can finish deleting."""
    h = daemons
    body = compute_domain(h.cd_name, h.ns, "cd-channel", mode=None)
    body["metadata"]["finalizers"] = ["test.cdriver/hold"]
    cd = h.raw.create(CDS, body, h.ns)
    h.cd_uid = cd["metadata"]["uid"]
    a = h.start(h.add(CQ0))
    first = h.wait_entry(a)
    name = constants.clique_object_name(h.cd_uid, CQ0)
    uid_before = h.raw.get(CLIQUES, name, h.ns)["metadata"]["uid"]
    h.raw.delete(CLIQUES, name, h.ns)
    rejoined = h.wait_entry(a)
    assert rejoined["index"] == first["index"]
    assert h.raw.get(CLIQUES, name, h.ns)["metadata"]["uid"] != uid_before

    h.raw.delete(CDS, h.cd_name, h.ns)  # held by the finalizer: deletionTimestamp set
    h.raw.delete(CLIQUES, name, h.ns)
    wait_for(lambda: f"the daemon to stay out\n{a.log()[-3000:]}", lambda: "not joining again" in a.log(), 30)
    assert h.clique(CQ0) is None
    h.raw.patch(CDS, h.cd_name, {"metadata": {"finalizers": None}}, h.ns)
