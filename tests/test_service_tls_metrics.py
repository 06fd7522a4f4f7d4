"""TLS, mutual TLS with certificates re-read on change, and the Prometheus metrics (issue 23, item 7).

Certificates are made here with the ``cryptography`` package (a CA, a server certificate for
127.0.0.1, a client certificate): real X.509, real TLS handshakes on loopback.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from solver.domain.model import NicMode, Requirement
from solver.service import wire
from solver.service.admission import ServiceLimits
from solver.service.client import RemoteError, solve_remote
from solver.service.server import RunningServer, serve
from solver.service.tls import TlsFiles, channel_credentials
from tests import kit
from topoplace.v1 import placement_pb2_grpc

# A channel of its own per test call: gRPC otherwise shares connections between channels of one
# process, and a reload test must make a new handshake.
OWN_POOL = (("grpc.use_local_subchannel_pool", 1),)


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


def make_pki(directory: Path, tag: str) -> Pki:
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


@pytest.fixture
def start_server() -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def start(**kwargs: object) -> RunningServer:
        running = serve("127.0.0.1", 0, **kwargs)  # type: ignore[arg-type]
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(grace_s=None)


def request() -> object:
    return kit.request(
        kit.cluster(2), [kit.job("a", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)], time_limit_s=2
    )


def health_over(port: int, credentials: grpc.ChannelCredentials | None) -> int:
    target = f"127.0.0.1:{port}"
    if credentials is None:
        channel = grpc.insecure_channel(target, options=OWN_POOL)
    else:
        channel = grpc.secure_channel(target, credentials, options=OWN_POOL)
    with channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3).status


# --------------------------------------------------------------------------- TLS


@pytest.mark.needs_pipeline
def test_tls_serves_a_client_that_trusts_the_ca_and_no_plaintext_client(
    tmp_path: Path, start_server: Callable[..., RunningServer]
) -> None:
    pki = make_pki(tmp_path, "a")
    running = start_server(tls=TlsFiles(cert=pki.server_cert, key=pki.server_key))
    result = solve_remote(f"127.0.0.1:{running.port}", request(), credentials=channel_credentials(pki.ca))  # type: ignore[arg-type]
    assert result.jobs[0].placed
    with pytest.raises(grpc.RpcError) as caught:
        health_over(running.port, None)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_a_client_without_a_certificate(
    tmp_path: Path, start_server: Callable[..., RunningServer]
) -> None:
    pki = make_pki(tmp_path, "a")
    stranger = make_pki(tmp_path, "stranger")  # a client certificate from another CA
    running = start_server(tls=TlsFiles(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca))
    assert health_over(running.port, channel_credentials(pki.ca, pki.client_cert, pki.client_key)) == 1
    for credentials in (
        channel_credentials(pki.ca),
        channel_credentials(pki.ca, stranger.client_cert, stranger.client_key),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            health_over(running.port, credentials)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_certificates_are_reloaded_when_the_files_change(
    tmp_path: Path, start_server: Callable[..., RunningServer]
) -> None:
    """Rotation on disk: new connections get the new certificate, without a restart."""
    old, new = make_pki(tmp_path, "old"), make_pki(tmp_path, "new")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    cert.write_bytes(old.server_cert.read_bytes())
    key.write_bytes(old.server_key.read_bytes())
    running = start_server(tls=TlsFiles(cert=cert, key=key))
    assert health_over(running.port, channel_credentials(old.ca)) == 1
    with pytest.raises(grpc.RpcError):
        health_over(running.port, channel_credentials(new.ca))

    key.write_bytes(new.server_key.read_bytes())
    cert.write_bytes(new.server_cert.read_bytes())
    later = cert.stat().st_mtime + 2  # a coarse file-system clock must still see a change
    os.utime(cert, (later, later))
    os.utime(key, (later, later))
    assert health_over(running.port, channel_credentials(new.ca)) == 1
    with pytest.raises(grpc.RpcError):
        health_over(running.port, channel_credentials(old.ca))
    assert running.certificates is not None and running.certificates.reloads == 1


def test_missing_certificate_files_are_named() -> None:
    with pytest.raises(ValueError, match=r"--tls-cert: /nonexistent/cert.pem: no such file"):
        serve(
            "127.0.0.1", 0, tls=TlsFiles(cert=Path("/nonexistent/cert.pem"), key=Path("/nonexistent/k.pem"))
        )


# --------------------------------------------------------------------------- metrics


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.needs_pipeline
def test_metrics_count_calls_stages_sheds_gap_and_jobs(start_server: Callable[..., RunningServer]) -> None:
    running = start_server(metrics_port=0, limits=ServiceLimits(max_jobs=2))
    assert running.metrics_server is not None
    target = f"127.0.0.1:{running.port}"
    solve_remote(target, request())  # type: ignore[arg-type]
    too_many = kit.request(
        kit.cluster(2),
        [kit.job(f"j{i}", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED) for i in range(3)],
    )
    with pytest.raises(RemoteError) as caught:
        solve_remote(target, too_many)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    bad = wire.request_to_proto(request())  # type: ignore[arg-type]
    bad.jobs[0].roles[0].replicas = 0
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError):
        placement_pb2_grpc.PlacementStub(channel).Solve(bad, timeout=5)

    samples = scrape(running.metrics_server.port)
    solve_calls = "topoplace_calls_total"
    assert samples[solve_calls, (("code", "OK"), ("method", "Placement/Solve"))] == 1
    assert samples[solve_calls, (("code", "INVALID_ARGUMENT"), ("method", "Placement/Solve"))] == 1
    assert samples[solve_calls, (("code", "RESOURCE_EXHAUSTED"), ("method", "Placement/Solve"))] == 1
    assert (
        samples["topoplace_shed_calls_total", (("method", "Placement/Solve"), ("reason", "too_large"))] == 1
    )
    for stage in ("queue", "convert", "validate", "compile", "solve", "verify", "total"):
        assert samples["topoplace_stage_seconds_count", (("stage", stage),)] >= 1, stage
    assert samples["topoplace_jobs_total", (("outcome", "placed"),)] == 1
    assert samples["topoplace_gap_count", ()] == 1
    assert samples["topoplace_queue_depth", (("lane", "small"), ("method", "Placement/Solve"))] == 0
    assert samples["topoplace_in_flight", (("lane", "small"), ("method", "Placement/Solve"))] == 0
