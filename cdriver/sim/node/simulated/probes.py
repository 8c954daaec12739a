"""Container probes (startup, liveness, readiness) as kubelet runs them.

`ProbeTracker` is the pure threshold logic; `ProbeWorker` runs one probe of one container run
in a thread (initial delay, period, timeout) and reports state changes. Exec probes run the
command inside the container's namespaces with its environment; httpGet, tcpSocket and grpc
probes dial the pod IP (the node's address); a grpc probe calls grpc.health.v1.Health/Check
for its service and passes only on SERVING, as kubelet's does.
"""

from __future__ import annotations

import logging
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

STARTUP = "Startup"
LIVENESS = "Liveness"
READINESS = "Readiness"
MAX_OUTPUT = 1024


@dataclass
class ProbeSettings:
    """A probe's timing fields with Kubernetes' defaults."""

    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_probe(cls, probe: dict[str, Any]) -> ProbeSettings:
        return cls(
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or 10),
            timeout=float(probe.get("timeoutSeconds") or 1),
            success_threshold=int(probe.get("successThreshold") or 1),
            failure_threshold=int(probe.get("failureThreshold") or 3),
        )


class ProbeTracker:
    """Turns single probe results into the probe's state, honouring the thresholds."""

    def __init__(self, settings: ProbeSettings, initial: bool | None) -> None:
        self.settings = settings
        self.state = initial
        self.successes = 0
        self.failures = 0

    def record(self, ok: bool) -> bool:
        """Add one result; returns True when the state changed."""
        if ok:
            self.successes += 1
            self.failures = 0
            if self.state is not True and self.successes >= self.settings.success_threshold:
                self.state = True
                return True
        else:
            self.failures += 1
            self.successes = 0
            if self.state is not False and self.failures >= self.settings.failure_threshold:
                self.state = False
                return True
        return False


def initial_state(kind: str) -> bool | None:
    """Liveness passes until proven otherwise; readiness and startup start failed/unknown."""
    return True if kind == LIVENESS else (False if kind == READINESS else None)


# --- single checks ----------------------------------------------------------------------

ExecRunner = Callable[[list[str], float], subprocess.CompletedProcess]


def check_exec(run: ExecRunner, command: list[str], timeout: float) -> tuple[bool, str]:
    try:
        result = run(command, timeout)
    except subprocess.TimeoutExpired:
        return False, f"command {command!r} timed out after {timeout:g}s"
    except OSError as exc:
        return False, f"command {command!r} could not run: {exc}"
    output = (result.stdout or b"") + (result.stderr or b"")
    text = output.decode(errors="replace").strip()[:MAX_OUTPUT]
    if result.returncode == 0:
        return True, text
    return False, text or f"command {command!r} exited with code {result.returncode}"


def check_http(spec: dict[str, Any], default_host: str, timeout: float, ports: dict[str, int]) -> tuple[bool, str]:
    port = resolve_port(spec.get("port"), ports)
    host = spec.get("host") or default_host
    scheme = str(spec.get("scheme") or "HTTP").lower()
    path = spec.get("path") or "/"
    url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
    request = urllib.request.Request(url, headers={h["name"]: h["value"] for h in spec.get("httpHeaders") or []})
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as resp:
            code = resp.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except (urllib.error.URLError, OSError) as exc:
        return False, f"Get {url!r}: {getattr(exc, 'reason', exc)}"
    if 200 <= code < 400:
        return True, ""
    return False, f"HTTP probe failed with statuscode: {code}"


def check_tcp(spec: dict[str, Any], default_host: str, timeout: float, ports: dict[str, int]) -> tuple[bool, str]:
    port = resolve_port(spec.get("port"), ports)
    host = spec.get("host") or default_host
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"dial tcp {host}:{port}: {exc}"


def check_grpc(spec: dict[str, Any], host: str, timeout: float) -> tuple[bool, str]:
    """grpc.health.v1 Check of `spec["service"]` on host:`spec["port"]`; passes on SERVING."""
    import grpc

    from cdriver.dra.gen.grpc_health.v1 import health_pb2, health_pb2_grpc

    target = f"{host}:{int(spec.get('port') or 0)}"
    try:
        with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=spec.get("service") or ""), timeout=timeout)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return False, f"timeout: health rpc did not complete within {timeout:g}s"
        return False, f"error: health rpc probe failed: {exc.code().name}: {exc.details()}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return False, f'service unhealthy (responded with "{name}")'
    return True, ""


def resolve_port(port: Any, named: dict[str, int]) -> int:
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    if port in named:
        return named[port]
    raise ValueError(f"probe port {port!r} is neither a number nor a named container port")


# --- the worker -----------------------------------------------------------------------------

GATE_POLL_INTERVAL = 0.1


class ProbeWorker:
    """Runs one probe of one container run until stopped."""

    def __init__(self, kind: str, probe: dict[str, Any], check: Callable[[float], tuple[bool, str]],
                 on_change: Callable[[str, bool, str], None], on_failure: Callable[[str, str], None],
                 gate: Callable[[], bool] | None = None, name: str = "", prompt_after_gate: bool = False) -> None:
        self.kind = kind
        self.settings = ProbeSettings.from_probe(probe)
        self.tracker = ProbeTracker(self.settings, initial_state(kind))
        self.check = check
        self.on_change = on_change
        self.on_failure = on_failure
        self.gate = gate  # liveness/readiness wait until the container has started
        # With a startup probe, kubelet runs liveness/readiness as soon as it succeeds.
        self.prompt_after_gate = prompt_after_gate
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"probe-{kind.lower()}-{name}", daemon=True)

    @property
    def state(self) -> bool | None:
        return self.tracker.state

    def start(self) -> ProbeWorker:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        if self._stop.wait(self.settings.initial_delay):
            return
        if self.kind != STARTUP and not self.prompt_after_gate:
            # kubelet's probe worker starts with the pod; its first tick finds the container not
            # yet running, so the first real probe comes one period after the container starts.
            if self._stop.wait(self.settings.period):
                return
        while not self._stop.is_set():
            began = time.monotonic()
            if self.gate is not None and not self.gate():
                # Like kubelet, liveness/readiness run as soon as a startup probe succeeds,
                # not one full period later.
                if self._stop.wait(GATE_POLL_INTERVAL if self.prompt_after_gate else self.settings.period):
                    return
                continue
            try:
                ok, message = self.check(self.settings.timeout)
            except Exception as exc:  # noqa: BLE001 - a broken probe is a failed probe
                ok, message = False, str(exc)
            if self._stop.is_set():
                return
            if not ok:
                self.on_failure(self.kind, message)
            if self.tracker.record(ok):
                self.on_change(self.kind, bool(self.tracker.state), message)
            if self.kind == STARTUP and self.tracker.state is True:
                return  # a startup probe stops once it succeeded
            elapsed = time.monotonic() - began
            if self._stop.wait(max(self.settings.period - elapsed, 0.05)):
                return
