"""An authenticated, thread-safe connection pool to one API server, over urllib3.

`ApiConnection` is what `cdriver.kube.raw.RawClient` sends requests through: ``host``,
``pool`` (a `urllib3.PoolManager`), ``headers()`` (authentication and User-Agent for one
request), ``expire_token()`` (after a 401) and ``close()``. `ApiClientConnection` presents a
`kubernetes.client.ApiClient` the same way, for callers that still build one.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import urllib3

import cdriver
from cdriver.kube.config import ConnectionSettings, KubeConfigError

#: Seconds a bearer token read from a file is reused before the file is read again.
TOKEN_FILE_REFRESH_SECONDS = 60.0

log = logging.getLogger(__name__)

#: Connections kept per host; each long-running watch holds one, workers share the rest.
DEFAULT_POOL_MAXSIZE = 32
#: Default (connect, read) timeout in seconds when a request names none.
DEFAULT_POOL_TIMEOUT = (10.0, 60.0)
#: Connection attempts of an idempotent request (GET) before it fails.
DEFAULT_RETRIES = 3
USER_AGENT = f"cdriver/{cdriver.__version__}"


class Connection(Protocol):
    """What `RawClient` needs from a connection."""

    @property
    def host(self) -> str: ...

    @property
    def pool(self) -> urllib3.PoolManager: ...

    def headers(self) -> dict[str, str]: ...

    def expire_token(self) -> None: ...

    def close(self) -> None: ...


class TokenFile:
    """A bearer token kept in a file, re-read every ``refresh_seconds`` (projected service
    account tokens are rotated by the kubelet). Thread-safe."""

    def __init__(self, path: str, label: str = "token file",
                 refresh_seconds: float = TOKEN_FILE_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.label = label
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._read_at = float("-inf")
        self.token()  # fail now, with the file's name, if it cannot be read

    def token(self) -> str:
        """The current token; the file is read again once the last read is stale."""
        with self._lock:
            now = self._clock()
            if self._token and now - self._read_at < self.refresh_seconds:
                return self._token
            try:
                with open(self.path, encoding="utf-8") as f:
                    text = f.read().strip()
                problem = "" if text else "is empty"
            except (OSError, UnicodeDecodeError) as exc:
                text, problem = "", f"cannot be read ({exc})"
            if problem:
                if not self._token:
                    raise KubeConfigError(f"{self.label} {self.path!r} {problem}")
                log.warning("%s %s %s; keeping the previous token", self.label, self.path,
                            problem)
            else:
                self._token = text
            self._read_at = now
            return self._token

    def expire(self) -> None:
        """Read the file again on the next use (the server rejected the token)."""
        with self._lock:
            self._read_at = float("-inf")


@contextlib.contextmanager
def _pem_path(data: bytes, name: str) -> Iterator[str]:
    """A path the ssl module can read ``data`` from, gone when the block ends: an anonymous
    memory file where the kernel has them, else a private (0600) temporary file."""
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        fd = memfd(f"cdriver-{name}", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix=f"cdriver-{name}-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _ca_text(data: bytes) -> str | bytes:
    """``cadata`` for the ssl module: PEM as text, anything else passed on as DER."""
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        return data


def build_ssl_context(settings: ConnectionSettings) -> ssl.SSLContext:
    """The TLS context for ``settings``: server verification (cluster CA, else system roots,
    or none if insecure) and the client certificate, loaded into memory."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        try:
            if settings.ca_data:
                ctx.load_verify_locations(cadata=_ca_text(settings.ca_data))
            elif settings.ca_file:
                ctx.load_verify_locations(cafile=settings.ca_file)
            else:
                ctx.load_default_certs()
        except (ssl.SSLError, OSError, ValueError) as exc:
            where = settings.describe("ca")
            path = f" {settings.ca_file!r}" if settings.ca_file and not settings.ca_data else ""
            raise KubeConfigError(
                f"{where}{path} is not a usable PEM CA certificate ({exc})"
            ) from None
    if settings.client_cert_data or settings.client_cert_file:
        with contextlib.ExitStack() as stack:
            cert = settings.client_cert_file
            if settings.client_cert_data:
                cert = stack.enter_context(_pem_path(settings.client_cert_data, "cert"))
            key = settings.client_key_file
            if settings.client_key_data:
                key = stack.enter_context(_pem_path(settings.client_key_data, "key"))
            try:
                ctx.load_cert_chain(cert, key or None)
            except (ssl.SSLError, OSError, ValueError) as exc:
                raise KubeConfigError(
                    f"{settings.describe('client_cert')} and {settings.describe('client_key')} "
                    f"are not a PEM certificate and its matching key ({exc})"
                ) from None
    return ctx


