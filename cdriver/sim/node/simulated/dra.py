"""DRA on a simulated node, like kubelet: plugin registration and the node service client.

`PluginManager` watches the node's ``plugins_registry`` directory for registration sockets,
asks each new one `GetInfo`, accepts DRA plugins that serve a node-service version this node
speaks (the plugin's first of ``v1.DRAPlugin``, ``v1beta1.DRAPlugin``), confirms with
`NotifyRegistrationStatus`, re-probes registered plugins periodically (two failed GetInfo
calls in a row, or a vanished socket, drop the plugin) and keeps the newest endpoint per
driver. `DRAPluginClient` calls NodePrepareResources / NodeUnprepareResources with a deadline.

Paths a plugin reports (its endpoint) are node paths, mapped through the node root. Socket
paths longer than a Unix address allows are dialled through ``/proc/self/fd/<dir fd>/<name>``.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cdriver.errors import CdriverError
from cdriver.sim.node.simulated.layout import NodeLayout

PLUGIN_TYPE_DRA = "DRAPlugin"
#: Node-service versions this node speaks, best first.
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
MAX_UNIX_PATH = 107
DEFAULT_CALL_TIMEOUT = 45.0
INFO_TIMEOUT = 10.0
#: Consecutive failed GetInfo probes after which a registered plugin is dropped.
MAX_PROBE_FAILURES = 2


class DRAError(CdriverError):
    """A DRA plugin call failed as a whole (connection, deadline, bad answer)."""


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


class UnixTarget:
    """A gRPC target for a Unix socket path of any length (closes its helper fd on close)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._dir_fd: int | None = None
        text = str(self.path)
        if len(os.fsencode(text)) <= MAX_UNIX_PATH:
            self.target = f"unix:{text}"
        else:
            self._dir_fd = os.open(self.path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self.target = f"unix:/proc/self/fd/{self._dir_fd}/{self.path.name}"

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None


def _channel(path: Path) -> tuple[grpc.Channel, UnixTarget]:
    target = UnixTarget(path)
    return grpc.insecure_channel(target.target, options=[("grpc.enable_http_proxy", 0)]), target


def _stubs(service: str) -> tuple[Any, Any]:
    """(pb module, stub class) of a node-service version."""
    if service == "v1.DRAPlugin":
        from cdriver.dra.gen.dra.v1 import api_pb2, api_pb2_grpc
    else:
        from cdriver.dra.gen.dra.v1beta1 import api_pb2, api_pb2_grpc
    return api_pb2, api_pb2_grpc.DRAPluginStub


def _details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    return str(details() if callable(details) else exc)


def _rpc_error(call: str, driver: str, exc: grpc.RpcError) -> DRAError:
    code = exc.code() if hasattr(exc, "code") else None
    return DRAError(f"{call} on DRA driver {driver}: {getattr(code, 'name', code)}: {_details(exc)}")


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass
class PreparedDevice:
    """One device kubelet got for a claim."""

    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"requestNames": self.request_names, "poolName": self.pool_name,
                "deviceName": self.device_name, "cdiDeviceIDs": self.cdi_device_ids}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreparedDevice:
        return cls(list(d.get("requestNames") or []), d.get("poolName", ""), d.get("deviceName", ""),
                   list(d.get("cdiDeviceIDs") or []))


@dataclass
class ClaimOutcome:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


@dataclass
class PluginEndpoint:
    """A registered plugin."""

    driver: str
    endpoint: Path
    registration_socket: Path
    service: str
    registered_at: float
    failures: int = 0


class DRAPluginClient:
    """The node service of one registered plugin."""

    def __init__(self, plugin: PluginEndpoint) -> None:
        self.plugin = plugin
        self._pb, stub = _stubs(plugin.service)
        self._channel, self._target = _channel(plugin.endpoint)
        self._stub = stub(self._channel)

    def close(self) -> None:
        self._channel.close()
        self._target.close()

    def _claims(self, claims: list[ClaimRef]) -> list[Any]:
        return [self._pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def prepare(self, claims: list[ClaimRef], timeout: float = DEFAULT_CALL_TIMEOUT) -> dict[str, ClaimOutcome]:
        """NodePrepareResources; per-claim outcomes keyed by UID (a missing claim is an error)."""
        try:
            resp = self._stub.NodePrepareResources(
                self._pb.NodePrepareResourcesRequest(claims=self._claims(claims)), timeout=timeout)
        except grpc.RpcError as exc:
            raise _rpc_error("NodePrepareResources", self.plugin.driver, exc) from None
        wanted = {c.uid for c in claims}
        unknown = set(resp.claims) - wanted
        if unknown:
            raise DRAError(f"NodePrepareResources on DRA driver {self.plugin.driver} returned results for "
                           f"unknown claim UIDs {sorted(unknown)}")
        out: dict[str, ClaimOutcome] = {}
        for claim in claims:
            if claim.uid not in resp.claims:
                out[claim.uid] = ClaimOutcome(error=f"NodePrepareResources skipped claim {claim.name}")
                continue
            result = resp.claims[claim.uid]
            if result.error:
                out[claim.uid] = ClaimOutcome(error=result.error)
                continue
            out[claim.uid] = ClaimOutcome(devices=[
                PreparedDevice(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
                for d in result.devices])
        return out

    def unprepare(self, claims: list[ClaimRef], timeout: float = DEFAULT_CALL_TIMEOUT) -> dict[str, str]:
        """NodeUnprepareResources; UID -> error ("" = done)."""
        try:
            resp = self._stub.NodeUnprepareResources(
                self._pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=timeout)
        except grpc.RpcError as exc:
            raise _rpc_error("NodeUnprepareResources", self.plugin.driver, exc) from None
        return {c.uid: (resp.claims[c.uid].error if c.uid in resp.claims
                        else f"NodeUnprepareResources skipped claim {c.name}") for c in claims}


def _get_info(socket_path: Path, timeout: float) -> Any:
    from cdriver.dra.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

    channel, target = _channel(socket_path)
    try:
        return api_pb2_grpc.RegistrationStub(channel).GetInfo(api_pb2.InfoRequest(), timeout=timeout)
    finally:
        channel.close()
        target.close()


def _notify(socket_path: Path, registered: bool, error: str, timeout: float) -> None:
    from cdriver.dra.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

    channel, target = _channel(socket_path)
    try:
        api_pb2_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
            api_pb2.RegistrationStatus(plugin_registered=registered, error=error), timeout=timeout)
    except grpc.RpcError:
        pass  # a plugin may answer a rejection with an error; nothing to do about it
    finally:
        channel.close()
        target.close()


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
            info = _get_info(sock, self.info_timeout)
        except grpc.RpcError as exc:
            reason = f"GetInfo failed: {_details(exc)}"
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
        _notify(sock, True, "", self.info_timeout)
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
            _notify(sock, False, reason, self.info_timeout)

    def _probe(self, sock: Path) -> None:
        try:
            _get_info(sock, self.info_timeout)
        except grpc.RpcError as exc:
            with self._lock:
                plugin = self._by_socket.get(sock)
                if plugin is None:
                    return
                plugin.failures += 1
                failures = plugin.failures
            if failures >= MAX_PROBE_FAILURES:
                self._drop(sock, f"GetInfo failed {failures} times ({_details(exc)})")
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
