"""Certificates for TLS tests, made with the ``cryptography`` package: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate — real X.509, for real TLS handshakes on loopback.
One way of making them, for the server's tests and the CLI client's alike (``kit.pki``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def pki(directory: Path, tag: str) -> Pki:
    """A CA and a server and a client certificate it signed, as PEM files in ``directory``."""
    ca_key = _key()
    ca = _cert(f"topoplace test CA {tag}", ca_key, None, ca=True)
    issuer = (ca.subject, ca_key)
    server_key, client_key = _key(), _key()
    files = {
        "ca": ca.public_bytes(serialization.Encoding.PEM),
        "server_cert": _cert("127.0.0.1", server_key, issuer, server=True).public_bytes(
            serialization.Encoding.PEM
        ),
        "server_key": _pem_key(server_key),
        "client_cert": _cert("scheduler", client_key, issuer).public_bytes(serialization.Encoding.PEM),
        "client_key": _pem_key(client_key),
    }
    paths = {}
    for name, data in files.items():
        path = directory / f"{tag}-{name}.pem"
        path.write_bytes(data)
        paths[name] = path
    return Pki(**paths)
