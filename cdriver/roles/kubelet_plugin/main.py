"""Start-up, serving and shutdown of the kubelet plugin.

Order: validate settings → discover the driver → base CDI spec → checkpoint → caches synced →
DRA socket → registration socket (kubelet never sees an endpoint that does not serve) →
sweeps, health, metrics → ResourceSlice. Shutdown first lets the calls in flight finish (up to
the shutdown grace), then removes the registration socket, then the rest: kubelet closes its
connection when the registration goes, which would cut a call off.

Two instances may serve one node at once (a rolling update with per-pod sockets, see
`instances`); everything they share goes through the checkpoint lock, and an instance that
stops leaves the node's clique label to the other.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cdriver.api import constants
from cdriver.api.resources import COMPUTE_DOMAIN_CLIQUES
from cdriver.cdi.writer import write_spec
from cdriver.checkpoint import CheckpointStore, CorruptCheckpoint
from cdriver.dra import health, node_service, registration, sockets
from cdriver.dra.resource_health import HEALTH_SERVICE_VERSIONS, HealthFeed, health_registrations
from cdriver.errors import CdriverError
from cdriver.httpserve import HttpServer
from cdriver.imex.config import ImexConfigError, domain_template, load_template
from cdriver.kube.client import load_api_client
from cdriver.kube.errors import ApiError
from cdriver.kube.events import EventRecorder
from cdriver.kube.informer import Informer
from cdriver.kube.objects import uid_of
from cdriver.kube.raw import RawClient
from cdriver.kube.resources import RESOURCES
from cdriver.roles.kubelet_plugin import cdi_edits
from cdriver.roles.kubelet_plugin.binding import Binder
from cdriver.roles.kubelet_plugin.cleanup import Sweeper
from cdriver.roles.kubelet_plugin.clique_refresh import CliqueRefresher
from cdriver.roles.kubelet_plugin.config import PluginConfig
from cdriver.roles.kubelet_plugin.devices import published_devices
from cdriver.roles.kubelet_plugin.discovery import NodeDiscovery, base_device_nodes, discover, read_clique_id
from cdriver.roles.kubelet_plugin.domains import DomainWatches
from cdriver.roles.kubelet_plugin.driver import ComputeDomainDriver
from cdriver.roles.kubelet_plugin.health_monitor import HealthMonitor
from cdriver.roles.kubelet_plugin.instances import other_live_instances, remove_dead_instances
from cdriver.roles.kubelet_plugin.metrics import REBUILD_CORRUPT, REBUILD_MISSING, PluginMetrics
from cdriver.roles.kubelet_plugin.prepare import remove_orphan_specs
from cdriver.roles.kubelet_plugin.recovery import recover
from cdriver.roles.kubelet_plugin.resourceslice import SlicePublisher, slice_field_selector
from cdriver.roles.kubelet_plugin.state import BackgroundEvents, PluginState
from cdriver.roles.kubelet_plugin.status_writer import ClaimStatusWriter
from cdriver.roles.startup import STOP_SIGNALS, install_signal_handlers, rate_limiter

log = logging.getLogger(__name__)

COMPONENT = "cdriver-kubelet-plugin"
SYNC_TIMEOUT = 60.0


def clique_informer(raw: RawClient, namespace: str, clique_id: str) -> Informer:
    """The ComputeDomainCliques of this node's clique only (by their clique label): a clique
    object's changes then reach the plugins of its own rack, not every plugin in the cluster."""
    selector = f"{constants.LABEL_CLIQUE_ID}={clique_id}" if clique_id else None
    return Informer(raw, COMPUTE_DOMAIN_CLIQUES, namespace=namespace, label_selector=selector)


#: How long a readiness check waits for kubelet's registration before it answers "not ready"
#: (the first check comes right after the start, usually a moment before kubelet's answer; the
#: probe's timeout is 10 s)
READY_WAIT = 5.0


def registered_within(state: registration.RegistrationState, seconds: float) -> bool:
    """Whether kubelet has confirmed the registration, waiting up to `seconds` for it."""
    deadline = time.monotonic() + seconds
    while not state.registered and time.monotonic() < deadline:
        time.sleep(0.1)
    return state.registered


class StartupError(CdriverError):
    """The plugin cannot start; the message says what to fix."""


