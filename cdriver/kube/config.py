"""Where the API server is and how to authenticate: kubeconfig files or the pod's account.

Reads settings only; `cdriver.kube.connection` turns them into a connection. Supported:
kubeconfig ``current-context`` (or a named context), clusters with ``server``,
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``tls-server-name``, users
with ``client-certificate(-data)``/``client-key(-data)``, ``token``, ``tokenFile``,
``username``/``password``; several files in ``$KUBECONFIG`` merge (the first file to name an
entry wins). In a pod: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted service account.
Kubeconfigs needing credential plugins (``exec``, ``auth-provider``) or a ``proxy-url`` raise
`UnsupportedKubeconfig`, which the caller answers with the `kubernetes` package's loader.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cdriver.decoding import type_name, wrong_type
from cdriver.errors import CdriverError

ENV_KUBECONFIG = "KUBECONFIG"
ENV_KUBERNETES_SERVICE_HOST = "KUBERNETES_SERVICE_HOST"  # set in every pod: the API Service
ENV_KUBERNETES_SERVICE_PORT = "KUBERNETES_SERVICE_PORT"
#: A pod's mounted service account: ``token`` (projected, rotated by the kubelet), ``ca.crt``.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_TOKEN_NAME = "token"
SERVICE_ACCOUNT_CA_NAME = "ca.crt"

#: Kubeconfig keys our own loader does not handle (the `kubernetes` package's loader does).
UNSUPPORTED_USER_KEYS = ("exec", "auth-provider")
UNSUPPORTED_CLUSTER_KEYS = ("proxy-url",)


class KubeConfigError(CdriverError):
    """The API server connection settings could not be loaded."""


class UnsupportedKubeconfig(KubeConfigError):
    """The kubeconfig needs a feature only the `kubernetes` package implements."""

    def __init__(self, message: str, paths: list[str], context: str | None) -> None:
        super().__init__(message)
        self.paths = paths
        self.context = context


@dataclass(frozen=True)
class ConnectionSettings:
    """Everything needed to reach and authenticate to one API server.

    ``labels`` maps a setting name (``ca``, ``client_cert``, ``client_key``, ``token_file``)
    to where it came from (file, entry, field), for error messages.
    """

    server: str
    source: str
    ca_file: str = ""
    ca_data: bytes = b""
    insecure: bool = False
    tls_server_name: str = ""
    client_cert_file: str = ""
    client_cert_data: bytes = b""
    client_key_file: str = ""
    client_key_data: bytes = b""
    token: str = ""
    token_file: str = ""
    username: str = ""
    password: str = ""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def https(self) -> bool:
        return self.server.lower().startswith("https://")

    def describe(self, name: str) -> str:
        """Where setting ``name`` came from, e.g. ``kubeconfig F: user "u" client-key``."""
        return self.labels.get(name) or f"{self.source}: {name}"


# -- reading files ---------------------------------------------------------------------------
def read_kubeconfig(path: str) -> dict[str, Any]:
    """Parse one kubeconfig file; `KubeConfigError` naming the file if it is unusable."""
    import yaml  # deferred: only kubeconfig users pay for it

    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise KubeConfigError(
            f"kubeconfig {path!r} does not exist; pass --kubeconfig with an existing file or "
            "unset KUBECONFIG to use the in-cluster account"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KubeConfigError(f"kubeconfig {path!r} cannot be read: {exc}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise KubeConfigError(
            f"kubeconfig {path!r} is not valid YAML ({exc}); check it with "
            f"kubectl --kubeconfig {path} config view"
        ) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise KubeConfigError(
            f"kubeconfig {path!r}: expected an object with clusters, users and contexts at the "
            f"top, got {type_name(doc)}"
        )
    return doc


# -- merging and resolving (pure) --------------------------------------------------------------
@dataclass
class _Entry:
    path: str
    body: dict[str, Any]


def _named(path: str, doc: dict[str, Any], kind: str, inner: str, into: dict[str, _Entry]) -> None:
    """Add ``doc[kind]`` entries (``{name, <inner>: {...}}``) to ``into``, first one wins."""
    items = doc.get(kind)
    if items is None:
        return
    if not isinstance(items, list):
        raise KubeConfigError(f"kubeconfig {path!r}: {kind} must be a list of named entries")
    for index, item in enumerate(items):
        where = f"kubeconfig {path!r}: {kind}[{index}]"
        if not isinstance(item, dict) or not item.get("name"):
            raise KubeConfigError(f"{where} has no name")
        body = item.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise KubeConfigError(f"{where} ({item['name']!r}): {inner}: {wrong_type('an object', body)}")
        into.setdefault(str(item["name"]), _Entry(path, body))


def _text(entry: _Entry, key: str, where: str) -> str:
    value = entry.body.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise KubeConfigError(f"{where} {key}: expected a string, found {type(value).__name__}")
    return str(value)


def _file(entry: _Entry, key: str, where: str) -> str:
    """A path field; relative paths are relative to the kubeconfig that holds the entry."""
    value = _text(entry, key, where)
    if not value:
        return ""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = Path(entry.path).resolve().parent / path
    return str(path)


def _data(entry: _Entry, key: str, where: str) -> bytes:
    value = _text(entry, key, where)
    if not value:
        return b""
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeConfigError(
            f"{where} {key}: not valid base64; embed the PEM file with base64 -w0 FILE"
        ) from None


def settings_from_kubeconfigs(
    docs: list[tuple[str, dict[str, Any]]], context: str | None = None,
) -> ConnectionSettings:
    """Resolve the chosen context of merged kubeconfig documents ``[(path, doc), ...]``."""
    names = ", ".join(repr(p) for p, _ in docs)
    clusters: dict[str, _Entry] = {}
    users: dict[str, _Entry] = {}
    contexts: dict[str, _Entry] = {}
    current = ""
    for path, doc in docs:
        _named(path, doc, "clusters", "cluster", clusters)
        _named(path, doc, "users", "user", users)
        _named(path, doc, "contexts", "context", contexts)
        current = current or str(doc.get("current-context") or "")
    chosen = context or current
    if not chosen:
        raise KubeConfigError(
            f"kubeconfig {names} sets no current-context; set one with kubectl config "
            "use-context NAME"
        )
    ctx = contexts.get(chosen)
    if ctx is None:
        field_name = "context" if context else "current-context"
        known = ", ".join(sorted(contexts)) or "none"
        raise KubeConfigError(
            f"kubeconfig {names}: {field_name} {chosen!r} is not in contexts (known: {known})"
        )
    where_ctx = f"kubeconfig {ctx.path!r}: context {chosen!r}"
    cluster_name = _text(ctx, "cluster", where_ctx)
    if not cluster_name:
        raise KubeConfigError(f"{where_ctx} names no cluster")
    cluster = clusters.get(cluster_name)
    if cluster is None:
        known = ", ".join(sorted(clusters)) or "none"
        raise KubeConfigError(
            f"{where_ctx}: cluster {cluster_name!r} is not in clusters (known: {known})"
        )
    user_name = _text(ctx, "user", where_ctx)
    user = _Entry(ctx.path, {})
    if user_name:
        found = users.get(user_name)
        if found is None:
            known = ", ".join(sorted(users)) or "none"
            raise KubeConfigError(
                f"{where_ctx}: user {user_name!r} is not in users (known: {known})"
            )
        user = found
    where_c = f"kubeconfig {cluster.path!r}: cluster {cluster_name!r}"
    where_u = f"kubeconfig {user.path!r}: user {user_name!r}"
    for key in UNSUPPORTED_USER_KEYS:
        if user.body.get(key):
            raise UnsupportedKubeconfig(f"{where_u} uses {key}", [p for p, _ in docs], context)
    for key in UNSUPPORTED_CLUSTER_KEYS:
        if cluster.body.get(key):
            raise UnsupportedKubeconfig(f"{where_c} uses {key}", [p for p, _ in docs], context)

    server = _text(cluster, "server", where_c)
    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise KubeConfigError(
            f"{where_c} server {server!r} is not a valid URL ({exc}); expected https://HOST:PORT"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeConfigError(
            f"{where_c} server {server!r} is not an http(s) URL; expected https://HOST:PORT"
        )
    insecure = cluster.body.get("insecure-skip-tls-verify") in (True, "true", "True")
    settings = ConnectionSettings(
        server=server,
        source=f"kubeconfig {ctx.path!r} (context {chosen!r})",
        ca_file=_file(cluster, "certificate-authority", where_c),
        ca_data=_data(cluster, "certificate-authority-data", where_c),
        insecure=insecure,
        tls_server_name=_text(cluster, "tls-server-name", where_c),
        client_cert_file=_file(user, "client-certificate", where_u),
        client_cert_data=_data(user, "client-certificate-data", where_u),
        client_key_file=_file(user, "client-key", where_u),
        client_key_data=_data(user, "client-key-data", where_u),
        token=_text(user, "token", where_u),
        token_file=_file(user, "tokenFile", where_u),
        username=_text(user, "username", where_u),
        password=_text(user, "password", where_u),
        labels={
            "ca": f"{where_c} certificate-authority"
                  + ("-data" if cluster.body.get("certificate-authority-data") else ""),
            "client_cert": f"{where_u} client-certificate"
                           + ("-data" if user.body.get("client-certificate-data") else ""),
            "client_key": f"{where_u} client-key"
                          + ("-data" if user.body.get("client-key-data") else ""),
            "token_file": f"{where_u} tokenFile",
        },
    )
    has_cert = bool(settings.client_cert_data or settings.client_cert_file)
    has_key = bool(settings.client_key_data or settings.client_key_file)
    if has_cert != has_key:
        missing = "client-key(-data)" if has_cert else "client-certificate(-data)"
        raise KubeConfigError(f"{where_u} has a client {'certificate' if has_cert else 'key'} "
                              f"but no {missing}; give both or neither")
    return settings


def in_cluster(env: Mapping[str, str]) -> bool:
    """True inside a pod: the API Service's host and port are in the environment."""
    return bool(env.get(ENV_KUBERNETES_SERVICE_HOST)) and bool(
        env.get(ENV_KUBERNETES_SERVICE_PORT))


