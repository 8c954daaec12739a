"""`cdriver imex-daemon` processes against a real control plane, with the test playing kubelet.

Each daemon runs as its own process with the environment CDI and the DaemonSet give it, its
own loopback IP, a private hosts file and /imexd directory, and a Pod object bound to a test
Node. `Harness.probe` runs `imex-daemon check` as the readiness probe and writes the Pod's Ready
condition through the status subresource. No controller runs: by default the daemons take their
indices themselves (`--index-wait 0`); `Harness.assign_indices` plays the controller's index
assignment for tests of the default join (the controller's own is tested with the controller).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES
from cdriver.featuregates import ENV_FEATURE_GATES
from cdriver.imex import config as imex_config
from cdriver.imex import ctl as imex_ctl
from cdriver.imex import hosts as imex_hosts
from cdriver.imex.config import IMEX_CTL_BINARY, IMEXD_TEMPLATE_NAME
from cdriver.imex.names import DNS_NAME_PREFIX, UNUSED_SLOT_IP
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.imex_daemon.cli import ENV_IMEX_HOSTS_FILE, ENV_IMEXD_DIR
from cdriver.roles.imex_daemon.inputs import DEFAULT_HTTP_PORT
from cdriver.sim.imex.protocol import ENV_SIM_HOSTS_FILE
from tests.support.imex_timing import fast_imex_env
from tests.support.metrics import sample_value
from tests.support.waiting import wait_for

PODS, EVENTS = RESOURCES["pods"], RESOURCES["events"]
CLIQUES = COMPUTE_DOMAIN_CLIQUES
STANDIN_TIMING = fast_imex_env()


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
        #: the daemons' --index-wait: 0, they take their index themselves (no controller here)
        self.index_wait = "0"
        self._assigner: Any = None  # the Informer of `assign_indices`
        #: every index write the assigner made: (node, index)
        self.assigned: list[tuple[str, int]] = []

    # -- set-up ------------------------------------------------------------------------
    def add(self, clique: str, template: str | None = None, ip: str | None = None) -> Member:
        """A daemon pod on a new node; `ip`: its pod IP (default: the next unused one)."""
        suffix = uuid.uuid4().hex[:6]
        node = f"imex-{suffix}"
        self.nodes.append(self._register(self.raw, node, wait=False))
        if ip is None:
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
            # as the controller renders it: the pod IP, so daemons on one machine keep apart
            "HTTP_ENDPOINT": f"{m.ip}:{DEFAULT_HTTP_PORT}",
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
                 "--recheck-interval", "0.3", "--stop-grace", "3", "--index-wait", self.index_wait, *extra],
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

    def metric(self, m: Member, name: str, **labels: str) -> float | None:
        """A sample of m's metrics endpoint (None: not exported, or not served yet)."""
        try:
            return sample_value(f"http://{m.ip}:{DEFAULT_HTTP_PORT}/metrics", name, **labels)
        except OSError:
            return None

    def http_probe(self, m: Member, path: str) -> tuple[int, str]:
        """What m's endpoint answers a kubelet httpGet probe of `path`: (status, text)."""
        try:
            with urllib.request.urlopen(f"http://{m.ip}:{DEFAULT_HTTP_PORT}{path}", timeout=15) as resp:
                return resp.status, resp.read().decode().strip()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode().strip()

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

        return wait_for(lambda: f"entry of {m.node} {what or fields}\n--- daemon log:\n{m.log()[-3000:]}", matching,
                        timeout)

    def events(self, m: Member, reason: str) -> list[dict]:
        items = self.raw.list(EVENTS, self.ns)["items"]
        return [e for e in items if e.get("reason") == reason and e["involvedObject"].get("name") == m.pod_name]

    def assign_indices(self, clique: str) -> None:
        """Play the controller's part of a join: watch `clique` and give each entry without a
        valid index one, by the same pure function and the same optimistic update it uses (a
        conflict is followed by the newer object's event, which is decided again)."""
        from cdriver.imex.indices import assign_indices
        from cdriver.kube.errors import ApiError
        from cdriver.kube.informer import Informer

        self.index_wait = "60"  # the daemons wait for this assigner, never for themselves

        def decide(obj: dict) -> None:
            decided = assign_indices(list(obj.get("daemons") or []), self.max_nodes)
            if not decided.assigned:
                return
            try:
                self.raw.update(CLIQUES, {**obj, "daemons": decided.entries}, self.ns)
            except ApiError as exc:
                if exc.conflict or exc.not_found:
                    return
                raise
            self.assigned.extend(decided.assigned.items())

        name = constants.clique_object_name(self.cd_uid, clique)
        self._assigner = Informer(self.raw, CLIQUES, namespace=self.ns, field_selector=f"metadata.name={name}")
        self._assigner.add_handler(on_add=decide, on_update=lambda _old, obj: decide(obj))
        self._assigner.start()

    def cleanup(self) -> None:
        if self._assigner is not None:
            self._assigner.stop()
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
    """The daemon names of a hosts file that point at a daemon (unused slots left out)."""
    return {name: ip for name, ip in imex_hosts.parse_hosts(hosts.read_text()).items()
            if name.startswith(DNS_NAME_PREFIX) and ip != UNUSED_SLOT_IP}


def ready_and_reported(h: Harness, m: Member) -> dict:
    """Play kubelet until the probe passes, then wait for the entry to turn Ready."""
    wait_for(lambda: f"check of {m.node} to pass\n{m.log()[-3000:]}", lambda: h.probe(m), 30, interval=0.2)
    return h.wait_entry(m, status=constants.STATUS_READY)
