"""TLS and mutual TLS for the gRPC port, from PEM files that are re-read when they change.

Certificates are rotated on disk (cert-manager, a Vault agent, a cron job) without restarting the
server: gRPC asks :meth:`CertificateFiles.fetch` before each new handshake, and it hands back a new
configuration only when a file's modification time or size has changed — connections already open
keep the certificate they were made with. With a client CA the server requires and checks client
certificates (mTLS); without one it is server-side TLS only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

_log = structlog.get_logger("topoplace.service")


@dataclass(frozen=True)
class TlsFiles:
    cert: Path  # the server's certificate chain (PEM)
    key: Path  # its private key (PEM)
    client_ca: Path | None = None  # CA bundle that client certificates must chain to: mTLS

    def problems(self) -> list[str]:
        """What is wrong with the files, as ``--flag: reason`` lines (empty when fine)."""
        return pem_problems(
            (
                ("--tls-cert", self.cert, "CERTIFICATE"),
                ("--tls-key", self.key, "PRIVATE KEY"),
                ("--tls-client-ca", self.client_ca, "CERTIFICATE"),
            )
        )


@dataclass(frozen=True)
class ClientTlsFiles:
    """A client's side of TLS (``topoplace solve --server``): the flags match the server's."""

    ca: Path | None = None  # CA bundle the server's certificate must chain to; None: the system's
    cert: Path | None = None  # the client's certificate chain, for an mTLS server ...
    key: Path | None = None  # ... and its private key

    def problems(self) -> list[str]:
        """What is wrong with the files, as ``--flag: reason`` lines (empty when fine)."""
        out = []
        if (self.cert is None) != (self.key is None):
            out.append("--tls-cert/--tls-key: a client certificate needs its key, and a key its certificate")
        out += pem_problems(
            (
                ("--tls-ca", self.ca, "CERTIFICATE"),
                ("--tls-cert", self.cert, "CERTIFICATE"),
                ("--tls-key", self.key, "PRIVATE KEY"),
            )
        )
        return out

    def credentials(self) -> grpc.ChannelCredentials:
        return channel_credentials(self.ca, self.cert, self.key)


def pem_problems(files: tuple[tuple[str, Path | None, str], ...]) -> list[str]:
    """``--flag: path: reason`` for each given file that is missing, unreadable, or holds no PEM
    block of its kind ("CERTIFICATE", "PRIVATE KEY"): said at start, not as a failed handshake later."""
    out = []
    for flag, path, kind in files:
        if path is None:
            continue
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            out.append(f"{flag}: {path}: no such file")
            continue
        except OSError as exc:
            out.append(f"{flag}: {path}: cannot read it: {exc.strerror}")
            continue
        if b"-----BEGIN " not in text or kind.encode() + b"-----" not in text:
            out.append(f"{flag}: {path}: no PEM {kind} in it")
    return out


class CertificateFiles:
    """The current certificate configuration of ``files``; re-read when a file changes."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._stamp = self._stamps()
        self.config = self._load()
        self.reloads = 0
        self.failures = 0

    def _paths(self) -> list[Path]:
        return [p for p in (self.files.cert, self.files.key, self.files.client_ca) if p is not None]

    def _stamps(self) -> tuple[tuple[int, int], ...]:
        return tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self._paths())

    def _load(self) -> grpc.ServerCertificateConfiguration:
        pair = [(self.files.key.read_bytes(), self.files.cert.read_bytes())]
        roots = self.files.client_ca.read_bytes() if self.files.client_ca else None
        return grpc.ssl_server_certificate_configuration(pair, root_certificates=roots)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed, else None (keep the last).
        A file caught half-written (unreadable, or a key that does not parse later in the handshake)
        keeps the previous certificate until the next attempt sees the finished file."""
        with self._lock:
            try:
                stamp = self._stamps()
                if stamp == self._stamp:
                    return None
                config = self._load()
            except OSError as exc:
                self.failures += 1
                _log.warning("tls_reload_failed", error=str(exc))
                return None
            self._stamp, self.config = stamp, config
            self.reloads += 1
            _log.info("tls_reloaded", cert=str(self.files.cert))
            return config


def server_credentials(files: TlsFiles) -> tuple[grpc.ServerCredentials, CertificateFiles]:
    """Credentials for ``server.add_secure_port``, reloading from ``files``; mTLS with a client CA."""
    certs = CertificateFiles(files)
    credentials = grpc.dynamic_ssl_server_credentials(
        certs.config, certs.fetch, require_client_authentication=files.client_ca is not None
    )
    return credentials, certs


def channel_credentials(
    ca: Path | None, cert: Path | None = None, key: Path | None = None
) -> grpc.ChannelCredentials:
    """A client's credentials: trust ``ca`` (None: the system's roots); present ``cert``/``key``
    to an mTLS server."""
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes() if ca else None,
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )
