"""The kubelet's HTTPS API on a simulated node: container logs, exec and health.

Served on the node's own address and the port published in
``Node.status.daemonEndpoints.kubeletEndpoint.Port``, with a serving certificate from the
cluster CA. Only clients presenting a certificate from that CA whose common name is the API
server's kubelet client (`cdriver.sim.controlplane.pki.KUBELET_CLIENT_USER`) are served; a certificate
from another CA fails the TLS handshake, any other user gets 403.

- ``GET /healthz``
- ``GET /containerLogs/{namespace}/{pod}/{container}`` with ``follow``, ``tailLines``,
  ``previous``, ``timestamps``, ``sinceSeconds``, ``limitBytes``
- ``GET|POST /exec/{namespace}/{pod}/{container}?command=...&input=&output=&error=&tty=``
  over WebSocket (``v5.channel.k8s.io``, else ``v4.channel.k8s.io``): channels 0 stdin,
  1 stdout, 2 stderr, 3 status (a metav1.Status with the exit code), 4 resize, 255 close
  (v5). The Node declares ``ExtendWebSocketsToKubelet`` so kube-apiserver proxies the
  client's WebSocket here unchanged. The command runs in the container's mount and UTS
  namespaces with its environment.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import http.server
import json
import logging
import os
import socket
import ssl
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlparse

from cdriver.sim.node.simulated.container import nsenter_argv
from cdriver.sim.node.simulated.logs import Entry, iter_entries, render
from cdriver.sim.node.simulated.websocket import WebSocketConn, accept_key, choose_protocol

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
PROTOCOL_V5 = "v5.channel.k8s.io"
PROTOCOL_V4 = "v4.channel.k8s.io"
SUPPORTED_PROTOCOLS = (PROTOCOL_V5, PROTOCOL_V4)
#: Node feature that makes kube-apiserver proxy WebSocket streams to the kubelet unchanged.
WEBSOCKET_NODE_FEATURE = "ExtendWebSocketsToKubelet"
FOLLOW_POLL = 0.1
PEER_CLOSE_WAIT = 2.0
#: Seconds between the upgrade and the first message to the client. client-go creates its
#: stream readers only after the upgrade and drops messages for streams it has not created
#: yet; a command quicker than that would lose its output.
FIRST_MESSAGE_DELAY = 0.1


class ContainerSource(Protocol):
    """What the server needs from the node agent."""

    def worker(self, namespace: str, name: str) -> Any: ...


def exit_status(code: int, argv: list[str]) -> dict[str, Any]:
    """The metav1.Status sent on the status channel when the command finished."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {}, "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
                   f"[{' '.join(argv)}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def flag(query: dict[str, list[str]], *names: str) -> bool:
    """A boolean query parameter; several names for one setting (kubelet: input/output/error,
    API server clients: stdin/stdout/stderr)."""
    for name in names:
        if name in query:
            return query[name][-1].lower() in ("1", "true", "yes")
    return False


