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
        out = []
        for flag, path in (
            ("--tls-cert", self.cert),
            ("--tls-key", self.key),
            ("--tls-client-ca", self.client_ca),
        ):
            if path is not None and not path.is_file():
                out.append(f"{flag}: {path}: no such file")
        return out


class CertificateFiles:
    """The current certificate configuration of ``files``; re-read when a file changes."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._stamp = self._stamps()
        self.config = self._load()
        self.reloads = 0

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
    ca: Path, cert: Path | None = None, key: Path | None = None
) -> grpc.ChannelCredentials:
    """A client's credentials: trust ``ca``; present ``cert``/``key`` to an mTLS server."""
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )
