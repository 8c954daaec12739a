"""Loading API credentials: explicit kubeconfig, $KUBECONFIG, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdriver.kube.client import KubeConfigError, load_api_client
from cdriver.kube.raw import RawClient

pytestmark = pytest.mark.unit


def write_kubeconfig(path: Path, server: str = "https://127.0.0.1:6443",
                     token: str = "s3cret") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server,
                                                "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def test_explicit_kubeconfig(tmp_path: Path) -> None:
    client = load_api_client(str(write_kubeconfig(tmp_path / "kc")), pool_maxsize=7)
    assert client.configuration.host == "https://127.0.0.1:6443"
    assert client.configuration.connection_pool_maxsize == 7
    headers = RawClient(client)._headers("application/json")
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"


def test_kubeconfig_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_kubeconfig(tmp_path / "kc", server="https://10.1.2.3:7443")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert load_api_client().configuration.host == "https://10.1.2.3:7443"


def test_missing_kubeconfig_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(tmp_path / "nope"))
    assert "nope" in str(err.value) and "does not exist" in str(err.value)


@pytest.mark.parametrize("text", ["{{{ not yaml", "", "kind: Config\n", "- a\n- b\n"])
def test_malformed_kubeconfig_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(KubeConfigError) as err:
        load_api_client(str(path))
    assert str(path) in str(err.value)


def test_no_credentials_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match="pass --kubeconfig"):
        load_api_client()


def test_unreachable_server_is_an_unavailable_api_error(tmp_path: Path) -> None:
    import socket

    from cdriver.kube.raw import RESOURCES, ApiError

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = load_api_client(str(write_kubeconfig(tmp_path / "kc",
                                                  server=f"https://127.0.0.1:{port}")))
    client.configuration.retries = 0
    raw = RawClient(client, timeout=(2.0, 2.0))
    with pytest.raises(ApiError) as err:
        raw.create(RESOURCES["configmaps"], {"metadata": {"name": "x"}}, "default")
    assert err.value.unavailable and err.value.status == 0
    assert "/api/v1/namespaces/default/configmaps" in str(err.value)
