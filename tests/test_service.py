"""The gRPC service end to end: a real server on 127.0.0.1 (port 0), real channels, real status details.

Tests marked ``needs_pipeline`` run the real ``solver.solve.solve`` (and so ``solver.domain.validate``). The
others test the plumbing alone and use a stand-in ``solve_fn`` only where the real pipeline cannot be
made to do what is being tested (crash, refuse its own answer, block).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import structlog
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from solver.cli import main as cli_main
from solver.domain.cancel import Cancel
from solver.domain.errors import InvalidRequest, Problem, VerificationFailed
from solver.domain.model import NicMode, Requirement, SolveRequest, SolveResult, SolveStatus
from solver.ingest.files import load_request
from solver.service import admission, wire
from solver.service.client import RemoteError, solve_remote
from solver.service.logging import configure_logging
from solver.service.server import SERVICE_NAME, RunningServer, serve
from tests import kit
from topoplace.v1 import placement_pb2, placement_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def start_server() -> Iterator[Callable[..., RunningServer]]:
    """Start servers on free ports; every one started is stopped when the test ends."""
    started: list[RunningServer] = []

    def start(port: int = 0, **kwargs: object) -> RunningServer:
        running = serve("127.0.0.1", port, **kwargs)  # type: ignore[arg-type]
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(grace_s=None)


@pytest.fixture
def server(start_server: Callable[..., RunningServer]) -> RunningServer:
    """A server running the real pipeline."""
    return start_server()


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(target(server)) as chan:
        yield chan


def target(running: RunningServer) -> str:
    return f"127.0.0.1:{running.port}"


def small_request(**policy: object) -> SolveRequest:
    inventory = kit.inventory(kit.node("n0"), kit.node("n1", leaf="leaf1"))
    return kit.request(
        inventory,
        [kit.job("train", 8, 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, minimum=2)],
        **policy,
    )


def call_solve(chan: grpc.Channel, msg: placement_pb2.SolveRequest, timeout: float = 30) -> grpc.RpcError:
    """Call Solve expecting it to fail; the error (a grpc.Call) is returned for inspection."""
    with pytest.raises(grpc.RpcError) as caught:
        placement_pb2_grpc.PlacementStub(chan).Solve(msg, timeout=timeout)
    return caught.value


def bad_request_of(error: grpc.RpcError) -> error_details_pb2.BadRequest:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "INVALID_ARGUMENT must carry rich status details"
    (detail,) = status.details
    bad_request = error_details_pb2.BadRequest()
    assert detail.Unpack(bad_request)
    return bad_request


# --------------------------------------------------------------------------- health and reflection


@pytest.mark.parametrize("service", ["", SERVICE_NAME])
def test_health_is_serving(channel: grpc.Channel, service: str) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_stopping_reports_not_serving(start_server: Callable[..., RunningServer]) -> None:
    running = start_server()
    running.health.enter_graceful_shutdown()
    with grpc.insecure_channel(target(running)) as chan:
        answer = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_busy_port_is_an_error_not_a_shared_port(start_server: Callable[..., RunningServer]) -> None:
    running = start_server()
    with pytest.raises(OSError, match="cannot listen"):
        start_server(port=running.port)


def test_reflection_lists_and_describes_the_service(channel: grpc.Channel) -> None:
    database = ProtoReflectionDescriptorDatabase(channel)
    assert SERVICE_NAME in database.get_services()
    service = descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE_NAME)
    assert service.methods_by_name["Solve"].input_type.full_name == "topoplace.v1.SolveRequest"


# --------------------------------------------------------------------------- solving


@pytest.mark.needs_pipeline
def test_solve_over_grpc_places_the_job(server: RunningServer) -> None:
    result = solve_remote(target(server), small_request(time_limit_s=5), timeout_s=30)
    assert result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    assert [job.placed for job in result.jobs] == [True]
    assert len(result.request_id) == 32, "a request without an id gets a fresh one"


@pytest.mark.needs_pipeline
def test_request_id_is_echoed(server: RunningServer) -> None:
    request = small_request().model_copy(update={"request_id": "abc-1"})
    assert solve_remote(target(server), request).request_id == "abc-1"


@pytest.mark.needs_pipeline
def test_each_solve_logs_one_line(server: RunningServer) -> None:
    with structlog.testing.capture_logs() as logs:
        solve_remote(target(server), small_request().model_copy(update={"request_id": "log-1"}))
    (line,) = [entry for entry in logs if entry["event"] == "solve"]
    assert line["request_id"] == "log-1"
    assert (line["jobs"], line["nodes"], line["placed_jobs"]) == (1, 2, 1)
    assert line["status"] in ("OPTIMAL", "FEASIBLE")
    assert line["gap"] >= 0 and line["ms"] > 0


# --------------------------------------------------------------------------- bad input


def test_field_rule_is_invalid_argument_with_bad_request(channel: grpc.Channel) -> None:
    """Caught by the wire layer before the pipeline runs."""
    msg = wire.request_to_proto(small_request())
    msg.jobs[0].roles[0].replicas = 0
    error = call_solve(channel, msg)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    (violation,) = bad_request_of(error).field_violations
    expected = ("jobs[0].roles[0].replicas", "must be at least 1, got 0")
    assert (violation.field, violation.description) == expected
    assert ": ".join(expected) in error.details()  # type: ignore[attr-defined]


def test_client_rebuilds_invalid_request(server: RunningServer) -> None:
    request = small_request()
    job = request.jobs[0]
    role = job.roles[0].model_copy(update={"replicas": 0})
    bad = request.model_copy(update={"jobs": (job.model_copy(update={"roles": (role,)}),)})
    with pytest.raises(InvalidRequest) as caught:
        solve_remote(target(server), bad)
    expected = Problem(path="jobs[0].roles[0].replicas", message="must be at least 1, got 0")
    assert caught.value.problems == (expected,)


def _dup_node_name(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[1].name = "n0"


def _dup_gpu_id(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].gpus[1].id = "GPU0"


def _gpu_unknown_pcie_switch(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].gpus[2].pcie_switch = "sw9"


def _nic_numa_undeclared(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].nics[0].numa = 7


def _pcie_parent_missing(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].pcie_switches[2].parent = "hb9"  # [0], [1] are host bridges; [2] is sw0


def _fabric_parent_missing(m: placement_pb2.SolveRequest) -> None:
    m.inventory.switches[1].parent = "spine9"  # [0] is the spine, [1] leaf0


def _leaf_missing(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].leaf = "leaf9"


def _replicas_zero(m: placement_pb2.SolveRequest) -> None:
    m.jobs[0].roles[0].replicas = 0


def _min_above_replicas(m: placement_pb2.SolveRequest) -> None:
    m.jobs[0].roles[0].min_replicas = 3


def _fabric_cycle(m: placement_pb2.SolveRequest) -> None:
    m.inventory.switches[0].parent = "leaf0"  # spine0 -> leaf0 -> spine0


def _gpu_held_twice(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].allocations.add(owner="a", gpus=["GPU0"])
    m.inventory.nodes[0].allocations.add(owner="b", gpus=["GPU0"])


def _allocation_unknown_gpu(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].allocations.add(owner="a", gpus=["GPU99"])


def _share_above_whole_gpu(m: placement_pb2.SolveRequest) -> None:
    m.jobs[0].roles[0].member.gpus = 0
    m.jobs[0].roles[0].member.gpu_share.milli = 1500


def _empty_share(m: placement_pb2.SolveRequest) -> None:
    m.jobs[0].roles[0].member.gpus = 0
    m.jobs[0].roles[0].member.gpu_share.SetInParent()  # asks 0 milli and 0 MiB


def _shares_overcommit(m: placement_pb2.SolveRequest) -> None:
    m.inventory.nodes[0].allocations.add(owner="a").gpu_shares.add(gpu="GPU0", milli=700)
    m.inventory.nodes[0].allocations.add(owner="b").gpu_shares.add(gpu="GPU0", milli=400)


def _unknown_policy_word(m: placement_pb2.SolveRequest) -> None:
    m.policy.node_policy = "binpack,greedy"


def _negative_priority(m: placement_pb2.SolveRequest) -> None:
    m.jobs[0].priority = -1


# (mutation, a fragment of the field path, words the description must contain)
BAD_REQUESTS = {
    "duplicate-node-name": (_dup_node_name, "inventory.nodes[1].name", ["node name", "n0"]),
    "duplicate-gpu-id": (_dup_gpu_id, "inventory.nodes[0].gpus[1].id", ["GPU id", "GPU0"]),
    "gpu-unknown-pcie-switch": (_gpu_unknown_pcie_switch, "nodes[0].gpus[2].pcie_switch", ["sw9", "not"]),
    "nic-numa-undeclared": (_nic_numa_undeclared, "inventory.nodes[0].nics[0].numa", ["NUMA", "7"]),
    "pcie-parent-missing": (_pcie_parent_missing, "nodes[0].pcie_switches[2].parent", ["hb9", "not"]),
    "fabric-parent-missing": (_fabric_parent_missing, "inventory.switches[1].parent", ["spine9", "not"]),
    "leaf-missing": (_leaf_missing, "inventory.nodes[0].leaf", ["leaf9", "not"]),
    "replicas-zero": (_replicas_zero, "jobs[0].roles[0].replicas", ["at least 1", "got 0"]),
    "min-above-replicas": (_min_above_replicas, "jobs[0].roles[0].min_replicas", ["3", "replicas 2"]),
    # A member larger than any node is not bad input: its job is unplaced with the reason and the rest
    # of the batch placed (tests/test_unfit_jobs.py, over gRPC too).
    "fabric-cycle": (_fabric_cycle, "inventory.switches[", ["cycle", "spine0", "leaf0"]),
    "gpu-held-twice": (_gpu_held_twice, "nodes[0].allocations[1].gpus[0]", ["GPU0", "held"]),
    "allocation-unknown-gpu": (_allocation_unknown_gpu, "nodes[0].allocations[0].gpus[0]", ["GPU99", "not"]),
    "share-above-whole-gpu": (_share_above_whole_gpu, "member.gpu_share.milli", ["1000"]),
    "empty-share": (_empty_share, "member.gpu_share.milli", ["1 to 1000"]),
    "shares-overcommit": (_shares_overcommit, "allocations[1].gpu_shares[0].milli", ["1100", "1000"]),
    "unknown-policy-word": (_unknown_policy_word, "policy.node_policy", ["greedy", "binpack"]),
    "negative-priority": (_negative_priority, "jobs[0].priority", ["0"]),
}


@pytest.mark.needs_pipeline
@pytest.mark.parametrize(("mutate", "path", "words"), BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_bad_request_is_invalid_argument_naming_field_and_reason(
    channel: grpc.Channel, mutate: Callable[[placement_pb2.SolveRequest], None], path: str, words: list[str]
) -> None:
    msg = wire.request_to_proto(small_request())
    mutate(msg)
    error = call_solve(channel, msg)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()  # type: ignore[attr-defined]
    violations = [(v.field, v.description) for v in bad_request_of(error).field_violations]
    matching = [d for field, d in violations if path in field and all(w in d for w in words)]
    assert matching, f"no violation at {path!r} mentioning {words}: {violations}"
    assert path in error.details()  # type: ignore[attr-defined]  # the plain message lists them too


UNKNOWN_ENUM = '{"inventory": {}, "jobs": [{"id": "j", "roles": [{"name": "w", "replicas": 1,\n' \
    '  "member": {"gpus": 1, "alignment": {"mode": "REQUIREMENT_MAYBE"}}}]}]}'  # fmt: skip


def test_unknown_enum_name_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(UNKNOWN_ENUM)
    with pytest.raises(InvalidRequest) as caught:
        load_request(path)
    (problem,) = caught.value.problems
    assert problem.path == str(path)
    assert "jobs[0].roles[0].member.alignment.mode" in problem.message
    assert "REQUIREMENT_MAYBE" in problem.message


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
def test_unknown_enum_name_through_the_cli(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    start_server: Callable[..., RunningServer],
    remote: bool,
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(UNKNOWN_ENUM)
    server_args = ["--server", target(start_server())] if remote else []
    assert cli_main(["solve", str(path), *server_args]) == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert "REQUIREMENT_MAYBE" in err
    assert "Traceback" not in err


def test_many_problems_still_fit_in_the_status(start_server: Callable[..., RunningServer]) -> None:
    """Thousands of problems must not blow the peer's metadata limit (which would lose the code)."""
    problems = [Problem(path=f"inventory.nodes[{i}].name", message="must not be empty") for i in range(5000)]

    def refuse(
        request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        raise InvalidRequest(problems)

    running = start_server(solve_fn=refuse)
    with grpc.insecure_channel(target(running)) as chan:
        error = call_solve(chan, wire.request_to_proto(small_request()))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    violations = bad_request_of(error).field_violations
    assert 10 < len(violations) < 5000
    assert violations[-1].description.endswith("more problem(s) not shown")
    assert error.details().startswith("invalid request: 5000 problem(s)")  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- internal errors


def test_verification_failure_is_internal_with_violations(start_server: Callable[..., RunningServer]) -> None:
    def refuse(
        request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        raise VerificationFailed(("GPU0 of n0 given twice",))

    running = start_server(solve_fn=refuse)
    with pytest.raises(RemoteError) as caught:
        solve_remote(target(running), small_request())
    assert caught.value.code == grpc.StatusCode.INTERNAL
    assert "GPU0 of n0 given twice" in caught.value.message


def test_crash_is_internal_error_without_details(start_server: Callable[..., RunningServer]) -> None:
    def crash(
        request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        raise KeyError("secret internals")

    running = start_server(solve_fn=crash)
    with structlog.testing.capture_logs() as logs, pytest.raises(RemoteError) as caught:
        solve_remote(target(running), small_request())
    assert (caught.value.code, caught.value.message) == (grpc.StatusCode.INTERNAL, "internal error")
    (line,) = [entry for entry in logs if entry["event"] == "solve_failed"]
    assert line["code"] == "INTERNAL"
    assert line["exc_info"] is True, "the traceback goes to the log"


def test_unreachable_server_is_a_remote_error() -> None:
    with pytest.raises(RemoteError) as caught:
        solve_remote("127.0.0.1:1", small_request(), timeout_s=2)
    assert caught.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


# --------------------------------------------------------------------------- deadlines


def deadline_recorder() -> tuple[list[float | None], Callable[..., SolveResult]]:
    """A stand-in solve that answers at once and keeps the ``deadline_s`` each call was handed."""
    seen: list[float | None] = []

    def record(
        request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        seen.append(deadline_s)
        return SolveResult(status=SolveStatus.OPTIMAL)

    return seen, record


def test_the_call_deadline_reaches_the_solver(start_server: Callable[..., RunningServer]) -> None:
    seen, record = deadline_recorder()
    running = start_server(solve_fn=record)
    with grpc.insecure_channel(target(running)) as chan:
        stub = placement_pb2_grpc.PlacementStub(chan)
        stub.Solve(wire.request_to_proto(small_request()), timeout=5)
        stub.Solve(wire.request_to_proto(small_request()))
    # gRPC sends the timeout rounded up to its wire units, so the server may see a hair over 5 s.
    assert seen[0] is not None and 4 < seen[0] <= 5.1
    assert seen[1] is None


def test_the_answers_conversion_is_kept_back_from_the_solvers_time(
    start_server: Callable[..., RunningServer],
) -> None:
    """The reply's conversion grows with the answer's jobs (30-65 ms for 500 at load 4, session 13):
    the solver is handed the call's time less it, so a big answer leaves in time."""
    seen, record = deadline_recorder()
    one = small_request()
    many = one.model_copy(
        update={"jobs": tuple(one.jobs[0].model_copy(update={"id": f"j{k}"}) for k in range(2000))}
    )
    running = start_server(solve_fn=record)
    with grpc.insecure_channel(target(running)) as chan:
        stub = placement_pb2_grpc.PlacementStub(chan)
        for request in (one, many):
            stub.Solve(wire.request_to_proto(request), timeout=5)
    assert seen[0] is not None and seen[1] is not None
    # 2,000 jobs keep at least 0.2 s back (at a pace of 1 or more); one job next to nothing.
    assert seen[0] > 4.7 and seen[1] < 4.8
    assert seen[0] - seen[1] >= admission.REPLY_S_PER_JOB * 1999 - 0.05


def test_a_blocked_solve_does_not_hang_the_caller(start_server: Callable[..., RunningServer]) -> None:
    release = threading.Event()

    def block(
        request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        release.wait(timeout=30)
        return SolveResult(status=SolveStatus.OPTIMAL)

    running = start_server(solve_fn=block)
    try:
        started = time.monotonic()
        with pytest.raises(RemoteError) as caught:
            solve_remote(target(running), small_request(), timeout_s=0.5)
        assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 2
    finally:
        release.set()


@pytest.mark.needs_pipeline
def test_a_short_deadline_bounds_a_long_solve(server: RunningServer) -> None:
    """The policy allows a minute; the caller waits one second and gets an answer (or the deadline)."""
    jobs = [
        kit.job(f"j{i}", 1 + i % 8, 1 + i % 3, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)
        for i in range(60)
    ]
    request = kit.request(kit.cluster(48, nodes_per_leaf=6), jobs, time_limit_s=60)
    started = time.monotonic()
    try:
        result = solve_remote(target(server), request, timeout_s=1.0)
    except RemoteError as exc:
        assert exc.code == grpc.StatusCode.DEADLINE_EXCEEDED
    else:
        assert result.status != SolveStatus.UNSPECIFIED
    assert time.monotonic() - started < 1.5


# --------------------------------------------------------------------------- logging and the process


def test_configure_logging_writes_json_lines(tmp_path: Path) -> None:
    out = (tmp_path / "log.jsonl").open("w+")
    try:
        configure_logging(stream=out)
        structlog.get_logger("t").info("solve", request_id="r1", jobs=2)
        out.seek(0)
        line = json.loads(out.readline())
    finally:
        structlog.reset_defaults()
        out.close()
    assert (line["event"], line["request_id"], line["jobs"], line["level"]) == ("solve", "r1", 2, "info")
    assert "timestamp" in line


def test_run_forever_serves_then_stops_on_sigterm() -> None:
    code = "from solver.service.server import run_forever; run_forever('127.0.0.1', 0)"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        serving = json.loads(proc.stderr.readline())
        assert serving["event"] == "serving"
        with grpc.insecure_channel(f"127.0.0.1:{serving['port']}") as chan:
            answer = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        events = [json.loads(line)["event"] for line in proc.stderr.read().splitlines()]
        assert events[-2:] == ["stopping", "stopped"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
