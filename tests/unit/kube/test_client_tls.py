"""The connection over real TLS: CA and client certificate from files or embedded data,
server name checks, insecure mode, token rotation after a 401, and a kubernetes ApiClient."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdriver.kube.client import load_api_client
from cdriver.kube.config import in_cluster_settings
from cdriver.kube.connection import ApiConnection
from cdriver.kube.errors import ApiError
from cdriver.kube.raw import RawClient
from cdriver.sim.controlplane import pki

REJECTED_TOKEN = "revoked"


class _Echo(BaseHTTPRequestHandler):
    """Answers with the client certificate's CN and the request's credentials."""

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {REJECTED_TOKEN}":
            body, code = {"kind": "Status", "code": 401, "reason": "Unauthorized"}, 401
        else:
            cert = self.connection.getpeercert() or {}
            cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn
                       if k == "commonName"), "")
            body, code = {"cn": cn, "auth": auth, "ua": self.headers.get("User-Agent", "")}, 200
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def server_pki(tmp_path_factory: pytest.TempPathFactory) -> pki.PKIFiles:
    return pki.write_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def echo_server(server_pki: pki.PKIFiles) -> Iterator[str]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server_pki.apiserver_cert, server_pki.apiserver_key)
    ctx.load_verify_locations(server_pki.ca_cert)
    ctx.verify_mode = ssl.CERT_OPTIONAL  # client certificates are checked when sent
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({
        "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return str(path)


def echo(conn: Any) -> dict:
    return RawClient(conn, timeout=(5.0, 5.0)).request("GET", "/echo")


def test_certificates_embedded_as_data(tmp_path: Path, echo_server: str,
                                       server_pki: pki.PKIFiles) -> None:
    path = write(tmp_path / "kc", echo_server,
                 {"certificate-authority-data": b64(server_pki.ca_cert)},
                 {"client-certificate-data": b64(server_pki.admin_cert),
                  "client-key-data": b64(server_pki.admin_key)})
    answer = echo(load_api_client(path))
    assert answer["cn"] == pki.ADMIN_USER
    assert answer["ua"].startswith("cdriver/")


def test_certificate_files_relative_to_the_kubeconfig(tmp_path: Path, echo_server: str,
                                                      server_pki: pki.PKIFiles) -> None:
    (tmp_path / "certs").symlink_to(server_pki.dir)
    path = write(tmp_path / "kc", echo_server,
                 {"certificate-authority": "certs/ca.crt"},
                 {"client-certificate": "certs/admin.crt", "client-key": "certs/admin.key"})
    assert echo(load_api_client(path))["cn"] == pki.ADMIN_USER


def test_server_outside_the_ca_is_refused(tmp_path: Path, echo_server: str) -> None:
    other = pki.write_pki(tmp_path / "other")
    path = write(tmp_path / "kc", echo_server, {"certificate-authority": str(other.ca_cert)},
                 {"token": "t"})
    with pytest.raises(ApiError) as err:
        echo(load_api_client(path))
    assert err.value.unavailable and "CERTIFICATE_VERIFY_FAILED" in str(err.value)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_skip_tls_verify(tmp_path: Path, echo_server: str) -> None:
    path = write(tmp_path / "kc", echo_server, {"insecure-skip-tls-verify": True},
                 {"token": "t"})
    answer = echo(load_api_client(path))
    assert answer == {"cn": "", "auth": "Bearer t", "ua": answer["ua"]}


@pytest.mark.parametrize("name,ok", [("kubernetes.default.svc", True), ("elsewhere", False)])
def test_tls_server_name(tmp_path: Path, echo_server: str, server_pki: pki.PKIFiles,
                         name: str, ok: bool) -> None:
    path = write(tmp_path / "kc", echo_server, {
        "certificate-authority": str(server_pki.ca_cert), "tls-server-name": name},
        {"token": "t"})
    if ok:
        assert echo(load_api_client(path))["auth"] == "Bearer t"
    else:
        with pytest.raises(ApiError, match="elsewhere"):
            echo(load_api_client(path))


def test_in_cluster_token_is_read_again_after_a_401(tmp_path: Path, echo_server: str,
                                                     server_pki: pki.PKIFiles) -> None:
    account = tmp_path / "account"
    account.mkdir()
    (account / "ca.crt").write_bytes(server_pki.ca_cert.read_bytes())
    (account / "token").write_text(REJECTED_TOKEN)
    port = echo_server.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    raw = RawClient(ApiConnection(in_cluster_settings(env, str(account))))
    (account / "token").write_text("rotated")  # the kubelet rotated the projected token
    with pytest.raises(ApiError) as err:
        raw.request("GET", "/echo")  # the cached, now revoked token
    assert err.value.status == 401
    assert raw.request("GET", "/echo")["auth"] == "Bearer rotated"


def test_kubernetes_api_client_is_still_accepted(echo_server: str,
                                                 server_pki: pki.PKIFiles) -> None:
    from kubernetes import client as k8s_client

    configuration = k8s_client.Configuration()
    configuration.host = echo_server
    configuration.ssl_ca_cert = str(server_pki.ca_cert)
    configuration.api_key = {"BearerToken": "legacy"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    api_client = k8s_client.ApiClient(configuration)
    raw = RawClient(api_client)
    assert raw.api_client is api_client and raw.server == echo_server
    assert raw.request("GET", "/echo")["auth"] == "Bearer legacy"
