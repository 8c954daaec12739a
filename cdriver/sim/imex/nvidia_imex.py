"""`nvidia-imex` stand-in: a NO GPU mode IMEX daemon with real peer connections.

Reads the real config keys (`-c file`; LOG_LEVEL filters its log as nvidia-imex's does) and
the nodes config (IPs, or names resolved through the hosts file), listens for peers on
SERVER_PORT and for commands on IMEX_CMD_PORT (and IMEX_CMD_UNIX_DOMAIN_PATH), keeps a
heartbeating TCP link to every peer, retries lost peers with backoff, re-reads the peer list
on SIGUSR1 and exits cleanly on SIGTERM, notifying its peers. Peers are known as the real
daemon knows them: node N is the Nth nodes config entry, and a connecting daemon is node N
when it says so and its node map is this one's (see `protocol`); a notification of shutdown
from node N drops every link with node N. A config it cannot use, or a port already taken, is
reported on stderr with a non-zero exit.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from cdriver.errors import CdriverError
from cdriver.imex.config import (
    DEFAULT_IMEX_CONFIG,
    IMEX_DAEMON_BINARY,
    KEY_BIND_INTERFACE_IP,
    KEY_CMD_BIND_INTERFACE_IP,
    KEY_CMD_PORT,
    KEY_CMD_UNIX_DOMAIN_PATH,
    KEY_SERVER_PORT,
    ImexConfig,
    read_config,
    read_nodes_config,
)
from cdriver.imex.hosts import read_hosts_file
from cdriver.imex.settings import log_threshold
from cdriver.sim.imex import protocol

PROG = IMEX_DAEMON_BINARY
COMMAND_TIMEOUT = 5.0


class StartupError(CdriverError):
    """The daemon cannot start (address, port or socket problem)."""


@dataclass(eq=False)
class Link:
    """One live TCP connection with node `peer` (either direction), at `address`."""

    peer: int
    address: str
    writer: asyncio.StreamWriter
    outbound: bool
    version: str
    last_rx: float
    sees: frozenset[int] = field(default_factory=frozenset)


class StandinDaemon:
    """One stand-in IMEX daemon; `run()` serves until SIGTERM/SIGINT."""

    def __init__(self, config_path: str, timing: protocol.Timing, hosts_path: str, log: logging.Logger) -> None:
        self.config_path = config_path
        self.timing = timing
        self.hosts_path = hosts_path
        self.log = log
        self.cfg: ImexConfig = read_config(config_path)
        self.node_map = ""
        self.members = self._load_members()
        self_ip = protocol.choose_self_address(self.cfg, self.members, protocol.local_addresses())
        if self_ip is None:
            raise StartupError(
                f"cannot tell which nodes config entry is this node: none of "
                f"{[m.entry for m in self.members]} is an address of this machine; set "
                f"{KEY_BIND_INTERFACE_IP} or {KEY_CMD_BIND_INTERFACE_IP} in {config_path}"
            )
        self.self_ip = self_ip
        self.self_index = protocol.self_index(self.members, self_ip)  # read once: the node ID
        self.state = "STARTING"
        self.links: dict[int, set[Link]] = {}
        self.dialers: dict[tuple[int, str], asyncio.Task[None]] = {}
        self.wake: dict[tuple[int, str], asyncio.Event] = {}
        self.previous_report: dict[str, str] = {}
        self.servers: list[asyncio.AbstractServer] = []
        self.unix_path_created = ""
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- configuration -------------------------------------------------------------------

    def _load_members(self) -> list[protocol.Member]:
        entries = read_nodes_config(self.cfg.node_config_file)
        hosts_text = read_hosts_file(self.hosts_path)
        self.node_map = protocol.node_map_digest(entries)
        return protocol.resolve_members(entries, hosts_text)

    def peers(self) -> dict[int, str]:
        """Node ID -> resolved address of every member other than this node."""
        return {m.index: m.ip for m in self.members
                if m.ip is not None and m.ip != self.self_ip and m.index != self.self_index}

    def peer_ips(self) -> set[str]:
        """Resolved member addresses other than this node."""
        return set(self.peers().values())

    def describe(self, index: int | None) -> str:
        """`node N - <nodes config entry>`, as nvidia-imex names a peer in its log."""
        entry = next((m.entry for m in self.members if m.index == index), "?")
        return f"node {index} - {entry}"

    # --- lifecycle -----------------------------------------------------------------------

    async def run(self) -> int:
        """Listen, connect to peers, serve until asked to stop; returns the exit code."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self._listen()
        loop.add_signal_handler(signal.SIGTERM, self._request_stop, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, self._request_stop, "SIGINT")
        loop.add_signal_handler(signal.SIGUSR1, self._on_sigusr1)
        self.state = protocol.STATE_READY
        self.log.info(
            "%s: %s at %s ready (NO GPU mode); %d of %d nodes config entries resolved; peers: %s",
            self.config_path, self.describe(self.self_index), self.self_ip, sum(m.ip is not None for m in self.members),
            len(self.members), ", ".join(sorted(self.peer_ips())) or "none",
        )
        if self.self_ip not in {m.ip for m in self.members}:
            self.log.warning("this node (%s) is not listed in %s", self.self_ip, self.cfg.node_config_file)
        self._sync_dialers()
        await self._stop.wait()
        await self._shutdown()
        return 0

    def _request_stop(self, name: str) -> None:
        self.log.info("%s received, shutting down", name)
        self.state = protocol.STATE_SHUTTING_DOWN
        if self._stop is not None:
            self._stop.set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _listen(self) -> None:
        cfg = self.cfg
        self.servers.append(
            await _start_tcp(
                self._on_peer, self.self_ip, cfg.server_port, KEY_SERVER_PORT, KEY_BIND_INTERFACE_IP
            )
        )
        if not cfg.cmd_enabled:
            self.log.info("command service disabled (IMEX_CMD_ENABLED=0)")
            return
        host = protocol.command_host(cfg, self.self_ip)
        self.servers.append(
            await _start_tcp(self._on_command, host, cfg.cmd_port, KEY_CMD_PORT, KEY_CMD_BIND_INTERFACE_IP)
        )
        if cfg.cmd_unix_path:
            _clear_stale_socket(cfg.cmd_unix_path)
            try:
                server = await asyncio.start_unix_server(
                    self._on_command, path=cfg.cmd_unix_path, limit=protocol.MAX_LINE
                )
            except OSError as e:
                raise StartupError(
                    f"cannot listen on Unix socket {cfg.cmd_unix_path} ({KEY_CMD_UNIX_DOMAIN_PATH}): "
                    f"{e.strerror or e}"
                ) from None
            self.servers.append(server)
            self.unix_path_created = cfg.cmd_unix_path
        self.log.info(
            "listening: peers %s:%d, commands %s:%d%s", self.self_ip, cfg.server_port, host, cfg.cmd_port,
            f" and {cfg.cmd_unix_path}" if cfg.cmd_unix_path else "",
        )

    async def _shutdown(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.dialers.values()):
            task.cancel()
        await self._notify_shutdown()
        for links in self.links.values():
            for link in list(links):
                link.writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2)
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 2)
            except TimeoutError:
                pass
        if self.unix_path_created:
            try:
                os.unlink(self.unix_path_created)
            except OSError:
                pass
        self.log.info("clean shutdown")

    async def _notify_shutdown(self) -> None:
        """Tell every connected peer that this node is going away (best effort, bounded)."""
        message = protocol.encode(protocol.shutdown(self.self_index))
        links = [link for links in self.links.values() for link in links]
        for link in links:
            link.writer.write(message)

        async def drain(link: Link) -> None:
            try:
                await asyncio.wait_for(link.writer.drain(), self.timing.heartbeat)
            except (OSError, TimeoutError, RuntimeError):
                pass

        if links:
            await asyncio.gather(*(drain(link) for link in links))

    # --- SIGUSR1 -------------------------------------------------------------------------

    def _on_sigusr1(self) -> None:
        before = self.peer_ips()
        try:
            members = self._load_members()
        except CdriverError as e:
            self.log.error("SIGUSR1: %s; keeping the previous peer list", e)
            return
        self.members = members
        after = self.peer_ips()
        self.log.info(
            "SIGUSR1: re-read %s: %d entries, %d resolved; added: %s; removed: %s",
            self.cfg.node_config_file, len(members), sum(m.ip is not None for m in members),
            ", ".join(sorted(after - before)) or "none", ", ".join(sorted(before - after)) or "none",
        )
        self._sync_dialers()

    def _sync_dialers(self) -> None:
        wanted = set(self.peers().items())
        for key in sorted(wanted - set(self.dialers)):
            self.wake[key] = asyncio.Event()
            self.dialers[key] = self._spawn(self._dial_loop(*key))
        for key in sorted(set(self.dialers) - wanted):
            self.dialers.pop(key).cancel()
            self.wake.pop(key, None)
            index, ip = key
            for link in list(self.links.get(index, ())):
                if link.outbound and link.address == ip:
                    link.writer.close()

    # --- peers ---------------------------------------------------------------------------

    def connected_peers(self) -> set[int]:
        """Node IDs with at least one live link."""
        return {index for index, links in self.links.items() if links}

    def _hello(self) -> bytes:
        return protocol.encode(protocol.hello(self.self_ip, self.state, self.self_index, self.node_map))

    async def _dial_loop(self, index: int, ip: str) -> None:
        attempt = 0
        wake = self.wake[(index, ip)]
        port = self.cfg.server_port
        while True:
            wake.clear()
            writer = None
            try:
                local = (self.self_ip, 0) if _same_family(ip, self.self_ip) else None
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(ip, port, local_addr=local, limit=protocol.MAX_LINE),
                    self.timing.peer_timeout,
                )
                writer.write(self._hello())
                await writer.drain()
                line = await asyncio.wait_for(reader.readline(), self.timing.peer_timeout)
                if not line:
                    raise ConnectionError("peer closed the connection before its hello")
                answer = protocol.parse_hello(protocol.decode(line))
                if answer.node_map != self.node_map:
                    raise protocol.ProtocolError(
                        f"its node map ({answer.node_map}) is not this node's ({self.node_map})")
            except (OSError, TimeoutError, CdriverError, ValueError) as e:
                if writer is not None:
                    writer.close()
                attempt += 1
                delay = protocol.retry_delay(attempt, self.timing)
                level = logging.INFO if attempt == 1 else logging.DEBUG
                self.log.log(level, "%s at %s:%d unreachable (%s); retry %d in %.1fs",
                             self.describe(index), ip, port, _reason(e), attempt, delay)
                try:
                    await asyncio.wait_for(wake.wait(), delay)
                except TimeoutError:
                    pass
                continue
            attempt = 0
            await self._run_link(Link(index, ip, writer, True, answer.version, time.monotonic()), reader)
            attempt = 1
            try:
                await asyncio.wait_for(wake.wait(), protocol.retry_delay(1, self.timing))
            except TimeoutError:
                pass

    async def _on_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            line = await asyncio.wait_for(reader.readline(), self.timing.peer_timeout)
            peer = protocol.parse_hello(protocol.decode(line))
            why = protocol.refusal(peer, self.node_map, self.self_index, len(self.members))
            if why is not None:
                self.log.warning("refused the connection of %s: %s", peer.address, why)
                writer.write(protocol.encode(protocol.refused(why)))
                await writer.drain()
                writer.close()
                return
            writer.write(self._hello())
            await writer.drain()
        except (OSError, TimeoutError, CdriverError, ValueError) as e:
            self.log.debug("rejected peer connection: %s", _reason(e))
            writer.close()
            return
        node = peer.index
        assert node is not None  # refusal() accepts only a node of the map
        if not any(link.outbound for link in self.links.get(node, ())):
            for (index, _ip), wake in self.wake.items():
                if index == node:
                    wake.set()  # the peer is back: reconnect now instead of after the backoff
        await self._run_link(Link(node, peer.address, writer, False, peer.version, time.monotonic()), reader)

    async def _run_link(self, link: Link, reader: asyncio.StreamReader) -> None:
        links = self.links.setdefault(link.peer, set())
        if not links:
            self.log.info("%s connected at %s (version %s)", self.describe(link.peer), link.address,
                          link.version or "?")
        links.add(link)
        beats = self._spawn(self._heartbeats(link))
        reason = "connection closed"
        try:
            while True:
                line = await asyncio.wait_for(reader.readline(), self.timing.peer_timeout)
                if not line:
                    break
                msg = protocol.decode(line)
                link.last_rx = time.monotonic()
                if msg.get("type") == protocol.MSG_HEARTBEAT:
                    seen = msg.get("connected")
                    seen = seen if isinstance(seen, list) else []
                    link.sees = frozenset(x for x in seen if isinstance(x, int) and not isinstance(x, bool))
                elif msg.get("type") == protocol.MSG_SHUTDOWN:
                    reason = "peer is shutting down"
                    self._node_shut_down(link)
                    break
        except TimeoutError:
            reason = f"no heartbeat for {self.timing.peer_timeout:g}s"
        except (OSError, CdriverError, ValueError) as e:
            reason = _reason(e)
        except asyncio.CancelledError:
            reason = "shutting down"
            raise
        finally:
            beats.cancel()
            link.writer.close()
            links.discard(link)
            if not links and self.state == protocol.STATE_READY:
                self.log.warning("peer %s at %s lost: %s", self.describe(link.peer), link.address, reason)

    def _node_shut_down(self, link: Link) -> None:
        """A notification of shutdown from node N: every link with node N goes (whoever it
        came from: node N is whoever announced that node ID with this node map)."""
        self.log.info("received notification of shutdown from %s (at %s)", self.describe(link.peer), link.address)
        others = [other for other in self.links.get(link.peer, ()) if other is not link]
        if others:
            self.log.warning("node disconnect event for %s: closing its %d other connection(s)",
                             self.describe(link.peer), len(others))
        for other in others:
            other.writer.close()

    async def _heartbeats(self, link: Link) -> None:
        seq = 0
        try:
            while True:
                seq += 1
                link.writer.write(protocol.encode(protocol.heartbeat(seq, self.state, self.connected_peers())))
                await asyncio.wait_for(link.writer.drain(), self.timing.peer_timeout)
                await asyncio.sleep(self.timing.heartbeat)
        except (OSError, TimeoutError, RuntimeError):
            link.writer.close()

    # --- command service -----------------------------------------------------------------

    def domain_report(self, hostnames: bool = False) -> dict:
        """The `-N -j` document for this node's view of the domain."""
        views = {
            index: protocol.PeerView(
                connected=True,
                version=next(iter(links)).version,
                sees=frozenset[int]().union(*(link.sees for link in links)),
            )
            for index, links in self.links.items()
            if links
        }
        report, self.previous_report = protocol.build_domain_report(
            self.members, self.self_ip, self.state, views, time.time(), self.previous_report, hostnames
        )
        return report

    async def _on_command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), COMMAND_TIMEOUT)
            msg = protocol.decode(line)
            cmd = msg.get("cmd")
            if cmd == protocol.CMD_QUERY:
                reply: dict = {"ok": True, "status": self.state}
            elif cmd == protocol.CMD_DOMAIN:
                reply = {"ok": True, "domain": self.domain_report(bool(msg.get("hostnames")))}
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
            writer.write(protocol.encode(reply))
            await writer.drain()
        except (OSError, TimeoutError, CdriverError, ValueError) as e:
            self.log.debug("command connection failed: %s", _reason(e))
        finally:
            writer.close()