class ApiConnection:
    """HTTP(S) to one API server with the credentials of `ConnectionSettings`.

    One `urllib3.PoolManager` (thread-safe; up to ``pool_maxsize`` kept connections, more are
    opened when needed and closed after use). A token file is re-read periodically.
    """

    def __init__(
        self, settings: ConnectionSettings, pool_maxsize: int = DEFAULT_POOL_MAXSIZE,
        timeout: tuple[float, float] = DEFAULT_POOL_TIMEOUT, retries: int = DEFAULT_RETRIES,
        token_refresh_seconds: float = TOKEN_FILE_REFRESH_SECONDS,
    ) -> None:
        self.settings = settings
        self.host = settings.server.rstrip("/")
        self._static: dict[str, str] = {"User-Agent": USER_AGENT}
        self._token_file: TokenFile | None = None
        if settings.token:
            self._static["Authorization"] = f"Bearer {settings.token}"
        elif settings.token_file:
            self._token_file = TokenFile(settings.token_file, settings.describe("token_file"),
                                         token_refresh_seconds)
        elif settings.username or settings.password:
            pair = f"{settings.username}:{settings.password}".encode()
            self._static["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        pool_kw: dict[str, Any] = {}
        if settings.https:
            pool_kw["ssl_context"] = build_ssl_context(settings)
            if settings.insecure:
                pool_kw["assert_hostname"] = False
            elif settings.tls_server_name:
                pool_kw["server_hostname"] = settings.tls_server_name
        self.pool = urllib3.PoolManager(
            num_pools=4, maxsize=max(int(pool_maxsize), 1), block=False,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            retries=urllib3.Retry(total=retries, redirect=False), **pool_kw,
        )

    def headers(self) -> dict[str, str]:
        """Headers every request carries: User-Agent and the (current) credentials."""
        headers = dict(self._static)
        if self._token_file is not None:
            headers["Authorization"] = f"Bearer {self._token_file.token()}"
        return headers

    def expire_token(self) -> None:
        """The server answered 401: read a token file again before the next request."""
        if self._token_file is not None:
            self._token_file.expire()

    def close(self) -> None:
        """Close the pooled connections (the object stays usable; new ones are opened)."""
        self.pool.clear()

    def __repr__(self) -> str:
        return f"ApiConnection({self.host!r}, from {self.settings.source})"


class ApiClientConnection:
    """A `kubernetes.client.ApiClient` behind the `Connection` interface: its pool, and the
    headers (including refreshed tokens) its configuration produces."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client
        self.pool = api_client.rest_client.pool_manager

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host).rstrip("/")

    def headers(self) -> dict[str, str]:
        _, _, headers, _, _ = self.api_client.param_serialize(
            "GET", "/", header_params={}, auth_settings=["BearerToken"]
        )
        return dict(headers or {})

    def expire_token(self) -> None:
        """Nothing to do: the ApiClient's configuration refreshes its own tokens."""

    def close(self) -> None:
        self.api_client.close()


def as_connection(client: Any) -> Connection:
    """``client`` as a `Connection`: an `ApiConnection` (or any object with ``host``,
    ``pool`` and ``headers()``) as is, a `kubernetes.client.ApiClient` wrapped."""
    if hasattr(client, "rest_client") and hasattr(client, "param_serialize"):
        return ApiClientConnection(client)
    if all(hasattr(client, attr) for attr in ("host", "pool", "headers")):
        return client
    raise TypeError(
        f"expected a connection from cdriver.kube.client.load_api_client or a "
        f"kubernetes.client.ApiClient, got {type(client).__name__}"
    )
