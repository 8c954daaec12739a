"""DRA plugin registration on a simulated node, like kubelet's plugin watcher.

`PluginManager` watches the node's ``plugins_registry`` directory for registration sockets,
asks each new one `GetInfo`, accepts DRA plugins that serve a node-service version this node
speaks (the plugin's first of ``v1.DRAPlugin``, ``v1beta1.DRAPlugin``), confirms with
`NotifyRegistrationStatus`, re-probes registered plugins periodically (two failed GetInfo
calls in a row, or a vanished socket, drop the plugin) and keeps the newest endpoint per
driver, with a `cdriver.dra.client.DRAPluginClient` for each.

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

from cdriver.dra.client import DRAPluginClient, PluginEndpoint, get_info, notify_registration, rpc_details
from cdriver.sim.node.simulated.layout import NodeLayout

PLUGIN_TYPE_DRA = "DRAPlugin"
#: Node-service versions this node speaks, best first.
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
INFO_TIMEOUT = 10.0
#: Consecutive failed GetInfo probes after which a registered plugin is dropped.
MAX_PROBE_FAILURES = 2


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


def registry_sockets(directory: Path, depth: int = 1) -> list[Path]:
    """Unix sockets in the registry dir and, up to `depth` levels, its subdirs (hidden names
    skipped)."""
    found: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            mode = entry.lstat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISSOCK(mode):
            found.append(entry)
        elif stat.S_ISDIR(mode) and depth > 0:
            found.extend(registry_sockets(entry, depth - 1))
    return found


class PluginManager:
    """Registered DRA plugins of one node."""

    def __init__(self, layout: NodeLayout, logger: logging.Logger | None = None, scan_interval: float = 1.0,
                 probe_interval: float = 10.0, info_timeout: float = INFO_TIMEOUT,
                 on_registered: Callable[[str], None] | None = None,
                 on_unregistered: Callable[[str], None] | None = None) -> None:
        self.layout = layout
        self.log = logger or logging.getLogger(__name__)
        self.scan_interval = scan_interval
        self.probe_interval = probe_interval
        self.info_timeout = info_timeout
        self.on_registered = on_registered
        self.on_unregistered = on_unregistered
        self._lock = threading.Lock()
        self._by_socket: dict[Path, PluginEndpoint] = {}
        self._clients: dict[Path, DRAPluginClient] = {}
        self._rejected: dict[Path, str] = {}
        self._stop = threading.Event()
        self._changed = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._last_probe = 0.0

    # -- queries -----------------------------------------------------------------------
    def client(self, driver: str) -> DRAPluginClient | None:
        """The newest registered endpoint of `driver`, or None."""
        with self._lock:
            best = None
            for sock, plugin in self._by_socket.items():
                if plugin.driver == driver and (best is None or plugin.registered_at > best[1].registered_at):
                    best = (sock, plugin)
            return self._clients.get(best[0]) if best else None

    def drivers(self) -> list[str]:
        with self._lock:
            return sorted({p.driver for p in self._by_socket.values()})

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
            self._by_socket.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:  # noqa: BLE001 - keep watching whatever a plugin does
                self.log.exception("scanning %s failed", self.layout.registry_dir)
            self._stop.wait(self.scan_interval)

    # -- one pass ----------------------------------------------------------------------
    def scan(self) -> None:
        """Register new sockets, drop vanished ones, re-probe registered ones when due."""
        present = set(registry_sockets(self.layout.registry_dir))
        with self._lock:
            known = set(self._by_socket)
        for sock in sorted(known - present):
            self._drop(sock, "its registration socket was removed")
        for sock in sorted(present - known):
            self._register(sock)
        with self._lock:
            self._rejected = {s: r for s, r in self._rejected.items() if s in present}
        now = time.monotonic()
        if now - self._last_probe >= self.probe_interval:
            self._last_probe = now
            for sock in sorted(present & known):
                self._probe(sock)

    def _register(self, sock: Path) -> None:
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
            self._clients[sock] = client
            self._rejected.pop(sock, None)
            self._changed.notify_all()
        notify_registration(sock, True, "", self.info_timeout)
        self.log.info("registered DRA plugin %s (service %s, endpoint %s)", plugin.driver, plugin.service,
                      plugin.endpoint)
        if self.on_registered:
            self.on_registered(plugin.driver)

    def _reject(self, sock: Path, reason: str, notify: bool) -> None:
        with self._lock:
            first = self._rejected.get(sock) != reason
            self._rejected[sock] = reason
        if first:
            self.log.warning("plugin socket %s not registered: %s", sock, reason)
        if notify:
            notify_registration(sock, False, reason, self.info_timeout)

    def _probe(self, sock: Path) -> None:
        try:
            get_info(sock, self.info_timeout)
        except grpc.RpcError as exc:
            with self._lock:
                plugin = self._by_socket.get(sock)
                if plugin is None:
                    return
                plugin.failures += 1
                failures = plugin.failures
            if failures >= MAX_PROBE_FAILURES:
                self._drop(sock, f"GetInfo failed {failures} times ({rpc_details(exc)})")
            return
        with self._lock:
            if sock in self._by_socket:
                self._by_socket[sock].failures = 0

    def _drop(self, sock: Path, reason: str) -> None:
        with self._changed:
            plugin = self._by_socket.pop(sock, None)
            client = self._clients.pop(sock, None)
            self._changed.notify_all()
            still = plugin is not None and any(p.driver == plugin.driver for p in self._by_socket.values())
        if client is not None:
            client.close()
        if plugin is not None:
            self.log.info("DRA plugin %s unregistered: %s", plugin.driver, reason)
            if self.on_unregistered and not still:
                self.on_unregistered(plugin.driver)