# --- helpers ---------------------------------------------------------------------------


def _reason(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "timed out"
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    return str(e) or type(e).__name__


def _same_family(a: str, b: str) -> bool:
    return ipaddress.ip_address(a).version == ipaddress.ip_address(b).version


async def _start_tcp(handler, host: str, port: int, port_key: str, ip_key: str) -> asyncio.AbstractServer:
    try:
        return await asyncio.start_server(handler, host=host, port=port, limit=protocol.MAX_LINE)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise StartupError(
                f"cannot listen on {host}:{port} ({port_key}): address already in use; another "
                f"nvidia-imex may already serve this address; stop it or change {port_key}"
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise StartupError(
                f"cannot listen on {host}:{port}: {host} is not an address of this machine; fix {ip_key}"
            ) from None
        raise StartupError(f"cannot listen on {host}:{port} ({port_key}): {e.strerror or e}") from None


def _clear_stale_socket(path: str) -> None:
    """Remove a socket file left by a dead daemon; refuse if a live daemon or a non-socket is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise StartupError(
            f"{KEY_CMD_UNIX_DOMAIN_PATH}={path} exists and is not a socket; remove it or pick another path"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise StartupError(f"{KEY_CMD_UNIX_DOMAIN_PATH}={path} is in use by another running daemon")


def _make_logger(cfg: ImexConfig | None) -> logging.Logger:
    log = logging.getLogger("cdriver.sim.imex.nvidia_imex")
    log.propagate = False
    if os.environ.get("CDRIVER_SIM_IMEX_DEBUG"):
        log.setLevel(logging.DEBUG)
    else:  # LOG_LEVEL as nvidia-imex reads it: 0 off .. 4 INFO and above
        log.setLevel(log_threshold(cfg.values) if cfg is not None else logging.INFO)
    handler: logging.Handler
    if cfg is not None and cfg.log_file_name:
        try:
            handler = logging.FileHandler(cfg.log_file_name, mode="a" if cfg.log_append else "w")
        except OSError as e:
            print(f"{PROG}: cannot open LOG_FILE_NAME={cfg.log_file_name}: {e.strerror}; logging to stderr",
                  file=sys.stderr)
            handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("[%(asctime)s] %(levelname)s nvidia-imex(stand-in): %(message)s")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    log.handlers[:] = [handler]
    return log


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description="IMEX daemon stand-in (NO GPU mode) from the cdriver simulation kit.",
    )
    parser.add_argument("-c", dest="config", default=DEFAULT_IMEX_CONFIG,
                        help=f"config file (default {DEFAULT_IMEX_CONFIG})")
    parser.add_argument("--nogpu", "-nogpu", action="store_true",
                        help="accepted for compatibility; the stand-in always runs without GPUs")
    return parser


def set_process_name(name: str = PROG) -> None:
    """Show up as `nvidia-imex` in ps/psutil (the kernel's comm), as the real daemon does.

    Tools that look for a running IMEX service by process name (e.g. `cdriver host-check`)
    then find the stand-in the same way they find the real daemon.
    """
    try:
        with open("/proc/self/comm", "w", encoding="ascii") as f:
            f.write(name[:15])
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for usage errors, 1 for unusable input)."""
    args = build_parser().parse_args(argv)
    set_process_name()
    try:
        timing = protocol.Timing.from_env()
        cfg = read_config(args.config)
        log = _make_logger(cfg)
        log.info("starting with config %s", args.config)
        daemon = StandinDaemon(args.config, timing, protocol.hosts_file_path(), log)
        return asyncio.run(daemon.run())
    except CdriverError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