def filter_since(entries: list[Entry], since: dt.datetime | None) -> list[Entry]:
    if since is None:
        return entries
    out = []
    for e in entries:
        try:
            stamp = dt.datetime.strptime(e.timestamp[:26] + "Z", "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
        except ValueError:
            out.append(e)
            continue
        if stamp >= since:
            out.append(e)
    return out


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        self.server.log.debug("kubelet api %s: " + format, self.client_address[0], *args)

    def setup(self) -> None:
        super().setup()
        self.user = ""

    # -- auth -----------------------------------------------------------------------------
    def _authorized(self) -> bool:
        cert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        subject: Any = (cert or {}).get("subject", ())
        names = dict(x[0] for x in subject)
        self.user = names.get("commonName", "")
        if self.user in self.server.allowed_users:
            return True
        self._error(403, f"Forbidden (user={self.user or 'anonymous'}, verb={self.command.lower()}, "
                         f"resource=nodes, subresource=proxy)")
        return False

    def _error(self, code: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # -- routing ----------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._route()

    def do_POST(self) -> None:  # noqa: N802
        self._route()

    def _route(self) -> None:
        if not self._authorized():
            return
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            if parts == ["healthz"]:
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif len(parts) == 4 and parts[0] == "containerLogs":
                self._logs(parts[1], parts[2], parts[3], query)
            elif len(parts) == 4 and parts[0] == "exec":
                self._exec(parts[1], parts[2], parts[3], query)
            else:
                self._error(404, f"{url.path}: not served by this simulated node (healthz, containerLogs, exec)")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    def _worker(self, namespace: str, pod: str) -> Any:
        worker = self.server.source.worker(namespace, pod)
        if worker is None:
            self._error(404, f"pod {namespace}/{pod} is not running on node {self.server.node_name}")
        return worker

    # -- logs -----------------------------------------------------------------------------------
    def _logs(self, namespace: str, pod: str, container: str, query: dict[str, list[str]]) -> None:
        worker = self._worker(namespace, pod)
        if worker is None:
            return
        if container not in worker.containers.records:
            self._error(400, f"container {container} is not valid for pod {pod}")
            return
        previous = flag(query, "previous")
        path = worker.log_path(container, previous)
        if path is None or not path.exists():
            what = "previous terminated container" if previous else "container"
            self._error(400, f"{what} \"{container}\" in pod \"{pod}\" not found" if previous else
                        f"{what} \"{container}\" in pod \"{pod}\" is waiting to start")
            return
        tail = query.get("tailLines")
        tail_lines = int(tail[-1]) if tail and tail[-1].lstrip("-").isdigit() else None
        timestamps = flag(query, "timestamps")
        since = None
        if query.get("sinceSeconds"):
            since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=int(query["sinceSeconds"][-1]))
        limit = int(query["limitBytes"][-1]) if query.get("limitBytes") else None
        follow = flag(query, "follow") and not previous
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = 0

        def emit(data: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                data = data[: max(limit - sent, 0)]
            if data:
                self.wfile.write(data)
                self.wfile.flush()
                sent += len(data)
            return limit is None or sent < limit

        with open(path, "rb") as f:
            raw = f.read()
            complete = raw[: raw.rfind(b"\n") + 1]
            pending = raw[len(complete):]
            entries = filter_since(list(iter_entries(iter(complete.splitlines(keepends=True)))), since)
            if not emit(render(entries, tail_lines, timestamps)) or not follow:
                return
            while True:
                chunk = f.read()
                if chunk:
                    pending += chunk
                    cut = pending.rfind(b"\n") + 1
                    lines, pending = pending[:cut], pending[cut:]
                    if lines and not emit(render(
                            list(iter_entries(iter(lines.splitlines(keepends=True)))), None, timestamps)):
                        return
                    continue
                if not self.server.log_active(worker, container, path):
                    chunk = f.read()
                    if not chunk:
                        return
                    pending += chunk
                    continue
                time.sleep(FOLLOW_POLL)

    # -- exec -------------------------------------------------------------------------------------
    def _exec(self, namespace: str, pod: str, container: str, query: dict[str, list[str]]) -> None:
        worker = self._worker(namespace, pod)
        if worker is None:
            return
        live = worker.container_info(container)
        if live is None:
            self._error(400, f"container {container} of pod {namespace}/{pod} is not running")
            return
        argv = query.get("command") or []
        if not argv:
            self._error(400, "you must specify at least 1 command")
            return
        if self.headers.get("Upgrade", "").lower() != "websocket":
            self._error(400, "simulated nodes stream exec over WebSocket only (v5.channel.k8s.io or "
                             "v4.channel.k8s.io); use kubectl 1.30 or newer")
            return
        proto = choose_protocol(self.headers.get("Sec-WebSocket-Protocol", ""), SUPPORTED_PROTOCOLS)
        if proto is None:
            self._error(400, f"none of the offered WebSocket protocols is supported; this node speaks "
                             f"{', '.join(SUPPORTED_PROTOCOLS)}")
            return
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers.get("Sec-WebSocket-Key", "")))
        self.send_header("Sec-WebSocket-Protocol", proto)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        ws = WebSocketConn(self.connection, self.rfile)
        ExecSession(ws, proto, live.proc.init_pid, live.env, live.working_dir, argv,
                    stdin=flag(query, "input", "stdin"), stdout=flag(query, "output", "stdout"),
                    stderr=flag(query, "error", "stderr"), tty=flag(query, "tty"), log=self.server.log).run()


