"""`imex-daemon run`: one loop that keeps clique membership, peer names, nvidia-imex and
readiness converged.

Watch events (clique or ComputeDomain, own pod), nvidia-imex exits, the self-probe and
SIGTERM all land in one queue; a single thread applies them and reconciles, so membership
writes never race each other inside the daemon. Every API write is resourceVersion-guarded.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES, COMPUTE_DOMAINS
from cdriver.errors import CdriverError
from cdriver.httpserve import LIVEZ, READYZ, STARTUPZ, HealthCheck, HttpServer
from cdriver.imex import config as imex_config
from cdriver.imex import ctl
from cdriver.imex.config import IMEX_DAEMON_BINARY, IMEXD_DIR
from cdriver.imex.hosts import HostsError
from cdriver.imex.names import UNUSED_SLOT_IP
from cdriver.imex.settings import describe_config
from cdriver.imex.supervisor import ProcessSupervisor, SupervisorError
from cdriver.kube.client import load_api_client
from cdriver.kube.errors import ApiError
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer
from cdriver.kube.objects import meta_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.imex_daemon.failures import (
    EVENT_REASON_IMEX_PORT_CONFLICT,
    EVENT_REASON_IMEX_RESTARTED,
    EVENT_REASON_IMEX_START_FAILED,
)
from cdriver.roles.startup import install_signal_handlers, rate_limiter

from . import clique, dnsnames, domain_status, failures, health, readiness
from .daemon_state import (
    Action,
    DaemonState,
    Event,
    ImexAnswered,
    ImexExited,
    ImexReady,
    MembersChanged,
    MembersDeleted,
    NamesChanged,
    PodChanged,
    PodDeleted,
    Started,
    Stop,
    next_actions,
)
from .inputs import Settings
from .metrics import RESTART_CONFIG_CHANGED, RESTART_EXITED, DaemonMetrics, DaemonViews

log = logging.getLogger(__name__)

COMPONENT = "compute-domain-daemon"
RESYNC_SECONDS = 240.0
REMOVE_DEADLINE = 10.0
#: Seconds between attempts to bind the metrics endpoint while its port is taken.
METRICS_BIND_RETRY_SECONDS = 5.0


class DaemonError(CdriverError):
    """The daemon cannot start (message says what and how to fix it)."""


class ImexReadyProbe:
    """After each (re)start of nvidia-imex, run `nvidia-imex-ctl -q` until it answers READY, then
    ask again every `recheck` seconds while that child runs (the pod's probes read the answers).

    Posts `on_answer(pid, ready)` for every answer of the child still running, and
    `on_ready(pid)` once per child; runs in its own thread so a slow ctl never blocks the
    daemon loop. Until the command port accepts connections only a cheap in-process connect is
    tried, so the ctl runs once the daemon can answer; a not-READY answer (e.g. still waiting
    for peers) backs the ctl off up to `maximum` seconds.
    """

    def __init__(self, probe: Callable[[], bool], current_pid: Callable[[], int | None],
                 on_ready: Callable[[int], None], port_open: Callable[[], bool] = lambda: True,
                 initial: float = 0.01, maximum: float = 1.0,
                 on_answer: Callable[[int, bool], None] = lambda _pid, _ready: None,
                 recheck: float = health.READY_RECHECK_SECONDS) -> None:
        self.probe = probe
        self.current_pid = current_pid
        self.on_ready = on_ready
        self.on_answer = on_answer
        self.port_open = port_open
        self.initial = initial
        self.maximum = maximum
        self.recheck = recheck
        self._armed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="imex-ready-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def arm(self) -> None:
        self._armed.set()

    def stop(self) -> None:
        self._stop.set()
        self._armed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._armed.wait()
            self._armed.clear()
            if self._until_ready():
                self._watch()

    def _ask(self, pid: int) -> bool:
        """Ask nvidia-imex; report the answer unless another child runs by then."""
        ready = self.probe()
        if self.current_pid() != pid:
            return False
        self.on_answer(pid, ready)
        return ready

    def _until_ready(self) -> bool:
        """Ask the current child until it answers READY (True), or stop (False)."""
        waiting, backoff = self.initial, self.initial
        while not self._stop.is_set():
            pid = self.current_pid()
            if pid is not None and self.port_open():
                if self._ask(pid):
                    self.on_ready(pid)
                    return True
                delay, backoff = backoff, min(self.maximum, backoff * 2)
            else:
                delay, waiting = waiting, min(0.25, waiting * 2)
            if self._stop.wait(delay):
                return False
        return False

    def _watch(self) -> None:
        """Ask the READY child again every `recheck` seconds until it is gone, a (re)start arms
        the probe anew, or it stops."""
        while not self._armed.wait(self.recheck):
            pid = self.current_pid()
            if pid is None:
                return  # exited: its restart arms the probe
            self._ask(pid)


def release_memory() -> None:
    """Collect start-up garbage and hand freed heap pages back to the OS (glibc only)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def port_accepts(ip: str, port: int, timeout: float = 0.2) -> bool:
    """True when a TCP connect to ip:port succeeds (the command service is listening)."""
    try:
        socket.create_connection((ip, port), timeout=timeout).close()
        return True
    except OSError:
        return False


class Daemon:
    """The long-running daemon of one ComputeDomain on one node."""

    def __init__(self, settings: Settings, raw: RawClient, *, echo: IO[str] | None = None,
                 initial_backoff: float = 1.0, probe_timeout: float = 5.0,
                 metrics: DaemonMetrics | None = None,
                 ready_recheck: float = health.READY_RECHECK_SECONDS) -> None:
        self.settings = settings
        self.raw = raw
        self.started_at = time.monotonic()
        self.inbox: queue.SimpleQueue[Event] = queue.SimpleQueue()  # put() is safe in signal handlers
        self.stopping = threading.Event()
        self.member = clique.Member(settings.node_name, settings.pod_ip, settings.clique_id)
        self.pod_ref = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": settings.pod_name, "namespace": settings.pod_namespace,
                                     "uid": settings.pod_uid}}
        self.echo = echo if echo is not None else sys.stderr
        self.initial_backoff = initial_backoff
        self.probe_timeout = probe_timeout
        self.state = DaemonState()
        self.store: clique.MembershipStore = self._membership_store()
        self.recorder = EventRecorder(raw, COMPONENT, host=settings.node_name)
        self.imex = ProcessSupervisor(
            [settings.imex_binary, "-c", str(settings.paths.config)], max_backoff=settings.max_backoff,
            initial_backoff=min(initial_backoff, settings.max_backoff), echo=self.echo,
            on_exit=lambda rc, expected: self._post(ImexExited(rc, expected)),
            name=IMEX_DAEMON_BINARY)
        self.prober = ImexReadyProbe(self._probe_once, lambda: self.imex.pid,
                                     lambda pid: self._post(ImexReady(pid)),
                                     port_open=self._command_service_up, recheck=ready_recheck,
                                     on_answer=lambda pid, ready: self._post(ImexAnswered(pid, ready,
                                                                                          time.monotonic())))
        #: notified after every turn of the loop: a waiting startup probe decides again
        self.health_changed = threading.Condition()
        self.watchers: list[Informer] = []
        self.ports: list[int] = []
        self.cmd_endpoint: tuple[str, int] | None = None  # where `nvidia-imex-ctl -q` connects
        #: (pod Ready, nvidia-imex READY, blocked) the entry's status was last decided from
        self.status_inputs: tuple[bool, bool, bool] | None = None
        #: since when this daemon's entry waits for the controller to assign its index, and until when
        self.index_wait_since: float | None = None
        self.index_deadline: float | None = None
        self.metrics = metrics or DaemonMetrics()
        self.metrics.bind(DaemonViews(
            ready=self.imex_ready, running=lambda: self.imex.running, starts=lambda: self.imex.starts,
            crash_restarts=lambda: self.imex.crash_restarts, spawn_failures=lambda: self.imex.spawn_failures,
            index=self.own_index, peers=self.peer_count))

    # --- inputs from other threads ----------------------------------------------------

    def request_stop(self, *_: object) -> None:
        """Begin graceful shutdown (signal handler safe)."""
        self.stopping.set()
        self.inbox.put(Stop())

    def _post(self, event: Event) -> None:
        self.inbox.put(event)

    # --- entry point ------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM; returns the process exit code."""
        settings = self.settings
        log.info("Starting IMEX daemon for ComputeDomain %s/%s (uid %s) on node %s, pod %s, IP %s, "
                 "clique %r; feature gates: %s", settings.cd_namespace, settings.cd_name, settings.cd_uid,
                 settings.node_name, settings.pod_key, settings.pod_ip, settings.clique_id,
                 settings.gates.to_env())
        self.label_pod()
        if not settings.clique_id:
            log.info("Clique ID is empty: this node is not NVLink fabric-attached, so no IMEX daemon "
                     "runs here; `check` succeeds as a no-op. Waiting for SIGTERM.")
            self.stopping.wait()
            log.info("Exiting")
            return 0
        self.prepare_files()
        self.start_watchers()
        try:
            self.loop()
        finally:
            self.shutdown()
        log.info("Exiting")
        return 0

    # --- start-up ---------------------------------------------------------------------

    def label_pod(self) -> None:
        """Label this pod with its clique ID (empty for non-fabric nodes), as the controller expects."""
        patch = {"metadata": {"labels": {constants.LABEL_CLIQUE_ID: self.settings.clique_id}}}
        for attempt in range(1, 8):
            try:
                self.raw.patch(RESOURCES["pods"], self.settings.pod_name, patch, namespace=self.settings.pod_namespace)
                return
            except ApiError as exc:
                if not exc.unavailable or attempt == 7:
                    raise DaemonError(
                        f"cannot label pod {self.settings.pod_key} with {constants.LABEL_CLIQUE_ID}: {exc}; check that "
                        "POD_NAME/POD_NAMESPACE name this pod and that the service account may patch pods"
                    ) from None
                log.info("labelling pod %s: %s (attempt %d)", self.settings.pod_key, exc, attempt)
                if self.stopping.wait(clique.backoff_delay(attempt, base=0.2, cap=3.0)):
                    return

    def prepare_files(self) -> None:
        """Render imexd.cfg from the template the plugin placed; write the static nodes.cfg."""
        paths = self.settings.paths
        if not paths.template.is_file():
            raise DaemonError(
                f"IMEX config template {paths.template} does not exist: the kubelet plugin writes it "
                f"when it prepares the daemon claim and CDI mounts it at {IMEXD_DIR}; check the "
                "plugin's log on this node and that the container runtime applied the claim's CDI edits"
            )
        template = imex_config.load_template(paths.template)
        try:
            text = imex_config.render_config(template, str(paths.nodes_config), self.settings.pod_ip,
                                             source=str(paths.template))
        except imex_config.ImexConfigError as exc:
            raise DaemonError(f"cannot render the IMEX config: {exc}") from None
        imex_config.write_file_atomic(paths.config, text)
        values = imex_config.parse_config(text)
        self.ports = failures.imex_ports(values)
        cmd_port = failures.command_port(values)
        bind_ip = values.get("IMEX_CMD_BIND_INTERFACE_IP") or self.settings.pod_ip
        self.cmd_endpoint = (bind_ip, cmd_port) if cmd_port else None
        if self.settings.dns_names:
            imex_config.write_file_atomic(
                paths.nodes_config, dnsnames.static_nodes_config(self.settings.cd_uid, self.settings.max_nodes))
        failures.clear_state(paths.state)
        log.info("Wrote %s (command service on %s; %s) and %s", paths.config, self.settings.pod_ip,
                 describe_config(values), paths.nodes_config)

    def _membership_store(self) -> clique.MembershipStore:
        """Where this node's entry lives: its clique object, or (legacy) the ComputeDomain status."""
        settings = self.settings
        if settings.cliques:
            return clique.CliqueStore(
                self.raw, settings.pod_namespace, settings.clique_name, settings.cd_uid, settings.clique_id,
                clique.pod_owner_reference(settings.pod_name, settings.pod_uid))
        return domain_status.DomainStatusStore(self.raw, settings.cd_namespace, settings.cd_name, settings.cd_uid)

    def start_watchers(self) -> None:
        settings = self.settings
        if settings.cliques:
            members = Informer(self.raw, COMPUTE_DOMAIN_CLIQUES, namespace=settings.pod_namespace,
                               field_selector=f"metadata.name={settings.clique_name}",
                               resync_seconds=RESYNC_SECONDS)
        else:
            members = Informer(self.raw, COMPUTE_DOMAINS, namespace=settings.cd_namespace,
                               field_selector=f"metadata.name={settings.cd_name}", resync_seconds=RESYNC_SECONDS)
        members.add_handler(on_add=lambda o: self._post(MembersChanged(o)),
                            on_update=lambda _old, o: self._post(MembersChanged(o)),
                            on_delete=lambda o: self._post(MembersDeleted(o)))
        pods = readiness.PodWatcher(self.raw, settings.pod_namespace, settings.pod_name,
                                    lambda p: self._post(PodChanged(p)), resync_seconds=RESYNC_SECONDS)
        pods.informer.add_handler(on_delete=lambda p: self._post(PodDeleted(p)))
        self.prober.start()
        self.watchers = [members, pods.informer]
        for informer in self.watchers:
            informer.start()
        self._post(Started())

    def _command_service_up(self) -> bool:
        return self.cmd_endpoint is None or port_accepts(*self.cmd_endpoint)

    def _probe_once(self) -> bool:
        result = ctl.probe_ready(self.settings.ctl_binary, config_path=str(self.settings.paths.config),
                                 timeout=self.probe_timeout)
        return readiness.probe_passed(result.returncode, result.output)

    # --- the loop -----------------------------------------------------------------------

    def _timeout(self) -> float | None:
        deadlines = [t for t in (self.state.retry_at, self.state.recheck_at if self._waiting_recheck() else None,
                                 self.index_deadline) if t is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _waiting_recheck(self) -> bool:
        return bool(self.state.blocked or self.state.start_error) and not self.imex.active

    def _next_events(self) -> list[Event]:
        """Wait for one event (or the next retry/recheck deadline), then take all queued ones."""
        try:
            events = [self.inbox.get(timeout=self._timeout())]
        except queue.Empty:
            events = []
        while True:
            try:
                events.append(self.inbox.get_nowait())
            except queue.Empty:
                return events

    def loop(self) -> None:
        while True:
            events = self._next_events()
            for event in events:
                if isinstance(event, Stop):
                    return
                try:
                    self.apply(event)
                except Exception:  # a bug must not take the node out of its domain
                    log.exception("handling %s failed", type(event).__name__)
            now = time.monotonic()
            # an answer of nvidia-imex only feeds the pod's probes: nothing to reconcile
            if any(not isinstance(event, ImexAnswered) for event in events) or \
                    (self.state.retry_at is not None and now >= self.state.retry_at) or \
                    (self._waiting_recheck() and now >= self.state.recheck_at) or \
                    (self.index_deadline is not None and now >= self.index_deadline):
                self.reconcile_safely()
            with self.health_changed:
                self.health_changed.notify_all()

    def apply(self, event: Event) -> None:
        """Record what an event says (`next_actions`) and run its effects; `reconcile` acts on it."""
        self.state, steps = next_actions(self.state, event, self.imex.pid)
        log.debug("daemon event %s: %s", type(event).__name__,
                  ", ".join(step.action.value for step in steps) or "no action")
        for step in steps:
            match step.action:
                case Action.OBSERVE_MEMBERS:
                    self.store.observe(step.obj)
                case Action.FORGET_MEMBERS:
                    self.store.forget()
                    if self.domain_ending():
                        self.state.domain_ended = True
                        log.info("%s was deleted with its ComputeDomain; not joining again", self.store.description)
                    else:
                        log.info("%s was deleted; joining again", self.store.description)
                case Action.LOG_READY:
                    log.info("nvidia-imex (pid %d) answers READY", step.pid)
                case Action.RELOAD:
                    self._reload()
                case Action.RESTART:
                    self.restart_for_new_index(step.old_index, step.new_index)
                case Action.REPORT_EXIT:
                    self.report_exit(step.returncode, step.was_ready)

    def reconcile_safely(self) -> None:
        try:
            self.reconcile()
        except Exception as exc:
            expected = (ApiError, clique.RetriesExhausted, clique.IndexExhausted, domain_status.DomainMissing,
                        HostsError, imex_config.ImexConfigError, OSError)
            if not isinstance(exc, expected):
                log.exception("unexpected reconcile failure")
            self.state.failures += 1
            delay = clique.backoff_delay(self.state.failures, base=0.05, cap=6.0)
            self.state.retry_at = time.monotonic() + delay
            message = str(exc)
            level = logging.WARNING if message != self.state.last_error else logging.INFO
            log.log(level, "reconcile failed (attempt %d, retrying in %.2fs): %s", self.state.failures, delay, message)
            self.state.last_error = message
            return
        self.state.failures = 0
        self.state.retry_at = None
        self.state.last_error = ""

    def domain_ending(self) -> bool:
        """True when this daemon's ComputeDomain is gone, replaced, or being deleted."""
        try:
            cd = self.raw.get_or_none(COMPUTE_DOMAINS, self.settings.cd_name,
                                      namespace=self.settings.cd_namespace)
        except ApiError as exc:
            log.info("cannot read ComputeDomain %s/%s (%s); assuming it still exists", self.settings.cd_namespace,
                     self.settings.cd_name, exc)
            return False
        meta = meta_of(cd)
        return cd is None or meta.get("uid") != self.settings.cd_uid or bool(meta.get("deletionTimestamp"))

    def reconcile(self) -> None:
        if self.state.domain_ended:
            return
        obj = self.join()
        if obj is None:  # joining creates a missing object, so this does not happen
            return
        entries = self.store.entries(obj)
        if self.own_index() is not None:
            self.metrics.index_assigned(time.monotonic() - self.started_at)
        if self.settings.dns_names:
            self.sync_names(entries)
        else:
            self.sync_ips(obj, entries)
        self.sync_status()

    def assigned_centrally(self) -> bool:
        """Whether this daemon writes only its own entry and the controller assigns its index
        (clique objects, `--index-wait` above 0); otherwise it takes the lowest free index itself."""
        return isinstance(self.store, clique.CliqueStore) and self.settings.index_wait > 0

    def join(self) -> dict | None:
        """This node's entry in the membership list, written when missing or outdated."""
        key = self.store.key
        if not self.assigned_centrally():
            return self.take_index()
        obj = self.store.current() or self.store.refresh()
        entries = self.store.entries(obj)
        if obj is None or clique.entry_outdated(entries, self.member, key) or self.store.needs_write(obj):
            # a restarted daemon keeps the status its entry has until sync_status decides again
            status = clique.entry_status(clique.find_entry(entries, self.member.node_name, key))
            obj = self.write_own_entry(status or constants.STATUS_NOT_READY)
        if self.own_index() is not None:
            self.index_wait_since = self.index_deadline = None
            return obj
        now = time.monotonic()
        if self.index_wait_since is None:
            self.index_wait_since = now
        deadline = self.index_wait_since + self.settings.index_wait
        if now < deadline:
            self.index_deadline = deadline  # the controller's assignment arrives on the watch
            return obj
        log.warning("No index assigned to node %s in %s %.0f s after joining (is the controller running?); "
                    "taking the lowest free index", self.settings.node_name, self.store.description,
                    self.settings.index_wait)
        self.index_deadline = None
        return self.take_index()

    def take_index(self) -> dict | None:
        """Write this node's entry with the lowest free index (optimistic update, retried on conflict)."""
        key = self.store.key
        return clique.update_with_retry(
            self.store, lambda entries: clique.upsert_entry(entries, self.member, self.settings.max_nodes, key),
            sleep=self.stopping.wait, what="join", on_write=self.metrics.clique_write)

    def write_own_entry(self, status: str) -> dict:
        """Apply this node's own entry (see `CliqueStore.apply_entry`), counted as a clique write."""
        assert isinstance(self.store, clique.CliqueStore)
        try:
            out = self.store.apply_entry(self.member, status)
        except ApiError as exc:
            self.metrics.clique_write(clique.WRITE_CONFLICT if exc.conflict else clique.WRITE_ERROR)
            raise
        self.metrics.clique_write(clique.WRITE_OK)
        return out

    # --- peers ----------------------------------------------------------------------------

    def sync_names(self, entries: list[dict]) -> None:
        """DNS-name mode: hosts block for this clique's members; SIGUSR1 on change."""
        settings = self.settings
        mapping, problems = dnsnames.dns_mapping(entries, settings.clique_id, settings.cd_uid, settings.max_nodes)
        if problems != self.state.last_problems:
            for problem in problems:
                log.warning("clique %s: %s; that member gets no name", settings.clique_name, problem)
            self.state.last_problems = problems
        if mapping != self.state.mapping:
            dnsnames.update_hosts_file(settings.paths.hosts_file,
                                       dnsnames.hosts_block(settings.cd_uid, settings.max_nodes, mapping))
            log.info("Peer names in %s: %s (the other %d of %d slots -> %s)", settings.paths.hosts_file,
                     dnsnames.describe_mapping(mapping), settings.max_nodes - len(mapping), settings.max_nodes,
                     UNUSED_SLOT_IP)
            self.state.mapping = mapping
            # A reload, a reload once READY (a signal during start-up kills it), or a restart
            # when this daemon's own index changed (nvidia-imex keeps the ID it started with).
            self.apply(NamesChanged(dnsnames.own_index(entries, settings.node_name, mapping, settings.cd_uid,
                                                       self.store.key)))
        if settings.pod_ip in mapping.values() and not self.imex.active:
            self.start_imex()

    def _reload(self) -> None:
        try:
            self.imex.reload()
            self.state.reloads += 1
            log.info("Sent SIGUSR1 to nvidia-imex (pid %s) to re-resolve its peers", self.imex.pid)
        except SupervisorError as exc:
            log.info("peer change not signalled (%s); the next start reads the new names", exc)

    def restart_for_new_index(self, old: int | None, new: int | None) -> None:
        """Restart nvidia-imex, whose node ID is its old index, and say so on the pod (Event)."""
        message = (f"this daemon's index in clique {self.settings.clique_name} changed from {old} to {new}: "
                   f"restarting nvidia-imex (pid {self.imex.pid}), which reads its own node ID only at start "
                   "(a SIGUSR1 would keep the old one, and workloads would see invalid resource handles)")
        log.warning("%s", message)
        self.recorder.normal(self.pod_ref, EVENT_REASON_IMEX_RESTARTED, failures.truncate_event_message(message))
        try:
            self.imex.restart(self.settings.stop_grace)
        except SupervisorError as exc:
            log.error("%s", exc)
            self.recorder.warning(self.pod_ref, EVENT_REASON_IMEX_START_FAILED, f"{exc}")
            self.state.start_error = f"{exc}"
            self.state.recheck_at = time.monotonic() + self.settings.recheck_seconds
            return
        self.metrics.restarted(RESTART_CONFIG_CHANGED)
        self.prober.arm()

    def sync_ips(self, cd: dict, entries: list[dict]) -> None:
        """IP mode: nodes.cfg of this clique's IPs once numNodes have joined; restart on change."""
        complete, seen, want = domain_status.peers_complete(cd, entries)
        if not complete:
            line = f"numNodes: {want}, nodes seen: {seen}"
            if line != self.state.last_wait_log:
                log.info("Waiting for all nodes of the ComputeDomain to join (%s)", line)
                self.state.last_wait_log = line
            return
        ips = domain_status.peer_ips(entries, self.settings.clique_id)
        if ips != self.state.ip_peers:
            imex_config.write_file_atomic(self.settings.paths.nodes_config, domain_status.ip_nodes_config(ips))
            log.info("Wrote %s: %s", self.settings.paths.nodes_config, ", ".join(ips) or "empty")
            self.state.ip_peers = ips
            if self.imex.active:
                log.info("Restarting nvidia-imex for the new peer list")
                self.imex.restart(self.settings.stop_grace)
                self.metrics.restarted(RESTART_CONFIG_CHANGED)
                self.state.ready_pid = None
                self.prober.arm()
        if self.settings.pod_ip in ips and not self.imex.active:
            self.start_imex()

    # --- nvidia-imex -----------------------------------------------------------------------

    def start_imex(self) -> None:
        """Start nvidia-imex unless another process holds its port (then say who and how to fix)."""
        now = time.monotonic()
        if (self.state.blocked or self.state.start_error) and now < self.state.recheck_at:
            return
        holder = failures.find_port_holder(self.settings.pod_ip, self.ports)
        if holder is not None:
            self.metrics.start_held_back()
            self.block(failures.port_conflict_message(self.settings.pod_ip, holder))
            return
        self.unblock()
        started_before = self.imex.starts > 0
        try:
            self.imex.start()
        except SupervisorError as exc:
            message = f"{exc}"
            if message != self.state.start_error:
                log.error("%s", message)
                self.recorder.warning(self.pod_ref, EVENT_REASON_IMEX_START_FAILED, message)
            self.state.start_error = message
            self.state.recheck_at = now + self.settings.recheck_seconds
            return
        if started_before:  # held back after an exit (port conflict, failed start): started again
            self.metrics.restarted(RESTART_EXITED)
        self.state.start_error = None
        self.state.ready_pid = None
        self.state.reload_pending = False
        self.state.imex_index = self.state.own_index  # what it reads from the hosts file now
        self.prober.arm()

    def block(self, message: str) -> None:
        """Hold nvidia-imex back while its port is taken; tell the user and the probe."""
        if message != self.state.blocked:
            log.error("%s", message)
            self.recorder.warning(self.pod_ref, EVENT_REASON_IMEX_PORT_CONFLICT,
                                  failures.truncate_event_message(message))
            failures.write_state(self.settings.paths.state, failures.PHASE_PORT_CONFLICT, message)
        self.state.blocked = message
        self.state.recheck_at = time.monotonic() + self.settings.recheck_seconds
        if self.imex.active:
            self.imex.stop(self.settings.stop_grace)
        self.state.ready_pid = None

    def unblock(self) -> None:
        if self.state.blocked:
            log.info("IMEX ports on %s are free now; starting nvidia-imex", self.settings.pod_ip)
            failures.clear_state(self.settings.paths.state)
            self.state.blocked = None

    def report_exit(self, rc: int, was_ready: bool) -> None:
        """nvidia-imex exited unexpectedly: a port conflict blocks it, else say why, then probe anew."""
        lines = self.imex.last_output_lines(10)
        restarts = self.imex.restart_count
        if not was_ready:
            self.metrics.exited_before_ready()
            holder = failures.find_port_holder(self.settings.pod_ip, self.ports)
            if holder is not None:
                self.block(failures.port_conflict_message(self.settings.pod_ip, holder))
                return
            message = failures.startup_failure_message(rc, restarts, lines)
            reason = EVENT_REASON_IMEX_START_FAILED
        else:
            message = failures.crash_message(rc, restarts, lines)
            reason = EVENT_REASON_IMEX_RESTARTED
        log.warning("%s", message)
        self.recorder.warning(self.pod_ref, reason, failures.truncate_event_message(message))
        self.prober.arm()

    # --- readiness ----------------------------------------------------------------------------

    def health_view(self) -> health.HealthView:
        """What the pod's probes decide from, now (read from other threads: one state snapshot)."""
        state = self.state
        return health.HealthView(in_clique=bool(self.settings.clique_id), stopping=self.stopping.is_set(),
                                 blocked=state.blocked, imex_pid=self.imex.pid, ready_pid=state.ready_pid,
                                 answer=state.answer, now=time.monotonic())

    def health_checks(self, startup_wait: float = health.STARTUP_WAIT_SECONDS) -> dict[str, HealthCheck]:
        """The probe paths the HTTP endpoint serves; ``/startupz`` holds a request up to
        ``startup_wait`` seconds until READY (or a port conflict) instead of failing at once."""
        def startup() -> health.Verdict:
            def settled() -> bool:
                view = self.health_view()
                return health.startup(view)[0] or bool(view.blocked)

            with self.health_changed:
                self.health_changed.wait_for(settled, timeout=startup_wait)
            return health.startup(self.health_view())

        return {READYZ: lambda: health.readiness(self.health_view()),
                LIVEZ: lambda: health.liveness(self.health_view()),
                STARTUPZ: startup}

    def imex_ready(self) -> bool:
        return self.state.ready_pid is not None and self.state.ready_pid == self.imex.pid

    def own_index(self) -> int | None:
        """This daemon's index in its clique as last written or seen (None: no entry yet)."""
        mine = clique.find_entry(self.store.entries(self.store.current()), self.settings.node_name, self.store.key)
        return None if mine is None else clique.entry_index(mine)

    def peer_count(self) -> int:
        """Peers nvidia-imex is configured with: named in the hosts file, or listed in nodes.cfg."""
        if self.settings.dns_names:
            return len(self.state.mapping or {})
        return len(self.state.ip_peers or [])

    def sync_status(self) -> None:
        key = self.store.key
        mine = clique.find_entry(self.store.entries(self.store.current()), self.settings.node_name, key)
        if mine is None:
            return
        inputs = (readiness.pod_is_ready(self.state.pod), self.imex_ready(), bool(self.state.blocked))
        want = readiness.desired_status(*inputs)
        if clique.entry_status(mine) == want:
            if inputs != self.status_inputs:
                # the decision not to write, said once per change of what it is made from
                log.info("Entry of node %s in %s stays %s (%s)", self.settings.node_name, self.store.description,
                         want, readiness.describe_inputs(*inputs))
                self.status_inputs = inputs
            return
        self.status_inputs = inputs
        # While stopping (often because the domain is being deleted), never recreate the object.
        node_name = self.settings.node_name
        create = not (self.stopping.is_set() or self.state.domain_ended)
        if create and self.assigned_centrally():
            self.write_own_entry(want)
            log.info("Entry of node %s in %s is now %s", self.settings.node_name, self.store.description, want)
            self._after_status(want)
            return
        out = clique.update_with_retry(self.store, lambda e: clique.set_entry_status(e, node_name, want, key),
                                       sleep=self.stopping.wait, what="status update",
                                       create_missing=create,
                                       on_write=self.metrics.clique_write)
        if out is None:
            return
        log.info("Entry of node %s in %s is now %s", self.settings.node_name, self.store.description, want)
        self._after_status(want)

    def _after_status(self, want: str) -> None:
        if want == constants.STATUS_READY and not self.state.trimmed:
            self.state.trimmed = True
            release_memory()  # start-up is over: drop its garbage once

    # --- shutdown -------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop nvidia-imex, leave the clique (by node name), stop watching."""
        self.prober.stop()
        self.imex.stop(self.settings.stop_grace)
        self.leave()
        for informer in self.watchers:
            informer.stop()
        failures.clear_state(self.settings.paths.state)

    def leave(self) -> None:
        deadline = time.monotonic() + REMOVE_DEADLINE

        def sleep(delay: float) -> None:
            if time.monotonic() + delay > deadline:
                raise clique.RetriesExhausted(f"removal did not finish within {REMOVE_DEADLINE:g}s")
            time.sleep(delay)

        key = self.store.key
        try:
            if self.store.current() is None and self.store.refresh() is None:
                return
            if clique.find_entry(self.store.entries(self.store.current()), self.settings.node_name, key) is None:
                return
            # The domain may be deleted already (the controller removes its cliques): then there
            # is nothing to leave, and the object must not be created again.
            clique.update_with_retry(self.store, lambda e: clique.remove_entry(e, self.settings.node_name, key),
                                     sleep=sleep, what="leave", create_missing=False,
                                     on_write=self.metrics.clique_write)
        except (ApiError, clique.RetriesExhausted, domain_status.DomainMissing) as exc:
            log.warning("could not remove node %s from %s: %s; the controller drops stale entries",
                        self.settings.node_name, self.store.description, exc)
            return
        log.info("Successfully removed daemon of node %s (IP %s) from %s (from ComputeDomain %s/%s)",
                 self.settings.node_name, self.settings.pod_ip, self.store.description, self.settings.cd_namespace,
                 self.settings.cd_name or self.settings.cd_uid)


#: (connect, read) timeout of API requests: short enough that leaving the clique fits into
#: the pod's termination grace period even when the API server hangs.
API_TIMEOUT = (5.0, 15.0)


class MetricsEndpoint:
    """Serves the daemon's metrics and its pod's probes (`Daemon.health_checks`); while the port
    is taken (e.g. by the daemon pod of another domain that is still leaving the node) it tries
    again in the background: the pod's probes fail meanwhile (the pod is not started or not
    Ready), but the daemon joins its clique and runs nvidia-imex all the same."""

    def __init__(self, endpoint: str, metrics_path: str, metrics: DaemonMetrics,
                 retry_seconds: float = METRICS_BIND_RETRY_SECONDS,
                 checks: dict[str, HealthCheck] | None = None) -> None:
        self.endpoint = endpoint
        self.metrics_path = metrics_path
        self.metrics = metrics
        self.retry_seconds = retry_seconds
        self.checks = checks or {}
        self.server: HttpServer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="metrics-endpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        warned = False
        while not self._stop.is_set():
            try:
                server = HttpServer(self.endpoint, self.metrics.registry, self.metrics_path, checks=self.checks)
            except OSError as exc:
                if not warned:
                    log.warning("cannot serve metrics on --http-endpoint %s (%s); trying again every %gs",
                                self.endpoint, exc, self.retry_seconds)
                    warned = True
                self._stop.wait(self.retry_seconds)
                continue
            server.start()
            self.server = server
            log.info("serving metrics on %s at %s%s", self.endpoint, self.metrics_path or "(none)",
                     f" and probes at {', '.join(sorted(self.checks))}" if self.checks else "")
            return

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop()


def run(settings: Settings) -> int:
    """Build the API client, serve metrics and probes, and run the daemon until SIGTERM."""
    metrics = DaemonMetrics()
    raw = RawClient(load_api_client(settings.kubeconfig), timeout=API_TIMEOUT,
                    rate_limiter=rate_limiter(settings.kube_api_qps, settings.kube_api_burst),
                    metrics=metrics.api_client)
    daemon = Daemon(settings, raw, metrics=metrics)
    install_signal_handlers(daemon.request_stop)  # SIGTERM (kubelet) or SIGINT stop gracefully
    endpoint = None
    if settings.http_endpoint:
        endpoint = MetricsEndpoint(settings.http_endpoint, settings.metrics_path, metrics,
                                   checks=daemon.health_checks())
        endpoint.start()
    try:
        return daemon.run()
    finally:
        if endpoint is not None:
            endpoint.stop()
