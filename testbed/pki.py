"""The bed's own PKI, made with the ``cryptography`` package (ECDSA P-256).

One CA signs every serving certificate (one per kube-apiserver, for 127.0.0.1
and localhost) and the client certificates (Kubernetes takes the user from
the CN and the groups from O). A separate key pair signs service-account
tokens. Files are written once and reused while they exist.
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

_VALID = dt.timedelta(days=3650)


@dataclass(frozen=True, slots=True, kw_only=True)
class CertFiles:
    """A certificate and its private key, both PEM."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{path}: not an EC private key")
    return key


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


class Pki:
    """Creates (once) and names the bed's keys and certificates under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = CertFiles(cert=root / "ca.crt", key=root / "ca.key")
        self.sa_key = root / "sa.key"
        self.sa_pub = root / "sa.pub"

    def ensure_ca(self) -> None:
        """Write the CA and the service-account key pair if they are missing."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.ca.cert.exists() and self.ca.key.exists()):
            key = ec.generate_private_key(ec.SECP256R1())
            now = dt.datetime.now(dt.UTC)
            name = _name("cpn-testbed-ca")
            cert = (
                x509.CertificateBuilder()
                .subject_name(name)
                .issuer_name(name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + _VALID)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(
                    x509.KeyUsage(
                        digital_signature=True,
                        content_commitment=False,
                        key_encipherment=False,
                        data_encipherment=False,
                        key_agreement=False,
                        key_cert_sign=True,
                        crl_sign=True,
                        encipher_only=False,
                        decipher_only=False,
                    ),
                    critical=True,
                )
                .sign(key, hashes.SHA256())
            )
            _write_key(self.ca.key, key)
            self.ca.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if not (self.sa_key.exists() and self.sa_pub.exists()):
            sa = ec.generate_private_key(ec.SECP256R1())
            _write_key(self.sa_key, sa)
            self.sa_pub.write_bytes(
                sa.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )

    def _issue(
        self,
        stem: str,
        *,
        cn: str,
        orgs: tuple[str, ...] = (),
        server: bool = False,
    ) -> CertFiles:
        files = CertFiles(cert=self.root / f"{stem}.crt", key=self.root / f"{stem}.key")
        if files.cert.exists() and files.key.exists():
            return files
        self.ensure_ca()
        ca_key = _load_key(self.ca.key)
        ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, orgs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.DNSName("localhost"),
                        x509.DNSName("kubernetes"),
                        x509.DNSName("kubernetes.default"),
                        x509.DNSName("kubernetes.default.svc"),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        _write_key(files.key, key)
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return files

    def serving(self, cluster: str) -> CertFiles:
        """The kube-apiserver serving certificate of ``cluster``."""
        return self._issue(f"{cluster}-apiserver", cn=f"{cluster}-apiserver", server=True)

    def issue_serving(self, stem: str) -> CertFiles:
        """A serving certificate for 127.0.0.1 named ``stem`` (e.g. a webhook server's)."""
        return self._issue(stem, cn=stem, server=True)

    def admin(self) -> CertFiles:
        """The admin client certificate (group system:masters), valid on every cluster."""
        return self._issue("admin", cn="cpn-testbed-admin", orgs=("system:masters",))

    def scheduler(self) -> CertFiles:
        """kube-scheduler's client certificate; default RBAC binds system:kube-scheduler."""
        return self._issue("kube-scheduler", cn="system:kube-scheduler")