@dataclass
class Plugin:
    """A running plugin: `start()`, then `wait()` or `stop()`."""

    config: PluginConfig
    raw: RawClient | None = None
    state: PluginState | None = None
    driver: ComputeDomainDriver | None = None
    registration: registration.RegistrationServicer | None = None
    health_port: int | None = None
    _servers: list[tuple[grpc.Server, Path | None]] = field(default_factory=list)
    _informers: list[Informer] = field(default_factory=list)
    _binder: Binder | None = None
    _sweeper: Sweeper | None = None
    _clique_refresher: CliqueRefresher | None = None
    _slices: SlicePublisher | None = None
    _health: HealthMonitor | None = None
    health_feed: HealthFeed | None = None
    _metrics_server: HttpServer | None = None
    inflight: node_service.InFlight = field(default_factory=node_service.InFlight)
    _stopped: threading.Event = field(default_factory=threading.Event)

    # -- start ---------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        try:
            cfg.plugin_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
            cfg.cdi_root.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(
                f"cannot create the plugin directories ({exc}); check --kubelet-plugins-directory-path and --cdi-root"
            ) from None
        if not cfg.cdi_root.is_dir():
            raise StartupError(f"--cdi-root {cfg.cdi_root} is not a directory")
        if not cfg.host_managed:  # every daemon claim would fail on it later, far from the cause
            try:
                domain_template(load_template(cfg.imex_config_template), settings=cfg.imex_settings)
            except ImexConfigError as exc:
                raise StartupError(f"{exc}; fix --imex-config-template or the IMEX settings") from None
        found = discover(cfg)
        self._write_base_spec(found)
        store = CheckpointStore(cfg.checkpoint_path)
        lost, lost_reason = self._open_checkpoint(store)
        checkpoint = store.read()
        log.info("checkpoint %s: %d claims", cfg.checkpoint_path, len(checkpoint.claims))

        metrics = PluginMetrics(cfg.node_name)
        raw = self.raw or RawClient(load_api_client(cfg.kubeconfig),
                                    rate_limiter=rate_limiter(cfg.kube_api_qps, cfg.kube_api_burst),
                                    metrics=metrics.api_client)
        self.raw = raw
        # each domain a claim here names is watched alone (never every domain of the cluster)
        domains = DomainWatches(raw)
        cliques = None
        if cfg.use_cliques and not cfg.host_managed:
            cliques = clique_informer(raw, cfg.namespace, found.clique_id)
        node = Informer(raw, RESOURCES["nodes"], field_selector=f"metadata.name={cfg.node_name}")
        slices = Informer(raw, RESOURCES["resourceslices"], field_selector=slice_field_selector(cfg.node_name))
        # every claim: those allocated here cannot be selected on the server (gate only)
        claims_watch = Informer(raw, RESOURCES["resourceclaims"]) if cfg.binding_conditions else None
        state = PluginState(
            config=cfg,
            discovery=found,
            raw=raw,
            store=store,
            domains=domains,
            cliques=cliques,
            node=node,
            metrics=metrics,
            events=BackgroundEvents(EventRecorder(raw, COMPONENT, cfg.node_name)),
            claim_status=ClaimStatusWriter(raw, cfg.node_name),
        )
        self.state = state
        state.refresh_prepared_gauge(checkpoint.claims)
        for inf in (domains, cliques, node):
            if inf is not None:
                inf.add_handler(
                    on_add=state.notifier.notify, on_update=state.notifier.notify, on_delete=state.notifier.notify
                )
        self._informers = [i for i in (cliques, node, slices, claims_watch) if i is not None]
        for inf in self._informers:
            inf.start()
        for inf in self._informers:
            if not inf.wait_synced(SYNC_TIMEOUT):
                raise StartupError(
                    f"could not list {inf.name} from the API server {raw.server} within "
                    f"{SYNC_TIMEOUT:.0f}s; check connectivity and the plugin's RBAC"
                )
        if node.get_by_name(cfg.node_name) is None:
            raise StartupError(
                f"node {cfg.node_name!r} does not exist in the cluster; set --node-name / NODE_NAME to this node's name"
            )

        if lost:
            try:
                rebuilt = recover(state, lost)
            except (ApiError, CdriverError) as exc:
                raise StartupError(
                    f"{lost}; rebuilding it needs the ResourceClaims from the API server, which failed ({exc}). "
                    "No CDI spec was removed; the plugin retries on its next start"
                ) from None
            if rebuilt is not None:
                metrics.checkpoint_rebuilds.labels(lost_reason).inc()
        remove_orphan_specs(state)  # before serving: no Prepare can be half-way now
        self.driver = ComputeDomainDriver(state)
        # the devices' health, streamed to kubelet on the DRA socket (kubelet 1.36+ shows it in pod status)
        self.health_feed = HealthFeed()
        self._health = HealthMonitor(state, self.health_feed).start()
        state.claims_changed = self._health.poke
        remove_dead_instances(cfg.registrar_dir, cfg.plugin_dir, cfg.pod_uid)
        dra = node_service.serve_node_service(cfg.dra_socket, self.driver, max_workers=cfg.grpc_workers,
                                              extra=health_registrations(self.health_feed), inflight=self.inflight)
        self._servers.append((dra, cfg.dra_socket))
        self.registration = registration.RegistrationServicer(
            constants.DRIVER_NAME, str(cfg.dra_socket),
            versions=(*registration.DRA_SERVICE_VERSIONS, *HEALTH_SERVICE_VERSIONS))
        reg = registration.serve_registration(cfg.registration_socket, self.registration)
        self._servers.insert(0, (reg, cfg.registration_socket))

        self._sweeper = Sweeper(state, self.driver.unpreparer.unprepare, cfg.cleanup_interval)
        state.wake_sweeper = self._sweeper.wake
        domains.add_handler(on_delete=lambda _cd: state.wake_sweeper())
        self._sweeper.start()
        if cfg.healthcheck_port >= 0:
            reg_state = self.registration.state
            server, port = health.serve_health_tcp(
                cfg.healthcheck_port,
                lambda: health.probe_plugin_sockets(cfg.registration_socket, cfg.dra_socket, timeout=5),
                host=health.listen_host(cfg.healthcheck_address),
                ready=lambda: "" if registered_within(reg_state, READY_WAIT) else
                "kubelet has not confirmed the registration yet",
            )
            self.health_port = port
            self._servers.append((server, None))
        if cfg.http_endpoint and cfg.metrics_path:
            self._serve_metrics(metrics)

        self._slices = SlicePublisher(
            raw,
            slices,
            cfg.node_name,
            lambda: uid_of(state.node_object()),
            published_devices(cfg.host_managed),
            on_error=metrics.slice_publish_errors.inc,
            share_channels=cfg.share_channels and not cfg.host_managed,
            binding_conditions=cfg.binding_conditions,
        )
        if claims_watch is not None:
            self._binder = Binder(cfg.node_name, claims_watch, self.driver.preparer.binding_hooks(),
                                  cfg.binding_timeout)
            for inf in (domains, cliques, node):
                if inf is not None:
                    inf.add_handler(on_add=self._binder.poke, on_update=self._binder.poke,
                                    on_delete=self._binder.poke)
            self._binder.start()
            log.info("binding conditions on: channel claims wait in scheduling until this node's IMEX daemon is "
                     "Ready (at most %.0fs)", cfg.binding_timeout)
        if self._slices.share_channels:  # the shared channel names the domain holding the node
            publisher, labeler = self._slices, state.labeler
            state.node.add_handler(on_add=lambda _n: publisher.set_domain(labeler.current() or ""),
                                   on_update=lambda _o, _n: publisher.set_domain(labeler.current() or ""))
            publisher.set_domain(labeler.current() or "")
        self._health.send_taints_to(self._slices.set_channel_taints)  # the first publication carries them
        self._slices.start()
        registration_state = self.registration.state
        slices_publisher = self._slices
        metrics.bind(registered=lambda: registration_state.registered,
                     slice_published=slices_publisher.current,
                     domain_labels_missing=state.domain_labels_missing)
        if cfg.gpu_clique_label_enabled and found.clique_id:
            self.driver.preparer.labeler.set_label(constants.LABEL_NODE_CLIQUE, found.clique_id)
            log.info("labelled node %s %s=%s", cfg.node_name, constants.LABEL_NODE_CLIQUE, found.clique_id)
        if found.clique_id or cfg.gpu_clique_label_enabled:
            self._clique_refresher = CliqueRefresher(state, lambda: read_clique_id(cfg),
                                                     cfg.gpu_clique_label_enabled, on_change=self._watch_clique)
            self._clique_refresher.start()
        log.info(
            "kubelet plugin for node %s ready (%s mode; DRA socket %s, registration socket %s)",
            cfg.node_name,
            cfg.imex_mode,
            cfg.dra_socket,
            cfg.registration_socket,
        )

    @staticmethod
    def _open_checkpoint(store: CheckpointStore) -> tuple[str, str]:
        """("", "") when the checkpoint is usable; otherwise what happened to it and why, in a
        word (`REBUILD_MISSING`, `REBUILD_CORRUPT`). A damaged file is kept aside (never
        replaced), so the record can be rebuilt."""
        if not store.path.exists():
            return f"checkpoint {store.path} does not exist (deleted, or this node's first start)", REBUILD_MISSING
        try:
            store.read()
        except CorruptCheckpoint as exc:
            kept = store.keep_aside()
            log.error("checkpoint %s is unusable (%s); kept it as %s", store.path, exc.reason, kept)
            return (f"checkpoint {store.path} was unusable ({exc.reason}); the damaged file is kept as {kept}",
                    REBUILD_CORRUPT)
        return "", ""

    def _serve_metrics(self, metrics: PluginMetrics) -> None:
        cfg = self.config
        try:
            self._metrics_server = HttpServer(cfg.http_endpoint, metrics.registry, cfg.metrics_path)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        except OSError as exc:
            raise StartupError(
                f"cannot serve metrics on --http-endpoint {cfg.http_endpoint!r} ({exc}); choose a free port"
            ) from None
        self._metrics_server.start()
        log.info("serving metrics on port %d at %s", self._metrics_server.port, cfg.metrics_path)

    def _write_base_spec(self, found: NodeDiscovery) -> None:
        nodes = base_device_nodes(self.config.read_root, self.config.dev_root)
        spec = cdi_edits.base_spec(nodes)
        path = write_spec(self.config.cdi_root, cdi_edits.BASE_SPEC_NAME, spec)
        log.info("wrote base CDI spec %s (%d device nodes)", path, len(nodes))

    # -- run / stop ----------------------------------------------------------------------
    def wait(self) -> None:
        self._stopped.wait()

    def _watch_clique(self, clique_id: str) -> None:
        """The node's clique changed: watch that clique's objects instead of the old one's."""
        state, old = self.state, self.state.cliques if self.state else None
        if state is None or old is None:
            return
        new = clique_informer(state.raw, state.config.namespace, clique_id)
        new.add_handler(on_add=state.notifier.notify, on_update=state.notifier.notify,
                        on_delete=state.notifier.notify)
        new.start()
        if not new.wait_synced(SYNC_TIMEOUT):
            log.warning("the clique objects of clique %s did not sync within %.0fs; readiness is read as they "
                        "arrive", clique_id, SYNC_TIMEOUT)
        state.cliques = new
        self._informers = [new if i is old else i for i in self._informers]
        old.stop()

    def _drain(self) -> None:
        """Let the Prepare/Unprepare calls in flight finish, up to the shutdown grace."""
        calls = self.inflight.calls
        if not calls:
            return
        grace = self.config.shutdown_grace
        log.info("waiting up to %.0fs for %d Prepare/Unprepare call(s) in flight", grace, calls)
        if self.inflight.wait_idle(grace):
            log.info("calls in flight finished")
        else:
            log.warning("%d call(s) still in flight after %.0fs; stopping anyway (kubelet retries them)",
                        self.inflight.calls, grace)

    def _another_instance(self) -> bool:
        """Whether another instance of the plugin serves this node (the new pod of a rolling update)."""
        others = other_live_instances(self.config.registrar_dir, self.config.pod_uid)
        if others:
            log.info("another plugin instance serves this node (%s): node labels stay", others[0].name)
        return bool(others)

    def stop(self) -> None:
        """Stop serving: calls in flight finish, then the registration socket goes (kubelet
        deregisters), then the rest. ResourceSlices stay; kubelet removes them when the plugin
        stays away."""
        if self._stopped.is_set():
            return
        log.info("kubelet plugin for node %s shutting down", self.config.node_name)
        self._drain()
        if self._health is not None:
            self._health.stop()  # ends kubelet's health stream before the sockets go
        for server, path in self._servers:
            sockets.stop_server(server, path, grace=2.0)
        self._servers.clear()
        if self._slices is not None:
            self._slices.stop()
        if self._sweeper is not None:
            self._sweeper.stop()
        if self._clique_refresher is not None:
            self._clique_refresher.stop()
        if (
            self.config.gpu_clique_label_enabled
            and self.driver is not None
            and self.state is not None
            and self.state.discovery.clique_id
            and not self._another_instance()
        ):
            try:
                self.driver.preparer.labeler.set_label(constants.LABEL_NODE_CLIQUE, None)
            except CdriverError as exc:
                log.warning("could not remove label %s: %s", constants.LABEL_NODE_CLIQUE, exc)
        if self._binder is not None:
            self._binder.stop()
        for inf in self._informers:
            inf.stop()
        if self.state is not None:
            self.state.domains.stop()
        if self._metrics_server is not None:
            self._metrics_server.stop()
        if self.driver is not None:
            self.driver.close()
        if self.state is not None:
            self.state.events.close()
            if self.state.claim_status is not None:
                self.state.claim_status.close()
        self._stopped.set()
        log.info("shutdown")


def run(config: PluginConfig) -> None:
    """Run until SIGTERM/SIGINT/SIGHUP/SIGQUIT; raises CdriverError on a failed start."""
    plugin = Plugin(config)
    stop = threading.Event()

    def on_signal(signum: int) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    install_signal_handlers(on_signal, (*STOP_SIGNALS, signal.SIGHUP, signal.SIGQUIT))
    try:
        plugin.start()
        while not stop.wait(1.0):
            pass
    finally:
        plugin.stop()
