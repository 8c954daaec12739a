"""The local control plane's test PKI: chains, names, groups, key file modes, a TLS handshake."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cdriver.sim.controlplane import pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(ext.get_values_for_type(x509.DNSName)), {
        str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> pki.PKIFiles:
    return pki.write_pki(tmp_path_factory.mktemp("pki"))


def test_every_certificate_is_signed_by_the_ca(files: pki.PKIFiles) -> None:
    ca = _cert(files.ca_cert)
    for path in (files.apiserver_cert, files.admin_cert, files.kubelet_client_cert):
        _cert(path).verify_directly_issued_by(ca)


def test_apiserver_serving_cert_names_every_in_cluster_address(files: pki.PKIFiles) -> None:
    dns, ips = _sans(_cert(files.apiserver_cert))
    assert {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local"} <= dns
    assert {"127.0.0.1", "10.0.0.1"} <= ips


@pytest.mark.parametrize("which", ["admin", "kubelet_client"])
def test_client_certs_are_in_system_masters(files: pki.PKIFiles, which: str) -> None:
    cert = _cert(getattr(files, f"{which}_cert"))
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage


def test_kubelet_client_cert_identity(files: pki.PKIFiles) -> None:
    cert = _cert(files.kubelet_client_cert)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "kube-apiserver-kubelet-client"


def test_private_keys_are_owner_only(files: pki.PKIFiles) -> None:
    for path in (files.ca_key, files.apiserver_key, files.admin_key, files.kubelet_client_key,
                 files.sa_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert b"PUBLIC KEY" in files.sa_pub.read_bytes()


def test_kubelet_serving_cert_for_a_node(files: pki.PKIFiles, tmp_path: Path) -> None:
    cert_path, key_path = pki.issue_kubelet_serving_cert(files, "node-a", ("127.0.1.7",), tmp_path)
    cert = _cert(cert_path)
    cert.verify_directly_issued_by(_cert(files.ca_cert))
    dns, ips = _sans(cert)
    assert dns == {"node-a"} and ips == {"127.0.1.7"}
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600


def test_issue_cert_needs_a_usage() -> None:
    with pytest.raises(ValueError, match="server=True"):
        pki.issue_cert(pki.make_ca(), "x")


def test_tls_handshake_verifies_in_cluster_name(files: pki.PKIFiles) -> None:
    """A client trusting only the CA accepts the serving cert for kubernetes.default.svc."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.apiserver_cert, files.apiserver_key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(files.ca_cert))
    with socket.create_connection(("127.0.0.1", port)) as raw_sock:
        with client_ctx.wrap_socket(raw_sock, server_hostname="kubernetes.default.svc") as tls:
            assert tls.recv(2) == b"ok"
            peer = tls.getpeercert()
    thread.join(5)
    listener.close()
    assert ("IP Address", str(ipaddress.ip_address("127.0.0.1"))) in peer["subjectAltName"]
