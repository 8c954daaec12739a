"""What the IMEX stand-ins agree on: timings, peer resolution, wire messages, domain report.

Peers talk newline-delimited JSON over TCP (SERVER_PORT): each side sends `hello` (its
address, its node ID, the digest of its node map, version NO_GPU, status), then a `heartbeat`
every interval carrying the node IDs it currently sees; a daemon that stops sends `shutdown`
on every link. As nvidia-imex does, a daemon takes a peer for a member of its IMEX domain when
their node maps (the nodes config entries, in order) are the same, refusing it otherwise, and
knows a peer by the node ID it announces: node N is the Nth entry of its own nodes config,
resolved through its hosts file. A link is alive while messages keep arriving within the peer
timeout. The command service (IMEX_CMD_PORT and the optional Unix socket) answers one JSON
request per connection: `query` (local readiness) or `domain` (the `-N -j` document).

Everything here is pure except `local_addresses` and `Timing.from_env`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdriver.errors import CdriverError
from cdriver.imex.config import ImexConfig
from cdriver.imex.hosts import HOSTS_FILE, parse_hosts
from cdriver.imex.names import UNUSED_SLOT_IP

IMEX_NO_GPU_VERSION = "NO_GPU"  # node version IMEX reports in NO GPU mode
IMEX_DOMAIN_UP = "UP"
IMEX_DOMAIN_DEGRADED = "DEGRADED"
IMEX_DOMAIN_DOWN = "DOWN"
IMEX_NODE_READY = "READY"
IMEX_NODE_UNAVAILABLE = "UNAVAILABLE"
ENV_SIM_HOSTS_FILE = "CDRIVER_SIM_HOSTS_FILE"  # hosts file the stand-ins resolve names in
ENV_SIM_IMEX_HEARTBEAT = "CDRIVER_SIM_IMEX_HEARTBEAT_S"
ENV_SIM_IMEX_PEER_TIMEOUT = "CDRIVER_SIM_IMEX_PEER_TIMEOUT_S"
ENV_SIM_IMEX_RETRY_INITIAL = "CDRIVER_SIM_IMEX_RETRY_INITIAL_S"
ENV_SIM_IMEX_RETRY_MAX = "CDRIVER_SIM_IMEX_RETRY_MAX_S"

MAX_LINE = 64 * 1024
MSG_HELLO = "hello"
MSG_HEARTBEAT = "heartbeat"
MSG_SHUTDOWN = "shutdown"
MSG_REFUSED = "refused"
CMD_QUERY = "query"
CMD_DOMAIN = "domain"

STATE_READY = "READY"
STATE_SHUTTING_DOWN = "SHUTTING_DOWN"
CONN_CONNECTED = "CONNECTED"
CONN_INVALID = "INVALID"


class ProtocolError(CdriverError):
    """A message that is not valid stand-in protocol."""


# --- timings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Heartbeat and retry timings (seconds). Real IMEX retries after 15 s, 31 s, 62 s, ...;
    the stand-in defaults are short so a simulated domain converges in seconds."""

    heartbeat: float = 1.0
    peer_timeout: float = 3.0
    retry_initial: float = 0.5
    retry_max: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Timing:
        """Timings from CDRIVER_SIM_IMEX_* env vars; bad values raise ProtocolError naming them."""
        env = os.environ if environ is None else environ
        base = cls()
        values = {}
        for attr, var in (
            ("heartbeat", ENV_SIM_IMEX_HEARTBEAT),
            ("peer_timeout", ENV_SIM_IMEX_PEER_TIMEOUT),
            ("retry_initial", ENV_SIM_IMEX_RETRY_INITIAL),
            ("retry_max", ENV_SIM_IMEX_RETRY_MAX),
        ):
            raw = env.get(var, "")
            if raw == "":
                values[attr] = getattr(base, attr)
                continue
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not 0 < value <= 3600:
                raise ProtocolError(f"{var}={raw!r}: must be a number of seconds above 0 (at most 3600)")
            values[attr] = value
        timing = cls(**values)
        if timing.peer_timeout <= timing.heartbeat:
            raise ProtocolError(
                f"{ENV_SIM_IMEX_PEER_TIMEOUT}={timing.peer_timeout:g} must be larger than "
                f"{ENV_SIM_IMEX_HEARTBEAT}={timing.heartbeat:g}"
            )
        return timing


def retry_delay(attempt: int, timing: Timing) -> float:
    """Delay before reconnect attempt `attempt` (1-based): doubling from retry_initial, capped."""
    if attempt <= 0:
        return 0.0
    return min(timing.retry_max, timing.retry_initial * (2 ** min(attempt - 1, 30)))


def hosts_file_path(environ: Mapping[str, str] | None = None) -> str:
    """The hosts file names are resolved in (CDRIVER_SIM_HOSTS_FILE, default /etc/hosts)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_SIM_HOSTS_FILE) or HOSTS_FILE


# --- members ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One nodes-config entry: its position, the text as written and its IP (None: unresolved)."""

    index: int
    entry: str
    ip: str | None


