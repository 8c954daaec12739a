"""`cdriver imex-daemon` against a real control plane and the simulation kit's IMEX stand-ins.

Each daemon runs as its own process with the environment CDI and the DaemonSet give it, its
own loopback IP, a private hosts file and /imexd directory, and a Pod object bound to a test
Node. No kubelet runs: the test plays it, running `imex-daemon check` as the readiness probe
and writing the Pod's Ready condition through the status subresource.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.imex import config as imex_config
from cdriver.imex import ctl as imex_ctl
from cdriver.imex import hosts as imex_hosts
from cdriver.imex.config import IMEX_CTL_BINARY, IMEXD_TEMPLATE_NAME
from cdriver.imex.hosts import DNS_NAME_PREFIX, HOSTS_BLOCK_HEADER, dns_name
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.imex_daemon.cli import ENV_IMEX_HOSTS_FILE, ENV_IMEXD_DIR, IMEX_CHECK_NOOP_MESSAGE
from cdriver.roles.imex_daemon.failures import (
    EVENT_REASON_IMEX_PORT_CONFLICT,
    EVENT_REASON_IMEX_RESTARTED,
    EVENT_REASON_IMEX_START_FAILED,
)
from cdriver.sim.imex.protocol import (
    ENV_SIM_HOSTS_FILE,
    IMEX_DOMAIN_UP,
)
from cdriver.sim.node.addresses import lease_block
from tests.imex_timing import fast_imex_env
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

PODS, EVENTS = RESOURCES["pods"], RESOURCES["events"]
CLIQUES, CDS = COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
CQ0 = "00000000-0000-0000-0000-0000000000ab.0"
CQ1 = "00000000-0000-0000-0000-0000000000ab.1"
STANDIN_TIMING = fast_imex_env()




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


# --- the harness ------------------------------------------------------------------------


@dataclass
class Member:
    """One daemon pod on one test node."""

    node: str
    ip: str
    clique: str
    pod_name: str
    pod_uid: str
    home: Path
    proc: subprocess.Popen | None = None
    log_files: list[Path] = field(default_factory=list)

    @property
    def imexd(self) -> Path:
        return self.home / "imexd"

    @property
    def hosts(self) -> Path:
        return self.home / "hosts"

    @property
    def config(self) -> Path:
        return self.imexd / "imexd.cfg"

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.log_files if p.exists())


class Harness:
    """Creates test nodes and daemon pods, runs daemons, and plays kubelet for them."""

    def __init__(self, raw: RawClient, cluster: Any, namespace: str, bin_dir: Path, ip_base: str,
                 tmp: Path) -> None:
        from cdriver.sim.node.registration import register_node

        self.raw = raw
        self.cluster = cluster
        self.ns = namespace
        self.bin_dir = bin_dir
        self.ip_base = ip_base
        self.tmp = tmp
        self.cd_uid = str(uuid.uuid4())
        self.cd_name = "cd"
        self.cd_namespace = namespace
        self.gates = ""
        self.max_nodes = 4
        self.members: list[Member] = []
        self.nodes: list[Any] = []
        self._register = register_node
        self._next_ip = random.randint(1, 50)

    # -- set-up ------------------------------------------------------------------------
    def add(self, clique: str, template: str | None = None) -> Member:
        suffix = uuid.uuid4().hex[:6]
        node = f"imex-{suffix}"
        self.nodes.append(self._register(self.raw, node, wait=False))
        self._next_ip += 1
        ip = f"{self.ip_base}.{self._next_ip}"
        pod = {
            "metadata": {"name": f"{constants.daemon_object_name(self.cd_uid)[:40]}-{suffix}",
                         "labels": {constants.LABEL_COMPUTE_DOMAIN: self.cd_uid}},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "compute-domain-daemon", "image": "cdriver:test"}]},
        }
        pod = self.raw.create(PODS, pod, self.ns)
        self.raw.patch(PODS, pod["metadata"]["name"], {"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "False"}]}}, self.ns, subresource="status")
        home = self.tmp / node
        (home / "imexd").mkdir(parents=True)
        # What the kubelet plugin does on daemon-claim Prepare: place the config template.
        text = template if template is not None else imex_config.load_template()
        (home / "imexd" / IMEXD_TEMPLATE_NAME).write_text(text)
        (home / "hosts").write_text(f"127.0.0.1\tlocalhost\n{ip}\t{pod['metadata']['name']}\n")
        member = Member(node, ip, clique, pod["metadata"]["name"], pod["metadata"]["uid"], home)
        self.members.append(member)
        return member

    def env(self, m: Member) -> dict[str, str]:
        env = dict(os.environ)
        env.update(STANDIN_TIMING)
        env.update({
            # CDI edits of the daemon claim
            constants.ENV_CLIQUE_ID: m.clique,
            constants.ENV_CD_UUID: self.cd_uid,
            constants.ENV_CD_NAME: self.cd_name,
            constants.ENV_CD_NAMESPACE: self.cd_namespace,
            # DaemonSet pod spec (downward API)
            constants.ENV_NODE_NAME: m.node,
            constants.ENV_POD_IP: m.ip,
            constants.ENV_POD_NAME: m.pod_name,
            constants.ENV_POD_NAMESPACE: self.ns,
            constants.ENV_POD_UID: m.pod_uid,
            constants.ENV_MAX_NODES: str(self.max_nodes),
            ENV_FEATURE_GATES: self.gates,
            # the container's private paths
            ENV_IMEXD_DIR: str(m.imexd),
            ENV_IMEX_HOSTS_FILE: str(m.hosts),
            ENV_SIM_HOSTS_FILE: str(m.hosts),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "PATH": f"{self.bin_dir}:{env.get('PATH', '')}",
        })
        return env

    # -- processes ---------------------------------------------------------------------
    def start(self, m: Member, *extra: str) -> Member:
        log = m.home / f"daemon-{len(m.log_files)}.log"
        m.log_files.append(log)
        with open(log, "w") as out:
            m.proc = subprocess.Popen(
                [sys.executable, "-m", "cdriver", "imex-daemon", "run", "--max-restart-backoff", "0.5",
                 "--recheck-interval", "0.3", "--stop-grace", "3", *extra],
                env=self.env(m), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return m

    def stop(self, m: Member, timeout: float = 20) -> int:
        assert m.proc is not None
        m.proc.send_signal(signal.SIGTERM)
        try:
            return m.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"daemon of {m.node} did not exit within {timeout:.0f} s of SIGTERM:\n{m.log()[-3000:]}")

    def kill_container(self, m: Member) -> None:
        """SIGKILL the whole process group, as a runtime kills a container."""
        assert m.proc is not None
        os.killpg(m.proc.pid, signal.SIGKILL)
        m.proc.wait(10)

    def check(self, m: Member) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cdriver", "imex-daemon", "check"], env=self.env(m),
                              capture_output=True, text=True, timeout=30)

    def set_ready(self, m: Member, ready: bool) -> None:
        self.raw.patch(PODS, m.pod_name, {"status": {"conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}, self.ns, subresource="status")

    def probe(self, m: Member) -> bool:
        """One kubelet readiness probe: run `check`, write the result into the Pod."""
        ok = self.check(m).returncode == 0
        self.set_ready(m, ok)
        return ok

    def imex_pid(self, m: Member) -> int | None:
        """PID of this daemon's nvidia-imex stand-in, if one runs."""
        if m.proc is None or m.proc.poll() is not None:
            return None
        try:
            children = psutil.Process(m.proc.pid).children(recursive=True)
        except psutil.Error:
            return None
        for child in children:
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            if str(m.config) in cmd and "daemon" in cmd and child.status() != psutil.STATUS_ZOMBIE:
                return child.pid
        return None

    def domain(self, m: Member) -> dict:
        return imex_ctl.query_domain(str(self.bin_dir / IMEX_CTL_BINARY), config_path=str(m.config),
                                     env=self.env(m))

    # -- API views ---------------------------------------------------------------------
    def clique(self, clique: str) -> dict | None:
        return self.raw.get_or_none(CLIQUES, constants.clique_object_name(self.cd_uid, clique), self.ns)

    def entries(self, clique: str) -> list[dict]:
        return list((self.clique(clique) or {}).get("daemons") or [])

    def entry(self, m: Member) -> dict | None:
        return next((e for e in self.entries(m.clique) if e["nodeName"] == m.node), None)

    def wait_entry(self, m: Member, what: str = "", timeout: float = 30, **fields: Any) -> dict:
        def matching() -> dict | None:
            e = self.entry(m)
            return e if e is not None and all(e.get(k) == v for k, v in fields.items()) else None

        return wait_for(matching, timeout,
                        lambda: f"entry of {m.node} {what or fields}\n--- daemon log:\n{m.log()[-3000:]}")

    def events(self, m: Member, reason: str) -> list[dict]:
        items = self.raw.list(EVENTS, self.ns)["items"]
        return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("name") == m.pod_name]

    def cleanup(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                try:
                    os.killpg(m.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                m.proc.wait(10)
        for node in self.nodes:
            node.delete()


def mapping_in(hosts: Path) -> dict[str, str]:
    """The daemon-name mapping of a hosts file."""
    return {name: ip for name, ip in imex_hosts.parse_hosts(hosts.read_text()).items()
            if name.startswith(DNS_NAME_PREFIX)}


def ready_and_reported(h: Harness, m: Member) -> dict:
    """Play kubelet until the probe passes, then wait for the entry to turn Ready."""
    wait_for(lambda: h.probe(m), 30, lambda: f"check of {m.node} to pass\n{m.log()[-3000:]}", interval=0.2)
    return h.wait_entry(m, status=constants.STATUS_READY)


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

    both = {"compute-domain-daemon-0000": a.ip, "compute-domain-daemon-0001": b.ip}
    wait_for(lambda: mapping_in(a.hosts) == both, 20, "a's hosts block to list a and b")
    wait_for(lambda: mapping_in(b.hosts) == both, 20, "b's hosts block to list a and b")
    wait_for(lambda: mapping_in(x.hosts) == {"compute-domain-daemon-0000": x.ip}, 20, "x's hosts block")
    for m in (a, b):
        text = m.hosts.read_text()
        assert text.startswith(f"127.0.0.1\tlocalhost\n{m.ip}\t{m.pod_name}\n")
        assert text.count(HOSTS_BLOCK_HEADER) == 1
        names = (m.imexd / "nodes.cfg").read_text().split()
        assert names == [dns_name(i) for i in range(h.max_nodes)]
        cfg = imex_config.parse_config(m.config.read_text())
        assert cfg["IMEX_CMD_BIND_INTERFACE_IP"] == m.ip
        assert cfg["IMEX_NODE_CONFIG_FILE"] == str(m.imexd / "nodes.cfg")

    def up(m: Member) -> bool:
        try:
            return h.domain(m)["status"] == IMEX_DOMAIN_UP and len(h.domain(m)["nodes"]) == 2
        except imex_ctl.ImexCtlError:
            return False

    wait_for(lambda: up(a) and up(b), 30, "the two stand-ins of clique 0 to report domain UP")
    for m in (a, b, x):
        ready_and_reported(h, m)
        assert h.check(m).stdout == ""


def test_killed_imex_is_restarted_and_readiness_follows(daemons: Harness) -> None:
    h = daemons
    a = h.start(h.add(CQ0))
    ready_and_reported(h, a)
    first = h.imex_pid(a)
    assert first is not None
    os.kill(first, signal.SIGKILL)
    seen: list[str] = []

    def flipped_back() -> bool:
        status = (h.entry(a) or {}).get("status")
        if not seen or seen[-1] != status:
            seen.append(status)
        return constants.STATUS_NOT_READY in seen and seen[-1] == constants.STATUS_READY

    wait_for(flipped_back, 30, lambda: f"entry to go NotReady and back (saw {seen})\n{a.log()[-3000:]}", interval=0.02)
    second = h.imex_pid(a)
    assert second is not None and second != first
    assert h.check(a).returncode == 0
    assert "exited unexpectedly" in a.log()
    assert h.events(a, EVENT_REASON_IMEX_RESTARTED)


def test_new_peer_is_signalled_not_restarted_and_leaving_prunes_the_entry(daemons: Harness) -> None:
    h = daemons
    a, b = h.add(CQ0), h.add(CQ0)
    h.start(a)
    ready_and_reported(h, a)
    pid = h.imex_pid(a)
    h.start(b)
    h.wait_entry(b, index=1)
    wait_for(lambda: mapping_in(a.hosts).get("compute-domain-daemon-0001") == b.ip, 20, "a to learn b's name")
    wait_for(lambda: "Sent SIGUSR1" in a.log() and "SIGUSR1: re-read" in a.log(), 20,
             lambda: f"a to signal its nvidia-imex\n{a.log()[-3000:]}")
    assert h.imex_pid(a) == pid
    wait_for(lambda: (h.domain(a)["status"] == IMEX_DOMAIN_UP and len(h.domain(a)["nodes"]) == 2), 30,
             "a's stand-in to connect to b")

    assert h.stop(b) == 0
    assert h.entry(b) is None
    assert "Successfully removed daemon" in b.log()
    assert f"from ComputeDomain {h.cd_namespace}/{h.cd_name}" in b.log()
    assert h.imex_pid(b) is None
    wait_for(lambda: mapping_in(a.hosts) == {"compute-domain-daemon-0000": a.ip}, 20, "a to forget b's name")
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

    wait_for(reassign, 20, "the clique to give a index 3")
    wait_for(lambda: mapping_in(a.hosts) == {dns_name(3): a.ip}, 20, "a's hosts block to name it by index 3")
    wait_for(lambda: h.imex_pid(a) not in (None, pid), 30, lambda: f"a's nvidia-imex to restart\n{a.log()[-3000:]}")
    (event,) = wait_for(lambda: h.events(a, EVENT_REASON_IMEX_RESTARTED), 20, "the restart Event")
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
    wait_for(lambda: h.imex_pid(a), 20, "a's nvidia-imex to start again")
    after = {e["nodeName"]: e["index"] for e in h.entries(CQ0)}
    assert after == before, "\n".join(f"--- {m.node}:\n{m.log()[-2500:]}" for m in (a, b, d))


def test_imex_start_failure_is_reported_with_its_error_line(daemons: Harness) -> None:
    h = daemons
    broken = imex_config.load_template().replace("SERVER_PORT={{ server_port }}", "SERVER_PORT=fifty")
    a = h.start(h.add(CQ0, template=broken))

    def failure_event() -> dict | None:
        found = h.events(a, EVENT_REASON_IMEX_START_FAILED)
        return found[0] if found else None

    event = wait_for(failure_event, 30, lambda: f"a start-failure Event\n{a.log()[-3000:]}")
    assert event["type"] == "Warning"
    assert "nvidia-imex exited during start-up" in event["message"]
    assert "SERVER_PORT='fifty'" in event["message"]
    assert "restart count" in event["message"]
    assert "SERVER_PORT='fifty'" in a.log()
    h.set_ready(a, True)  # even a (wrongly) Ready pod does not make the entry Ready
    # the daemon's decision, made from the Ready pod: it says it leaves the entry as it is
    wait_for(lambda: "stays NotReady (pod Ready, nvidia-imex not READY" in a.log(), 20,
             lambda: f"a to decide on its Ready pod\n{a.log()[-3000:]}")
    assert h.entry(a)["status"] == constants.STATUS_NOT_READY
    result = h.check(a)
    assert result.returncode == 1 and "IMEX daemon check failed" in result.stderr


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
        wait_for(lambda: expected in a.log(), 30, lambda: f"the port-conflict message\n{a.log()[-3000:]}")
        assert "systemctl disable --now nvidia-imex.service" in a.log()
        assert h.imex_pid(a) is None
        events = h.events(a, EVENT_REASON_IMEX_PORT_CONFLICT)
        assert events and expected in events[0]["message"]
        result = h.check(a)
        assert result.returncode == 1 and expected in result.stderr
        assert h.entry(a)["status"] == constants.STATUS_NOT_READY
    finally:
        holder.kill()
        holder.wait()
    wait_for(lambda: h.imex_pid(a), 30, lambda: f"nvidia-imex to start once the port is free\n{a.log()[-3000:]}")
    ready_and_reported(h, a)


def test_empty_clique_runs_no_imex_and_check_is_a_noop(daemons: Harness) -> None:
    h = daemons
    a = h.start(h.add(""))

    def labelled() -> bool:
        labels = h.raw.get(PODS, a.pod_name, h.ns)["metadata"].get("labels") or {}
        return labels.get(constants.LABEL_CLIQUE_ID) == ""

    wait_for(labelled, 30, lambda: f"the pod's empty clique label\n{a.log()[-3000:]}")
    result = h.check(a)
    assert result.returncode == 0 and result.stdout.strip() == IMEX_CHECK_NOOP_MESSAGE
    wait_for(lambda: "no IMEX daemon runs here" in a.log(), 20, "the empty-clique log line")
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
    cd = h.raw.create(CDS, {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN, "metadata": {"name": h.cd_name},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}}}}, h.ns)
    h.cd_uid = cd["metadata"]["uid"]
    a, b = h.add(CQ0), h.add(CQ0)
    h.start(a)
    wait_for(lambda: "numNodes: 2, nodes seen: 1" in a.log(), 30, lambda: f"a to wait for all nodes\n{a.log()[-3000:]}")
    assert h.imex_pid(a) is None
    h.start(b)

    def nodes() -> list[dict]:
        return (h.raw.get(CDS, h.cd_name, h.ns).get("status") or {}).get("nodes") or []

    wait_for(lambda: len(nodes()) == 2, 30, "both nodes in ComputeDomain status")
    assert sorted((n["name"], n["ipAddress"], n["index"]) for n in nodes()) == sorted(
        [(a.node, a.ip, 0), (b.node, b.ip, 1)])
    wait_for(lambda: h.imex_pid(a) and h.imex_pid(b), 30, "both stand-ins to start")
    for m in (a, b):
        wait_for(lambda m=m: (m.imexd / "nodes.cfg").read_text().split() == [a.ip, b.ip], 20,
                 "nodes.cfg with both IPs")
    assert h.clique(CQ0) is None
    wait_for(lambda: h.probe(a), 30, "a's check to pass", interval=0.2)
    wait_for(lambda: any(n["name"] == a.node and n.get("status") == constants.STATUS_READY for n in nodes()), 30,
             "a's status.nodes entry to turn Ready")
    pid = h.imex_pid(a)
    assert h.stop(b) == 0
    wait_for(lambda: [n["name"] for n in nodes()] == [a.node], 30, "b to leave ComputeDomain status")
    assert h.imex_pid(a) == pid  # one node short of numNodes: keep the running daemon
    # b comes back in a new pod with a new IP: a complete, changed peer list restarts a's daemon.
    b.ip = f"{h.ip_base}.{h._next_ip + 100}"
    h.start(b)
    wait_for(lambda: (a.imexd / "nodes.cfg").read_text().split() == [a.ip, b.ip], 30,
             lambda: f"a's nodes.cfg with b's new IP\n{a.log()[-3000:]}")
    wait_for(lambda: h.imex_pid(a) not in (None, pid), 30, lambda: f"a's nvidia-imex to restart\n{a.log()[-3000:]}")


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
    cd = h.raw.create(CDS, {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND_COMPUTE_DOMAIN,
        "metadata": {"name": h.cd_name, "finalizers": ["test.cdriver/hold"]},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}}}}, h.ns)
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
    wait_for(lambda: "not joining again" in a.log(), 30, lambda: f"the daemon to stay out\n{a.log()[-3000:]}")
    assert h.clique(CQ0) is None
    h.raw.patch(CDS, h.cd_name, {"metadata": {"finalizers": None}}, h.ns)
