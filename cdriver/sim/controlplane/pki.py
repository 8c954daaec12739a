"""Test PKI for the local control plane, made with `cryptography`.

One throw-away CA signs every certificate: the kube-apiserver serving certificate, the admin
client certificate (group system:masters), the apiserver's client certificate for talking to
kubelets, and kubelet serving certificates for simulated nodes. A separate key pair signs
service-account tokens. Keys are ECDSA P-256 (fast to generate, accepted by every component).

Building certificates is pure (`make_ca`, `issue_cert`); `write_pki` and
`issue_kubelet_serving_cert` write PEM files (keys mode 0600).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cdriver.atomic import atomic_write

#: Subject alternative names of the kube-apiserver serving certificate.
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.0.0.1")
ADMIN_USER = "cdriver-admin"
MASTERS_GROUP = "system:masters"
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"
CERT_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return private_key_pem(self.key)


@dataclass(frozen=True)
class PKIFiles:
    """Paths of the PEM files one control plane uses."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def kubelet_client_cert(self) -> Path:
        return self.dir / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.dir / "apiserver-kubelet-client.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """PKCS#8 PEM of a private key, unencrypted."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def make_ca(common_name: str = "cdriver-local-ca", now: dt.datetime | None = None) -> KeyPair:
    """A self-signed CA certificate and key."""
    now = now or dt.datetime.now(dt.UTC)
    key = new_key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def issue_cert(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
    now: dt.datetime | None = None,
) -> KeyPair:
    """A leaf certificate signed by `ca` for a server, a client, or both."""
    if not (server or client):
        raise ValueError("issue_cert: choose server=True and/or client=True")
    now = now or dt.datetime.now(dt.UTC)
    key = new_key()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write atomically; private keys get mode 0600."""
    atomic_write(path, data, mode=0o600 if private else 0o644)


def _write_pair(pair: KeyPair, cert_path: Path, key_path: Path) -> None:
    _write(key_path, pair.key_pem(), private=True)
    _write(cert_path, pair.cert_pem(), private=False)


def write_pki(directory: Path) -> PKIFiles:
    """Create the whole control-plane PKI under `directory` and return its file paths."""
    directory.mkdir(parents=True, exist_ok=True)
    files = PKIFiles(directory)
    ca = make_ca()
    _write_pair(ca, files.ca_cert, files.ca_key)
    serving = issue_cert(ca, "kube-apiserver", dns_names=APISERVER_DNS_NAMES, ips=APISERVER_IPS, server=True)
    _write_pair(serving, files.apiserver_cert, files.apiserver_key)
    admin = issue_cert(ca, ADMIN_USER, organizations=(MASTERS_GROUP,), client=True)
    _write_pair(admin, files.admin_cert, files.admin_key)
    kubelet_client = issue_cert(ca, KUBELET_CLIENT_USER, organizations=(MASTERS_GROUP,), client=True)
    _write_pair(kubelet_client, files.kubelet_client_cert, files.kubelet_client_key)
    sa = new_key()
    _write(files.sa_key, private_key_pem(sa), private=True)
    _write(
        files.sa_pub,
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        private=False,
    )
    return files


def load_ca(files: PKIFiles) -> KeyPair:
    """Read the CA written by `write_pki` (to issue more certificates later)."""
    cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{files.ca_key}: expected an ECDSA CA key, found {type(key).__name__}")
    return KeyPair(cert, key)


def issue_kubelet_serving_cert(
    files: PKIFiles, node_name: str, ips: tuple[str, ...], out_dir: Path
) -> tuple[Path, Path]:
    """Write a kubelet serving certificate for a simulated node; returns (cert, key) paths.

    kube-apiserver verifies it against the cluster CA (``--kubelet-certificate-authority``)
    when it connects to the node's InternalIP for exec, attach, port-forward and logs, so
    `ips` must contain that address.
    """
    ca = load_ca(files)
    pair = issue_cert(ca, f"system:node:{node_name}", organizations=("system:nodes",),
                      dns_names=(node_name,), ips=ips, server=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out_dir / "kubelet.crt", out_dir / "kubelet.key"
    _write_pair(pair, cert_path, key_path)
    return cert_path, key_path