def _as_ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def resolve_members(entries: Iterable[str], hosts_text: str) -> list[Member]:
    """Resolve nodes-config entries: IP literals as is, names through the hosts file text.

    A name pointing at the unused-slot address (127.0.0.2) stands for a slot without a daemon:
    it is left unresolved, as a name missing from the hosts file (not dialled, not reported).
    """
    table = parse_hosts(hosts_text)
    members = []
    for index, entry in enumerate(entries):
        ip = _as_ip(entry)
        if ip is None:
            found = table.get(entry.lower())
            ip = _as_ip(found) if found else None
            if ip == UNUSED_SLOT_IP:
                ip = None
        members.append(Member(index=index, entry=entry, ip=ip))
    return members


def node_map_digest(entries: Sequence[str]) -> str:
    """Digest of a node map (the nodes config entries, in order), compared when two daemons
    connect: equal digests, one IMEX domain."""
    text = "\n".join(entry.lower() for entry in entries)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def self_index(members: Iterable[Member], self_ip: str | None) -> int | None:
    """This node's ID: the index of the first entry resolving to its address (None: unlisted)."""
    return next((m.index for m in members if self_ip is not None and m.ip == self_ip), None)


def choose_self_address(cfg: ImexConfig, members: Iterable[Member], local: Iterable[str]) -> str | None:
    """This node's peer address: BIND_INTERFACE_IP, else IMEX_CMD_BIND_INTERFACE_IP, else the
    first member IP assigned to a local interface (None when nothing matches)."""
    if cfg.bind_ip:
        return str(ipaddress.ip_address(cfg.bind_ip))
    if cfg.cmd_bind_ip:
        return str(ipaddress.ip_address(cfg.cmd_bind_ip))
    local_set = {_as_ip(a) for a in local} - {None}
    for member in members:
        if member.ip is not None and member.ip in local_set:
            return member.ip
    return None


def local_addresses() -> list[str]:
    """IP addresses configured on this machine's interfaces."""
    import socket

    import psutil

    out = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.append(addr.address.split("%", 1)[0])
    return out


# --- wire messages ---------------------------------------------------------------------


def encode(message: Mapping[str, object]) -> bytes:
    """One message as a JSON line."""
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"


def decode(line: bytes) -> dict:
    """Parse one JSON line into a message object; ProtocolError if it is not one."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"message longer than {MAX_LINE} bytes")
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"not a JSON message: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("message is not a JSON object")
    return msg


def hello(node: str, status: str, index: int | None, node_map: str) -> dict:
    """First message on a peer link: who is speaking (address and node ID) and its node map."""
    return {"type": MSG_HELLO, "node": node, "index": index, "map": node_map,
            "version": IMEX_NO_GPU_VERSION, "status": status}


def heartbeat(seq: int, status: str, connected: Iterable[int]) -> dict:
    """Periodic liveness message carrying the node IDs the sender has links with."""
    return {"type": MSG_HEARTBEAT, "seq": seq, "status": status, "connected": sorted(connected)}


def shutdown(index: int | None) -> dict:
    """What a stopping daemon sends on every link: node `index` is going away."""
    return {"type": MSG_SHUTDOWN, "index": index}


def refused(reason: str) -> dict:
    """The answer to a hello that is not accepted, before the connection is closed."""
    return {"type": MSG_REFUSED, "reason": reason}


@dataclass(frozen=True)
class Hello:
    """A peer's hello: its address, node ID (None: not in its own node map), node map digest."""

    address: str
    index: int | None
    node_map: str
    version: str
    status: str


def parse_hello(msg: Mapping[str, object]) -> Hello:
    """The fields of a hello; ProtocolError if malformed, or carrying the peer's refusal."""
    if msg.get("type") == MSG_REFUSED:
        raise ProtocolError(f"the peer refused the connection: {msg.get('reason')}")
    if msg.get("type") != MSG_HELLO:
        raise ProtocolError(f"expected a hello, got {msg.get('type')!r}")
    node, version, status = msg.get("node"), msg.get("version", ""), msg.get("status", "")
    index, node_map = msg.get("index"), msg.get("map", "")
    if not isinstance(node, str) or _as_ip(node) is None:
        raise ProtocolError(f"hello carries no valid node address: {node!r}")
    if not isinstance(version, str) or not isinstance(status, str) or not isinstance(node_map, str):
        raise ProtocolError("hello version/status/map must be strings")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise ProtocolError(f"hello carries no valid node ID: {index!r}")
    return Hello(str(ipaddress.ip_address(node)), index, node_map, version, status)


def refusal(peer: Hello, node_map: str, own_index: int | None, size: int) -> str | None:
    """Why a peer's hello is not accepted (None: accepted as node `peer.index`)."""
    if peer.node_map != node_map:
        return (f"its node map ({peer.node_map}) is not this node's ({node_map}): its nodes config "
                "lists other entries, so it belongs to another IMEX domain")
    if peer.index is None or peer.index >= size:
        return "it is not a node of its own node map"
    if peer.index == own_index:
        return f"it claims this node's ID {own_index}"
    return None


