"""Loading API credentials: kubeconfig files, $KUBECONFIG, the pod's account, clear errors."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdriver.kube.client import KubeConfigError, load_api_client
from cdriver.kube.config import check_files, in_cluster_settings, resolve_settings
from cdriver.kube.connection import ApiConnection, TokenFile
from cdriver.kube.raw import RawClient


def kubeconfig(server: str = "https://127.0.0.1:6443", user: dict | None = None,
               cluster: dict | None = None, current: str = "c") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True,
                                               **(cluster or {})}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "s3cret"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }


def write_kubeconfig(path: Path, server: str = "https://127.0.0.1:6443",
                     token: str = "s3cret", **kw: Any) -> Path:
    doc = kubeconfig(server, **kw) if kw else kubeconfig(server, user={"token": token})
    path.write_text(yaml.safe_dump(doc))
    return path


def test_explicit_kubeconfig(tmp_path: Path) -> None:
    conn = load_api_client(str(write_kubeconfig(tmp_path / "kc")), pool_maxsize=7)
    assert conn.host == "https://127.0.0.1:6443"
    assert conn.pool.connection_pool_kw["maxsize"] == 7
    headers = RawClient(conn)._headers("application/json")
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("cdriver/")


def test_kubeconfig_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_kubeconfig(tmp_path / "kc", server="https://10.1.2.3:7443")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert load_api_client().host == "https://10.1.2.3:7443"


def test_kubeconfig_list_merges_first_file_wins(tmp_path: Path) -> None:
    first = {"current-context": "second-ctx", "users": [{"name": "u", "user": {"token": "one"}}]}
    second = kubeconfig(server="https://10.9.9.9:6443", user={"token": "two"}, current="c")
    second["contexts"].append({"name": "second-ctx", "context": {"cluster": "k", "user": "u"}})
    (tmp_path / "a").write_text(yaml.safe_dump(first))
    (tmp_path / "b").write_text(yaml.safe_dump(second))
    settings = resolve_settings(f"{tmp_path / 'a'}:{tmp_path / 'b'}", env={})
    assert settings.server == "https://10.9.9.9:6443"
    assert settings.token == "one"  # the first file's user entry wins
    assert "second-ctx" in settings.source


def test_named_context_is_used(tmp_path: Path) -> None:
    doc = kubeconfig()
    doc["clusters"].append({"name": "other", "cluster": {"server": "https://10.0.0.7:443"}})
    doc["contexts"].append({"name": "o", "context": {"cluster": "other", "user": "u"}})
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    assert load_api_client(str(path), context="o").host == "https://10.0.0.7:443"


def test_missing_kubeconfig_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(tmp_path / "nope"))
    assert "nope" in str(err.value) and "does not exist" in str(err.value)


@pytest.mark.parametrize("text", ["{{{ not yaml", "", "kind: Config\n", "- a\n- b\n",
                                  "clusters: 3\ncurrent-context: c\n"])
def test_malformed_kubeconfig_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path))
    assert str(path) in str(err.value)


def test_missing_context_names_it_and_the_known_ones(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path), context="prod")
    msg = str(err.value)
    assert str(path) in msg and "'prod'" in msg and "known: c" in msg


def test_current_context_naming_nothing(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(kubeconfig(current="gone")))
    with pytest.raises(KubeConfigError, match="current-context 'gone' is not in contexts"):
        load_api_client(str(path))


@pytest.mark.parametrize("entry,field", [("clusters", "cluster 'k'"), ("users", "user 'u'")])
def test_context_referring_to_missing_entry(tmp_path: Path, entry: str, field: str) -> None:
    doc = kubeconfig()
    doc[entry] = []
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path))
    assert f"{field} is not in {entry}" in str(err.value) and str(path) in str(err.value)


def test_server_must_be_a_url(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", server="127.0.0.1:6443", user={"token": "t"})
    with pytest.raises(KubeConfigError, match="server '127.0.0.1:6443' is not an http"):
        load_api_client(str(path))


def test_missing_certificate_file_names_field_and_path(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={
        "client-certificate": "certs/admin.crt", "client-key": "certs/admin.key"})
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path))
    msg = str(err.value)
    # relative paths are resolved next to the kubeconfig
    assert "user 'u' client-certificate" in msg and str(tmp_path / "certs" / "admin.crt") in msg
    assert str(path) in msg and "does not exist" in msg


def test_missing_ca_file_names_field(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={"token": "t"}, cluster={
        "insecure-skip-tls-verify": False, "certificate-authority": "/no/such/ca.crt"})
    with pytest.raises(KubeConfigError, match="cluster 'k' certificate-authority '/no/such/ca.crt'"):
        load_api_client(str(path))


def test_bad_base64_data_names_field(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={
        "client-certificate-data": "not base64!", "client-key-data": "eA=="})
    with pytest.raises(KubeConfigError, match="user 'u' client-certificate-data: not valid base64"):
        load_api_client(str(path))


def test_bad_pem_data_names_fields(tmp_path: Path) -> None:
    junk = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n").decode()
    path = write_kubeconfig(tmp_path / "kc", user={
        "client-certificate-data": junk, "client-key-data": junk})
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path))
    assert "client-certificate-data" in str(err.value) and "client-key-data" in str(err.value)


def test_certificate_without_key(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={"client-certificate-data": "eA=="})
    with pytest.raises(KubeConfigError, match="no client-key"):
        load_api_client(str(path))


def test_no_credentials_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="pass --kubeconfig"):
        load_api_client()


def test_home_kubeconfig_is_the_last_resort(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(tmp_path / ".kube" / "config", server="https://10.4.4.4:6443")
    assert load_api_client().host == "https://10.4.4.4:6443"


def test_in_cluster_settings(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_text("ca")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    settings = in_cluster_settings(env, str(tmp_path))
    check_files(settings)
    assert settings.server == "https://[fd00::1]:443"
    assert settings.token_file == str(tmp_path / "token")
    assert settings.ca_file == str(tmp_path / "ca.crt")


def test_in_cluster_without_mounted_token(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeConfigError) as err:
        check_files(in_cluster_settings(env, str(tmp_path)))
    assert str(tmp_path / "token") in str(err.value)
    assert "automountServiceAccountToken" in str(err.value)


def test_token_file_is_read_again_when_stale(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    now = [0.0]
    token = TokenFile(str(path), refresh_seconds=60, clock=lambda: now[0])
    path.write_text("second\n")
    now[0] = 59.0
    assert token.token() == "first"
    now[0] = 61.0
    assert token.token() == "second"
    path.write_text("third\n")
    token.expire()  # the server rejected the token
    assert token.token() == "third"
    path.unlink()  # rotation in progress: keep the last good token
    now[0] = 200.0
    assert token.token() == "third"


def test_empty_token_file_is_an_error(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={"tokenFile": "tok"})
    (tmp_path / "tok").write_text("")
    with pytest.raises(KubeConfigError, match=r"user 'u' tokenFile '.*tok' is empty"):
        load_api_client(str(path))


def test_token_file_from_kubeconfig_is_rotated(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={"tokenFile": "tok"})
    (tmp_path / "tok").write_text("a")
    conn = load_api_client(str(path))
    assert isinstance(conn, ApiConnection)
    assert conn.headers()["Authorization"] == "Bearer a"
    (tmp_path / "tok").write_text("b")
    conn.expire_token()
    assert conn.headers()["Authorization"] == "Bearer b"


def test_basic_auth(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", user={"username": "ann", "password": "pw"})
    auth = load_api_client(str(path)).headers()["Authorization"]
    assert auth == "Basic " + base64.b64encode(b"ann:pw").decode()


def test_exec_credential_plugin_uses_the_kubernetes_loader(tmp_path: Path) -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential", "status": {"token": "from-plugin"}}
    path = write_kubeconfig(tmp_path / "kc", user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
        "args": ["-c", f"echo '{json.dumps(credential)}'"], "interactiveMode": "Never"}})
    raw = RawClient(load_api_client(str(path)))
    assert raw.server == "https://127.0.0.1:6443"
    headers = {k.lower(): v for k, v in raw._headers(None).items()}
    assert headers["authorization"] == "Bearer from-plugin"


def test_roles_build_their_client_without_the_kubernetes_package(tmp_path: Path) -> None:
    """Each role process pays neither the memory nor the start-up time of `kubernetes`."""
    path = write_kubeconfig(tmp_path / "kc")
    code = f"""
import sys
import cdriver.cli
from cdriver.roles.controller import cli, main
from cdriver.roles.imex_daemon import main
from cdriver.roles.kubelet_plugin import main
from cdriver.kube import events, informer, leader, workqueue
from cdriver.kube.client import load_api_client, new_raw_client
from cdriver.kube.raw import RawClient
RawClient(load_api_client({str(path)!r}))
new_raw_client({str(path)!r})
print(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_unreachable_server_is_an_unavailable_api_error(tmp_path: Path) -> None:
    import socket

    from cdriver.kube.errors import ApiError
    from cdriver.kube.resources import RESOURCES

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conn = load_api_client(str(write_kubeconfig(tmp_path / "kc",
                                                server=f"https://127.0.0.1:{port}")))
    raw = RawClient(conn, timeout=(2.0, 2.0))
    with pytest.raises(ApiError) as err:
        raw.create(RESOURCES["configmaps"], {"metadata": {"name": "x"}}, "default")
    assert err.value.unavailable and err.value.status == 0
    assert "/api/v1/namespaces/default/configmaps" in str(err.value)