def in_cluster_settings(
    env: Mapping[str, str], account_dir: str = SERVICE_ACCOUNT_DIR,
) -> ConnectionSettings:
    """The pod's service account: API Service address from the environment, token + CA."""
    host = env.get(ENV_KUBERNETES_SERVICE_HOST, "")
    port = env.get(ENV_KUBERNETES_SERVICE_PORT, "")
    if not port.isdigit():
        raise KubeConfigError(
            f"{ENV_KUBERNETES_SERVICE_PORT}={port!r} is not a port number; unset it or pass "
            "--kubeconfig"
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    where = "in-cluster service account"
    return ConnectionSettings(
        server=f"https://{host}:{port}",
        source=where,
        ca_file=os.path.join(account_dir, SERVICE_ACCOUNT_CA_NAME),
        token_file=os.path.join(account_dir, SERVICE_ACCOUNT_TOKEN_NAME),
        labels={"ca": f"{where} CA", "token_file": f"{where} token"},
    )


# -- effects: choosing the source, checking files ----------------------------------------------
def check_files(settings: ConnectionSettings) -> None:
    """`KubeConfigError` naming the field if a file the settings point at does not exist."""
    checks = (("token_file", settings.token_file, not settings.token),
              ("ca", settings.ca_file, not settings.ca_data and not settings.insecure),
              ("client_cert", settings.client_cert_file, not settings.client_cert_data),
              ("client_key", settings.client_key_file, not settings.client_key_data))
    for name, path, used in checks:
        if path and used and not os.path.isfile(path):
            hint = ("mount the pod's service account (automountServiceAccountToken) or pass "
                    "--kubeconfig") if settings.source.startswith("in-cluster") else \
                "fix the path or embed the file's content in the matching -data field"
            raise KubeConfigError(f"{settings.describe(name)} {path!r} does not exist; {hint}")


def resolve_settings(
    kubeconfig: str | None = None, context: str | None = None,
    env: Mapping[str, str] | None = None, home: str | None = None,
) -> ConnectionSettings:
    """Settings from the given kubeconfig, else ``$KUBECONFIG`` (paths joined by ``:``), else
    the in-cluster service account, else ``~/.kube/config``."""
    env = os.environ if env is None else env
    source = kubeconfig or env.get(ENV_KUBECONFIG) or ""
    if source:
        paths = [p for p in source.split(os.pathsep) if p]
        settings = settings_from_kubeconfigs([(p, read_kubeconfig(p)) for p in paths], context)
    elif in_cluster(env):
        settings = in_cluster_settings(env)
    else:
        default = Path(home or os.path.expanduser("~")) / ".kube" / "config"
        if not default.is_file():
            raise KubeConfigError(
                "no Kubernetes credentials: pass --kubeconfig PATH, set KUBECONFIG, or run "
                "inside a pod with a service account"
            )
        settings = settings_from_kubeconfigs([(str(default), read_kubeconfig(str(default)))],
                                             context)
    check_files(settings)
    return settings
