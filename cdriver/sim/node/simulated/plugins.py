"""DRA plugin registration on a simulated node, like kubelet's plugin watcher.

`PluginManager` watches the node's ``plugins_registry`` directory, with all its subdirectories,
for registration sockets, asks each new one `GetInfo` (1 s deadline), accepts DRA plugins that
serve a node-service version this node speaks (the plugin's first of ``v1.DRAPlugin``,
``v1beta1.DRAPlugin``) and confirms with `NotifyRegistrationStatus`; a plugin that does not
take that confirmation is de-registered again (and retried on the next scan). A registered
plugin stays until its socket is removed or replaced (a new socket at the same path is
registered anew); registration sockets are not probed again. Whether the plugin's endpoint
accepts connections decides whether the driver is usable (the node wipes an unusable
driver's slices after a delay). A driver may have several endpoints at once (the old and the
new pod of a rolling update, each with its own sockets): calls go to the newest registered
endpoint that accepted connections at the last scan, else to the newest (kubelet 1.36+'s
rule), each through a `cdriver.dra.client.DRAPluginClient`; a removed registration closes its
client, which cancels the calls still in flight on it (kubelet closes the connection).

Paths a plugin reports (its endpoint) are node paths, mapped through the node root.
"""

from __future__ import annotations

import logging
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from cdriver.dra.client import (
    DRAPluginClient,
    PluginEndpoint,
    UnixTarget,
    get_info,
    notify_registration,
    rpc_details,
)
from cdriver.sim.node.simulated.layout import NodeLayout
from cdriver.sim.node.simulated.resource_health import HealthCache, HealthWatcher, pick_health_service

PLUGIN_TYPE_DRA = "DRAPlugin"
#: Node-service versions this node speaks, best first.
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: Kubelet's deadline for GetInfo.
INFO_TIMEOUT = 1.0
#: Kubelet's deadline for NotifyRegistrationStatus.
NOTIFY_TIMEOUT = 5.0


def choose_service(versions: list[str]) -> str | None:
    """The plugin's first advertised service this node supports (kubelet's rule)."""
    for version in versions:
        if version in SUPPORTED_SERVICES:
            return version
    return None


def registration_problem(info_type: str, name: str, versions: list[str]) -> str:
    """Why a plugin's GetInfo answer is not acceptable ("" if it is)."""
    if info_type != PLUGIN_TYPE_DRA:
        return (f"plugin type {info_type!r} is not supported by this simulated node (only "
                f"{PLUGIN_TYPE_DRA})")
    if not name:
        return "plugin name is empty"
    if choose_service(versions) is None:
        return (f"none of the advertised services {versions} is supported; this node speaks "
                f"{', '.join(SUPPORTED_SERVICES)}")
    return ""


def registry_sockets(directory: Path) -> list[Path]:
    """Unix sockets anywhere below the registry dir, as kubelet's plugin watcher walks it
    (sockets with hidden names are skipped; symlinks are not followed)."""
    found: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    for entry in entries:
        try:
            mode = entry.lstat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISSOCK(mode) and not entry.name.startswith("."):
            found.append(entry)
        elif stat.S_ISDIR(mode):
            found.extend(registry_sockets(entry))
    return found


def socket_identity(path: Path) -> tuple[int, int] | None:
    """What tells a socket from a new one created at the same path (None if gone)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


def endpoint_accepts(endpoint: Path) -> bool:
    """Whether a plugin's node-service socket accepts connections."""
    import socket

    target = UnixTarget(endpoint)
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(1.0)
    try:
        sock.connect(target.target.removeprefix("unix:"))
        return True
    except OSError:
        return False
    finally:
        sock.close()
        target.close()


