"""TLS, mutual TLS with certificates re-read on change, and the Prometheus metrics (issue 23, item 7).

Certificates are made by ``tests.pki`` (a CA, a server certificate for 127.0.0.1, a client
certificate): real X.509, real TLS handshakes on loopback.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from solver.cli import main as cli_main
from solver.domain.cancel import Cancel
from solver.domain.model import NicMode, Requirement, SolveRequest, SolveResult, SolveStatus
from solver.ingest.files import dump_request_json
from solver.service import wire
from solver.service.admission import ServiceLimits
from solver.service.client import RemoteError, solve_remote
from solver.service.server import RunningServer, serve
from solver.service.tls import TlsFiles, channel_credentials
from tests import kit
from topoplace.v1 import placement_pb2_grpc, whatif_pb2, whatif_pb2_grpc

# A channel of its own per test call: gRPC otherwise shares connections between channels of one
# process, and a reload test must make a new handshake.
OWN_POOL = (("grpc.use_local_subchannel_pool", 1),)


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
    pki = kit.pki(tmp_path, "a")
    running = start_server(tls=TlsFiles(cert=pki.server_cert, key=pki.server_key))
    result = solve_remote(f"127.0.0.1:{running.port}", request(), credentials=channel_credentials(pki.ca))  # type: ignore[arg-type]
    assert result.jobs[0].placed
    with pytest.raises(grpc.RpcError) as caught:
        health_over(running.port, None)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_refuses_a_client_without_a_certificate(
    tmp_path: Path, start_server: Callable[..., RunningServer]
) -> None:
    pki = kit.pki(tmp_path, "a")
    stranger = kit.pki(tmp_path, "stranger")  # a client certificate from another CA
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
    old, new = kit.pki(tmp_path, "old"), kit.pki(tmp_path, "new")
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
    reloads = running.metrics.registry.get_sample_value("topoplace_tls_reloads_total", {"outcome": "ok"})
    assert reloads == 1


# --------------------------------------------------------------------------- the CLI client over TLS


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(dump_request_json(request()))  # type: ignore[arg-type]
    return path


@pytest.mark.needs_pipeline
def test_the_cli_solves_on_an_mtls_server_with_its_tls_flags(
    tmp_path: Path,
    request_file: Path,
    start_server: Callable[..., RunningServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    pki = kit.pki(tmp_path, "a")
    running = start_server(tls=TlsFiles(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca))
    server = ["--server", f"127.0.0.1:{running.port}"]
    mtls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
    out = tmp_path / "result.json"  # the server logs to this process's stdout too
    assert cli_main(["solve", str(request_file), *server, *mtls, "-o", str(out)]) == 0
    assert json.loads(out.read_text())["jobs"][0]["placed"] is True
    capsys.readouterr()

    # The same server refuses a CLI without a client certificate, or without TLS: said, not a traceback.
    for flags in (["--tls-ca", str(pki.ca)], []):
        assert cli_main(["solve", str(request_file), *server, *flags]) == 3
        err = capsys.readouterr().err
        assert err.startswith("error: UNAVAILABLE") and "Traceback" not in err


@pytest.mark.needs_pipeline
def test_the_cli_solves_on_a_tls_server_trusting_its_ca(
    tmp_path: Path,
    request_file: Path,
    start_server: Callable[..., RunningServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    pki, other = kit.pki(tmp_path, "a"), kit.pki(tmp_path, "other")
    running = start_server(tls=TlsFiles(cert=pki.server_cert, key=pki.server_key))
    server = ["--server", f"127.0.0.1:{running.port}"]
    out = tmp_path / "result.json"
    assert cli_main(["solve", str(request_file), *server, "--tls-ca", str(pki.ca), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["jobs"][0]["placed"] is True
    capsys.readouterr()
    # A CA that did not sign the server's certificate: the server is not trusted.
    assert cli_main(["solve", str(request_file), *server, "--tls-ca", str(other.ca)]) == 3
    assert capsys.readouterr().err.startswith("error: UNAVAILABLE")


@pytest.mark.parametrize(
    ("flags", "path", "words"),
    [
        (["--tls-cert", "{client_cert}"], "--tls-cert/--tls-key", "needs its key"),
        (["--tls-key", "{client_key}"], "--tls-cert/--tls-key", "needs its key"),
        (["--tls-ca", "/nonexistent/ca.pem"], "--tls-ca", "/nonexistent/ca.pem: no such file"),
        (["--tls-ca", "{client_key}"], "--tls-ca", "no PEM CERTIFICATE"),
        (["--tls-cert", "{client_cert}", "--tls-key", "{ca}"], "--tls-key", "no PEM PRIVATE KEY"),
    ],
    ids=["cert-without-key", "key-without-cert", "missing-ca", "key-as-ca", "cert-as-key"],
)
def test_bad_cli_tls_flags_are_named_before_any_call(
    tmp_path: Path,
    request_file: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    path: str,
    words: str,
) -> None:
    pki = kit.pki(tmp_path, "a")
    files = {"client_cert": pki.client_cert, "client_key": pki.client_key, "ca": pki.ca}
    flags = [flag.format(**files) for flag in flags]
    # Port 9 on loopback: nothing listens; the flags must be refused before any connection.
    assert cli_main(["solve", str(request_file), "--server", "127.0.0.1:9", *flags]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}: " in err and words in err, err


def test_cli_tls_flags_without_a_server_are_refused(
    request_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["solve", str(request_file), "--tls-ca", "/etc/hostname"]) == 2
    assert "error: --tls-ca: TLS is for a remote solve: give --server HOST:PORT" in capsys.readouterr().err


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
    # Two members: the model's way, so its stages are counted (one pod is answered by enumeration).
    gang = kit.request(
        kit.cluster(2), [kit.job("a", 2, members=2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)]
    )
    solve_remote(target, gang)
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


def test_every_admission_shed_cancel_and_late_end_is_a_metric(
    start_server: Callable[..., RunningServer],
) -> None:
    """Stand-in solves (said here): one cooperative, stopped by its caller's cancel or deadline;
    one that ignores its token and answers late. Each end is counted, with the code the caller saw."""

    def solve_fn(request: SolveRequest, *, cancel: Cancel | None = None, **_: object) -> SolveResult:
        if request.request_id == "late":
            time.sleep(0.5)  # looks at nothing: answers after its caller's deadline
        else:
            while True:
                assert cancel is not None
                cancel.check()
                time.sleep(0.01)
        return SolveResult(request_id=request.request_id, status=SolveStatus.OPTIMAL)

    running = start_server(solve_fn=solve_fn, metrics_port=0)
    message = wire.request_to_proto(request())  # type: ignore[arg-type]
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = placement_pb2_grpc.PlacementStub(channel)
        message.request_id = "deadline"
        with pytest.raises(grpc.RpcError):
            stub.Solve(message, timeout=0.3)
        message.request_id = "caller"
        future = stub.Solve.future(message)
        time.sleep(0.3)
        future.cancel()
        message.request_id = "late"
        with pytest.raises(grpc.RpcError):
            stub.Solve(message, timeout=0.2)
        with pytest.raises(grpc.RpcError) as caught:  # a what-if run: counted like a solve
            whatif_pb2_grpc.WhatIfStub(channel).Run(whatif_pb2.WhatIfRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    end = time.monotonic() + 5
    while running.admission.in_flight() and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.1)  # the last handler's own bookkeeping

    assert running.metrics_server is not None
    samples = scrape(running.metrics_server.port)
    solve = (("method", "Placement/Solve"),)
    assert samples["topoplace_cancelled_calls_total", (*solve, ("reason", "deadline"))] == 1
    assert samples["topoplace_cancelled_calls_total", (*solve, ("reason", "caller"))] == 1
    assert samples["topoplace_late_answers_total", solve] == 1
    assert samples["topoplace_calls_total", (("code", "DEADLINE_EXCEEDED"), *solve)] == 2  # expired + late
    assert samples["topoplace_calls_total", (("code", "CANCELLED"), *solve)] == 1
    whatif = (("code", "INVALID_ARGUMENT"), ("method", "WhatIf/Run"))
    assert samples["topoplace_calls_total", whatif] == 1
    assert samples["topoplace_serving", ()] == 1
    assert samples["topoplace_node_cache_budget_bytes", ()] == ServiceLimits().node_cache_bytes
    assert samples["topoplace_node_cache_bytes", ()] >= 0
    assert ("topoplace_node_cache_evicted_bytes_total", ()) in samples

    running.stop(grace_s=None)
    assert running.metrics.registry.get_sample_value("topoplace_serving") == 0