class ExecSession:
    """One exec: a process inside the container wired to the WebSocket channels."""

    def __init__(self, ws: WebSocketConn, protocol: str, pid: int, env: dict[str, str], working_dir: str,
                 argv: list[str], stdin: bool, stdout: bool, stderr: bool, tty: bool,
                 log: logging.Logger) -> None:
        self.ws, self.protocol, self.argv, self.log = ws, protocol, argv, log
        self.want_stdin, self.tty = stdin, tty
        self.want_stdout, self.want_stderr = stdout, stderr and not tty
        self.pid, self.env, self.working_dir = pid, env, working_dir
        self.proc: subprocess.Popen | None = None
        self.master: int | None = None
        self.stdin_fd: int | None = None
        self._stdin_lock = threading.Lock()
        self._first_message_at = time.monotonic() + FIRST_MESSAGE_DELAY

    def run(self) -> None:
        try:
            code = self._start_and_wait()
        except OSError as exc:
            self._send(STDERR if self.want_stderr else STDOUT, f"exec failed: {exc}\n".encode())
            code = 126
        self._send(ERROR, json.dumps(exit_status(code, self.argv)).encode())
        self.ws.close()
        deadline = time.monotonic() + PEER_CLOSE_WAIT
        while not self.ws.closed_by_peer and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            self.ws.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, channel: int, data: bytes) -> None:
        wait = self._first_message_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            self.ws.send(bytes([channel]) + data)
        except (OSError, Exception):  # noqa: BLE001 - the client went away
            pass

    def _start_and_wait(self) -> int:
        argv = nsenter_argv(self.pid, self.argv, self.working_dir)
        pumps: list[threading.Thread] = []
        if self.tty:
            master, slave = os.openpty()
            self.master = master
            self.proc = subprocess.Popen(["setsid", "--ctty", "--wait", *argv], stdin=slave, stdout=slave,
                                         stderr=slave, env=self.env, close_fds=True)
            os.close(slave)
            self.stdin_fd = master if self.want_stdin else None
            pumps.append(self._pump(master, STDOUT, pty=True))
        else:
            self.proc = subprocess.Popen(
                argv, env=self.env, close_fds=True,
                stdin=subprocess.PIPE if self.want_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.want_stdout else subprocess.DEVNULL,
                stderr=subprocess.PIPE if self.want_stderr else subprocess.DEVNULL)
            if self.proc.stdin is not None:
                self.stdin_fd = self.proc.stdin.fileno()
            if self.proc.stdout is not None:
                pumps.append(self._pump(self.proc.stdout.fileno(), STDOUT))
            if self.proc.stderr is not None:
                pumps.append(self._pump(self.proc.stderr.fileno(), STDERR))
        reader = threading.Thread(target=self._read_client, name="exec-stdin", daemon=True)
        reader.start()
        code = self.proc.wait()
        for pump in pumps:
            pump.join(5)
        if self.master is not None:
            os.close(self.master)
        self._close_stdin()
        return code if code >= 0 else 128 - code

    def _pump(self, fd: int, channel: int, pty: bool = False) -> threading.Thread:
        def run() -> None:
            while True:
                try:
                    data = os.read(fd, 32768)
                except OSError as exc:
                    if exc.errno == errno.EIO and pty:  # the terminal's last user exited
                        return
                    return
                if not data:
                    return
                self._send(channel, data)

        thread = threading.Thread(target=run, name=f"exec-out-{channel}", daemon=True)
        thread.start()
        return thread

    def _close_stdin(self) -> None:
        with self._stdin_lock:
            if self.stdin_fd is None:
                return
            if self.proc is not None and self.proc.stdin is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
            self.stdin_fd = None

    def _read_client(self) -> None:
        while True:
            message = self.ws.receive()
            if message is None:
                break
            if not message:
                continue
            channel, data = message[0], message[1:]
            if channel == STDIN and data:
                with self._stdin_lock:
                    fd = self.stdin_fd
                    if fd is not None:
                        try:
                            os.write(fd, data)
                        except OSError:
                            pass
            elif channel == RESIZE and self.master is not None:
                try:
                    size = json.loads(data or b"{}")
                    fcntl.ioctl(self.master, termios.TIOCSWINSZ,
                                struct.pack("HHHH", int(size.get("Height", 0)), int(size.get("Width", 0)), 0, 0))
                except (ValueError, OSError, TypeError):
                    pass
            elif channel == CLOSE and data[:1] == bytes([STDIN]) and self.protocol == PROTOCOL_V5:
                if self.tty:
                    continue  # a terminal's input ends with the session
                self._close_stdin()
        # the client went away: stop the command if it still runs
        if self.proc is not None and self.proc.poll() is None and not self.ws.close_sent:
            try:
                self.proc.kill()
            except OSError:
                pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], ssl_context: ssl.SSLContext, source: ContainerSource,
                 node_name: str, allowed_users: tuple[str, ...], log: logging.Logger,
                 log_active: Callable[[Any, str, Path], bool]) -> None:
        self.ssl_context = ssl_context
        self.source = source
        self.node_name = node_name
        self.allowed_users = allowed_users
        self.log = log
        self.log_active = log_active
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        return self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(30)
            request.do_handshake()
            request.settimeout(None)
        except (ssl.SSLError, OSError) as exc:
            self.log.info("kubelet api: TLS handshake with %s refused: %s", client_address[0], exc)
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.log.debug("kubelet api request from %s failed", client_address[0], exc_info=True)


def default_log_active(worker: Any, container: str, path: Path) -> bool:
    """Whether the run writing `path` may still add to it."""
    live = worker.container_info(container)  # reaped (and its output flushed) only after it exited
    return bool(live is not None and live.proc.log_path == path)


class KubeletServer:
    """The HTTPS kubelet API of one node."""

    def __init__(self, source: ContainerSource, node_name: str, host: str, port: int, cert: Path, key: Path,
                 ca: Path, allowed_users: tuple[str, ...], log: logging.Logger | None = None) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(cert), str(key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=str(ca))
        ctx.set_alpn_protocols(["http/1.1"])
        self.log = log or logging.getLogger(__name__)
        try:
            self._server = _Server((host, port), ctx, source, node_name, allowed_users, self.log,
                                   default_log_active)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or port == 0:
                raise
            self.log.info("kubelet API port %s:%d is taken; using a free port", host, port)
            self._server = _Server((host, 0), ctx, source, node_name, allowed_users, self.log, default_log_active)
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    def start(self) -> KubeletServer:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"kubelet-api-{self.port}", daemon=True)
        self._thread.start()
        self.log.info("kubelet API serving on https://%s:%d", self.host, self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