# --- domain report (`-N -j`) -----------------------------------------------------------


@dataclass
class PeerView:
    """What this daemon knows about one peer address."""

    connected: bool = False
    version: str = ""
    sees: frozenset[int] = field(default_factory=frozenset)  # node IDs the peer reports connected


def format_timestamp(epoch: float) -> str:
    """`M/D/YYYY HH:MM:SS.mmm` in local time, as nvidia-imex-ctl prints it."""
    t = time.localtime(epoch)
    ms = int((epoch % 1) * 1000)
    return f"{t.tm_mon}/{t.tm_mday}/{t.tm_year} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{ms:03d}"


def domain_status(self_is_member: bool, node_statuses: Iterable[str]) -> str:
    """UP: every member ready; DEGRADED: this node ready, some member not; DOWN: this node is
    not a ready member of the domain."""
    statuses = list(node_statuses)
    if not self_is_member or not statuses:
        return IMEX_DOMAIN_DOWN
    if all(s == IMEX_NODE_READY for s in statuses):
        return IMEX_DOMAIN_UP
    return IMEX_DOMAIN_DEGRADED


def build_domain_report(
    members: Iterable[Member],
    self_ip: str | None,
    self_state: str,
    peers: Mapping[int, PeerView],
    now: float,
    previous: Mapping[str, str] | None = None,
    hostnames: bool = False,
) -> tuple[dict, dict[str, str]]:
    """The `-N -j` document and the statuses to compare against next time (`changed` flags).

    `nodes` is keyed by the index in the nodes config (the node ID `peers` is keyed by);
    entries whose names do not resolve are left out (a DNS-mode nodes config lists more names
    than there are members).
    """
    prev = previous or {}
    seen: dict[str, str] = {}
    resolved = [m for m in members if m.ip is not None]
    nodes: dict[str, dict] = {}
    statuses = []
    self_is_member = False
    for m in resolved:
        key = str(m.index)
        is_self = m.ip == self_ip
        view = peers.get(m.index, PeerView())
        if is_self:
            self_is_member = True
            status = IMEX_NODE_READY if self_state == STATE_READY else IMEX_NODE_UNAVAILABLE
            version = IMEX_NO_GPU_VERSION
            sees = {index for index, v in peers.items() if v.connected}
        elif view.connected:
            status, version, sees = IMEX_NODE_READY, view.version, set(view.sees)
        else:
            status, version, sees = IMEX_NODE_UNAVAILABLE, "", None
        statuses.append(status)
        connections: dict[str, dict] = {}
        if sees is not None:
            for other in resolved:
                if other.index == m.index:
                    continue
                okey = f"{key}/{other.index}"
                cstatus = CONN_CONNECTED if other.index in sees else CONN_INVALID
                connections[str(other.index)] = {
                    "host": other.ip, "status": cstatus, "changed": prev.get(okey) != cstatus,
                }
                seen[okey] = cstatus
        node = {
            "status": status,
            "host": m.ip,
            "connections": connections,
            "changed": prev.get(key) != status,
            "version": version,
        }
        if hostnames:
            node["hostName"] = m.entry
        nodes[key] = node
        seen[key] = status
    report = {
        "nodes": nodes,
        "timestamp": format_timestamp(now),
        "status": domain_status(self_is_member, statuses),
    }
    return report, seen


def render_domain_text(report: Mapping[str, object]) -> str:
    """Human-readable form of a domain report (`-N` without `-j`)."""
    lines = [f"Domain status: {report.get('status')}", f"Timestamp: {report.get('timestamp')}"]
    nodes = report.get("nodes")
    for key, node in (nodes.items() if isinstance(nodes, dict) else ()):
        name = f" ({node['hostName']})" if node.get("hostName") else ""
        version = node.get("version") or "-"
        lines.append(f"Node #{key} - {node.get('host')}{name} - {node.get('status')} - version: {version}")
        for okey, conn in (node.get("connections") or {}).items():
            lines.append(f"    -> #{okey} {conn.get('host')}: {conn.get('status')}")
    return "\n".join(lines) + "\n"


# --- command service target ------------------------------------------------------------


@dataclass(frozen=True)
class CommandTarget:
    """Where the command service listens: a Unix socket path, or a TCP host and port."""

    unix_path: str = ""
    host: str = ""
    port: int = 0

    def describe(self) -> str:
        return self.unix_path if self.unix_path else f"{self.host}:{self.port}"


def command_host(cfg: ImexConfig, self_ip: str | None) -> str:
    """TCP address of the command service: IMEX_CMD_BIND_INTERFACE_IP, else the node address."""
    return cfg.cmd_bind_ip or self_ip or "127.0.0.1"