class PluginManager:
    """Registered DRA plugins of one node."""

    def __init__(self, layout: NodeLayout, logger: logging.Logger | None = None, scan_interval: float = 1.0,
                 info_timeout: float = INFO_TIMEOUT, notify_timeout: float = NOTIFY_TIMEOUT,
                 on_registered: Callable[[str], None] | None = None,
                 on_unregistered: Callable[[str], None] | None = None,
                 health: HealthCache | None = None) -> None:
        self.layout = layout
        self.log = logger or logging.getLogger(__name__)
        self.scan_interval = scan_interval
        self.info_timeout = info_timeout
        self.notify_timeout = notify_timeout
        self.on_registered = on_registered
        self.on_unregistered = on_unregistered
        self._lock = threading.Lock()
        self._by_socket: dict[Path, PluginEndpoint] = {}
        self._identity: dict[Path, tuple[int, int] | None] = {}
        self._clients: dict[Path, DRAPluginClient] = {}
        self._rejected: dict[Path, str] = {}
        self._usable: dict[str, bool] = {}
        #: registration sockets whose endpoint accepted a connection at the last scan
        self._accepting: set[Path] = set()
        self._stop = threading.Event()
        self._changed = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        #: the plugins' device health (None: not watched, as kubelets before 1.36)
        self.health = health
        self._watchers: dict[Path, HealthWatcher] = {}

    # -- queries -----------------------------------------------------------------------
    def client(self, driver: str) -> DRAPluginClient | None:
        """The client of `driver`'s newest registered endpoint that accepts connections (else of
        its newest), or None."""
        with self._lock:
            mine = sorted((p.registered_at, s) for s, p in self._by_socket.items() if p.driver == driver)
            connected = [s for _, s in mine if s in self._accepting]
            best = connected[-1] if connected else (mine[-1][1] if mine else None)
            return self._clients.get(best) if best is not None else None

    def drivers(self) -> list[str]:
        with self._lock:
            return sorted({p.driver for p in self._by_socket.values()})

    def usable(self, driver: str) -> bool:
        """Whether a registered endpoint of `driver` accepted a connection at the last scan."""
        with self._lock:
            return self._usable.get(driver, False)

    def plugins(self) -> list[PluginEndpoint]:
        with self._lock:
            return list(self._by_socket.values())

    def rejected(self) -> dict[Path, str]:
        """Registration sockets that were refused, with the reason."""
        with self._lock:
            return dict(self._rejected)

    def wait_for(self, driver: str, timeout: float, present: bool = True) -> bool:
        """Wait until `driver` is registered (or, with present=False, gone)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while (driver in {p.driver for p in self._by_socket.values()}) != present:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
            return True

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> PluginManager:
        self.layout.registry_dir.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dra-plugins", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
            watchers = list(self._watchers.values())
            self._watchers.clear()
        for watcher in watchers:
            watcher.stop()
        with self._lock:
            self._by_socket.clear()
            self._identity.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:  # noqa: BLE001 - keep watching whatever a plugin does
                self.log.exception("scanning %s failed", self.layout.registry_dir)
            self._stop.wait(self.scan_interval)

    # -- one pass ----------------------------------------------------------------------
    def scan(self) -> None:
        """Register new (or replaced) sockets, drop removed ones, track which drivers are usable."""
        present = {s: socket_identity(s) for s in registry_sockets(self.layout.registry_dir)}
        with self._lock:
            known = dict(self._identity)
        for sock in sorted(set(known) - set(present)):
            self._drop(sock, "its registration socket was removed")
        for sock in sorted(set(known) & set(present)):
            if known[sock] != present[sock]:
                self._drop(sock, "its registration socket was replaced")
        with self._lock:
            new = sorted(s for s in present if s not in self._identity)
        for sock in new:
            self._register(sock, present[sock])
        with self._lock:
            self._rejected = {s: r for s, r in self._rejected.items() if s in present}
        self._sync_usable()

    def _register(self, sock: Path, identity: tuple[int, int] | None) -> None:
        try:
            info = get_info(sock, self.info_timeout)
        except grpc.RpcError as exc:
            reason = f"GetInfo failed: {rpc_details(exc)}"
            self._reject(sock, reason, notify=False)
            return
        versions = list(info.supported_versions)
        problem = registration_problem(info.type, info.name, versions)
        endpoint = self.layout.resolve_external(info.endpoint) if info.endpoint else sock
        if not problem:
            with self._lock:
                clash = [p for s, p in self._by_socket.items() if p.endpoint == endpoint and s != sock]
            if clash:
                problem = f"endpoint {info.endpoint} is already registered by {clash[0].driver}"
        if problem:
            self._reject(sock, problem, notify=True)
            return
        plugin = PluginEndpoint(driver=info.name, endpoint=endpoint, registration_socket=sock,
                                service=choose_service(versions) or "", registered_at=time.monotonic())
        client = DRAPluginClient(plugin)
        with self._changed:
            self._by_socket[sock] = plugin
            self._identity[sock] = identity
            self._clients[sock] = client
            self._rejected.pop(sock, None)
            self._changed.notify_all()
        failed = notify_registration(sock, True, "", self.notify_timeout)
        if failed:
            # kubelet de-registers a plugin that does not take the confirmation; retried next scan
            self._drop(sock, f"NotifyRegistrationStatus failed: {failed}")
            self._reject(sock, f"NotifyRegistrationStatus failed: {failed}", notify=False)
            return
        self.log.info("registered DRA plugin %s (service %s, endpoint %s)", plugin.driver, plugin.service,
                      plugin.endpoint)
        health_service = pick_health_service(versions)
        if self.health is not None and health_service:
            watcher = HealthWatcher(plugin.driver, endpoint, health_service, self.health, self.log).start()
            with self._lock:
                old = self._watchers.pop(sock, None)
                self._watchers[sock] = watcher
            if old is not None:
                old.stop()

    def _reject(self, sock: Path, reason: str, notify: bool) -> None:
        with self._lock:
            first = self._rejected.get(sock) != reason
            self._rejected[sock] = reason
        if first:
            self.log.warning("plugin socket %s not registered: %s", sock, reason)
        if notify:
            notify_registration(sock, False, reason, self.notify_timeout)

    def _sync_usable(self) -> None:
        """A driver is usable while one of its endpoints accepts connections (kubelet watches its
        gRPC connections); changes are reported through the callbacks."""
        with self._lock:
            endpoints: dict[str, list[tuple[Path, Path]]] = {}
            for sock, plugin in self._by_socket.items():
                endpoints.setdefault(plugin.driver, []).append((sock, plugin.endpoint))
            drivers = set(endpoints) | set(self._usable)
        accepting = {sock for pairs in endpoints.values() for sock, e in pairs if endpoint_accepts(e)}
        with self._lock:
            self._accepting = accepting
        for driver in sorted(drivers):
            now = any(sock in accepting for sock, _ in endpoints.get(driver, []))
            with self._lock:
                before = self._usable.get(driver, False)
                if now:
                    self._usable[driver] = True
                else:
                    self._usable.pop(driver, None)
            if now and not before:
                self.log.info("DRA driver %s is usable", driver)
                if self.on_registered:
                    self.on_registered(driver)
            elif before and not now:
                self.log.info("DRA driver %s is not usable: %s", driver,
                              "no endpoint accepts connections" if driver in endpoints else "not registered")
                if self.on_unregistered:
                    self.on_unregistered(driver)

    def _drop(self, sock: Path, reason: str) -> None:
        with self._changed:
            plugin = self._by_socket.pop(sock, None)
            client = self._clients.pop(sock, None)
            self._identity.pop(sock, None)
            watcher = self._watchers.pop(sock, None)
            self._changed.notify_all()
        if watcher is not None:
            watcher.stop()
        if client is not None:
            client.close()
        if plugin is not None:
            self.log.info("DRA plugin %s unregistered (endpoint %s): %s", plugin.driver, plugin.endpoint, reason)
