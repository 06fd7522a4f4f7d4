"""Deadlines kept, work stopped, nobody starved, stopping on time (issue 23, items 2 and 3).

Real servers on 127.0.0.1 (port 0), real channels. The long solve is the real pipeline on a seeded
256-node × 200-gang scenario whose search runs its whole 30 s limit unless stopped. Where a test is
about the plumbing alone (a queue, a refusal), a stand-in ``solve_fn`` blocks on an event instead,
said at each: it makes "busy" exact rather than a matter of how fast the machine is.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.scenario import scenario
from solver.domain.cancel import Cancel, Cancelled
from solver.domain.model import NicMode, Requirement, SolveRequest, SolveResult, SolveStatus
from solver.service import wire
from solver.service.admission import REPLY_MARGIN_S, Admission, Call, ServiceLimits, deadline_of
from solver.service.server import RunningServer, serve
from solver.solve import solve
from tests import kit
from topoplace.v1 import placement_pb2, placement_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
SolveFn = Callable[..., SolveResult]


@pytest.fixture
def start_server() -> Iterator[Callable[..., RunningServer]]:
    started: list[RunningServer] = []

    def start(**kwargs: object) -> RunningServer:
        running = serve("127.0.0.1", 0, **kwargs)  # type: ignore[arg-type]
        started.append(running)
        return running

    yield start
    for running in started:
        running.admission.cancel_all("test over")
        running.stop(grace_s=None)


@pytest.fixture
def events() -> Iterator[list[dict[str, object]]]:
    """The service's structured log events, captured."""
    with structlog.testing.capture_logs() as captured:
        yield captured  # type: ignore[misc]


def stub_of(running: RunningServer) -> tuple[grpc.Channel, placement_pb2_grpc.PlacementStub]:
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    return channel, placement_pb2_grpc.PlacementStub(channel)


def small_message() -> placement_pb2.SolveRequest:
    return wire.request_to_proto(
        kit.request(
            kit.cluster(2),
            [kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)],
            time_limit_s=2,
        )
    )


def long_request() -> SolveRequest:
    """The real pipeline searching for 30 s: 256 HGX nodes, 200 gangs, not deterministic."""
    request = scenario(256, 200, seed=1, time_limit_s=30).request
    return request.model_copy(update={"policy": request.policy.model_copy(update={"deterministic": False})})


def long_whatif() -> Any:
    """A what-if run of :func:`long_request` under the solver, 30 s a solve (19 s uncancelled)."""
    from solver.whatif.convert import scenario_to_proto
    from solver.whatif.scenario import BaseInventory, PolicySpec, Scenario, SolverPolicy
    from topoplace.v1 import whatif_pb2

    hard = long_request()
    whatif = Scenario(
        base=BaseInventory(inventory=hard.inventory),
        jobs=hard.jobs,
        policies=(PolicySpec(name="solver", solver=SolverPolicy(time_limit_s=30)),),
    )
    return whatif_pb2.WhatIfRequest(scenario=scenario_to_proto(whatif))


class Recorder:
    """Wraps the real pipeline: when each solve ended and how (for "the work stopped")."""

    def __init__(self, ignore_deadline: bool = False) -> None:
        self.ended: list[tuple[float, str]] = []
        self.started = threading.Event()
        self.ignore_deadline = ignore_deadline

    def __call__(
        self, request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        self.started.set()
        try:
            result = solve(request, deadline_s=None if self.ignore_deadline else deadline_s, cancel=cancel)
        except Cancelled:
            self.ended.append((time.monotonic(), "cancelled"))
            raise
        self.ended.append((time.monotonic(), "answered"))
        return result


class Blocker:
    """A stand-in solve that works until released (or, if ``cooperative``, until cancelled)."""

    def __init__(self, cooperative: bool = True) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.cooperative = cooperative
        self.lock = threading.Lock()

    def __call__(
        self, request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
    ) -> SolveResult:
        with self.lock:
            self.calls += 1
        while not self.release.wait(0.01):
            if self.cooperative and cancel is not None:
                cancel.check()
        return SolveResult(request_id=request.request_id, status=SolveStatus.OPTIMAL)


# --------------------------------------------------------------------------- item 2: deadlines, cancels


@pytest.mark.needs_pipeline
def test_a_client_cancel_stops_the_search_within_100_ms(start_server: Callable[..., RunningServer]) -> None:
    recorder = Recorder()
    running = start_server(solve_fn=recorder)
    channel, stub = stub_of(running)
    with channel:
        future = stub.Solve.future(wire.request_to_proto(long_request()))
        assert recorder.started.wait(10)
        time.sleep(1.0)  # well inside the 30 s search
        cancelled_at = time.monotonic()
        future.cancel()
        deadline = time.monotonic() + 5
        while not recorder.ended and time.monotonic() < deadline:
            time.sleep(0.005)
    assert recorder.ended, "the solve went on after its caller cancelled"
    ended_at, how = recorder.ended[0]
    assert how == "cancelled"
    # 100 ms is the promise; the bound here is looser for a loaded 2-core CI machine.
    assert ended_at - cancelled_at < 0.5, f"stopped {ended_at - cancelled_at:.3f} s after the cancel"


@pytest.mark.needs_pipeline
def test_an_expired_deadline_stops_the_work_even_if_the_solve_ignored_it(
    start_server: Callable[..., RunningServer], events: list[dict[str, object]]
) -> None:
    """The pipeline is told nothing of the deadline here: the call's expiry alone must stop it."""
    recorder = Recorder(ignore_deadline=True)
    running = start_server(solve_fn=recorder)
    channel, stub = stub_of(running)
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.Solve(wire.request_to_proto(long_request()), timeout=2.0)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    expired = time.monotonic()
    while not recorder.ended and time.monotonic() < expired + 5:
        time.sleep(0.005)
    assert recorder.ended and recorder.ended[0][1] == "cancelled"
    assert recorder.ended[0][0] - expired < 0.5
    cancelled = [e for e in events if e["event"] == "solve_cancelled"]
    assert cancelled and cancelled[0]["code"] == "DEADLINE_EXCEEDED"
    # Where it was stopped, for whoever reads the log: the stage in progress comes last.
    stages = cancelled[0]["stages_ms"]
    assert isinstance(stages, dict) and stages and next(iter(stages)) == "validate"
    assert not [e for e in events if e["event"] == "solve"]  # never logged as a success


def test_the_servers_deadline_is_the_callers_less_the_reply_margin() -> None:
    """gRPC sends a deadline as a timeout relative to when the caller sent it, so the server's copy
    runs late by the request header's transit and the caller's own deadline fires first: its cancel
    could reach the server while the server still thought it had time, and an expired call was
    logged CANCELLED (test_an_expired_deadline_stops_the_work_... under load). The server's
    deadline is the caller's less a margin that also pays for the reply."""

    class Context:  # what deadline_of reads of a gRPC context
        def __init__(self, remaining: float | None) -> None:
            self.remaining = remaining

        def time_remaining(self) -> float | None:
            return self.remaining

    assert deadline_of(Context(2.0), 100.0) == pytest.approx(100.0 + 2.0 - REPLY_MARGIN_S)  # type: ignore[arg-type]
    assert deadline_of(Context(0.01), 100.0) == 100.0  # type: ignore[arg-type]
    assert deadline_of(Context(None), 100.0) is None  # type: ignore[arg-type]
    call = Call(method="m", lane="l", arrived=100.0, deadline=deadline_of(Context(2.0), 100.0))  # type: ignore[arg-type]
    assert call.deadline is not None and call.deadline < 102.0


def test_an_answer_after_the_deadline_is_logged_as_late(
    start_server: Callable[..., RunningServer], events: list[dict[str, object]]
) -> None:
    """Stand-in: a solve that looks at nothing and answers after the caller has gone."""

    def slow(request: SolveRequest, **_: object) -> SolveResult:
        time.sleep(0.6)
        return SolveResult(request_id=request.request_id, status=SolveStatus.OPTIMAL)

    running = start_server(solve_fn=slow)
    channel, stub = stub_of(running)
    with channel, pytest.raises(grpc.RpcError):
        stub.Solve(small_message(), timeout=0.2)
    time.sleep(0.7)
    late = [e for e in events if e["event"] == "solve_late"]
    assert len(late) == 1 and late[0]["late_ms"] > 0  # type: ignore[operator]
    assert not [e for e in events if e["event"] == "solve"]
    assert running.metrics.late.labels(method="Placement/Solve")._value.get() == 1


def test_the_deadline_is_read_on_arrival(start_server: Callable[..., RunningServer]) -> None:
    """The budget the solve gets is what was left when the call arrived, minus conversion — not
    the full timeout again after a slow conversion."""
    seen: list[float | None] = []

    def record(request: SolveRequest, *, deadline_s: float | None = None, **_: object) -> SolveResult:
        seen.append(deadline_s)
        return SolveResult(request_id=request.request_id, status=SolveStatus.OPTIMAL)

    running = start_server(solve_fn=record)
    channel, stub = stub_of(running)
    with channel:
        stub.Solve(small_message(), timeout=3)
        stub.Solve(small_message())
    assert seen[0] is not None and 2 < seen[0] <= 3.05
    assert seen[1] is None


# --------------------------------------------------------------------------- item 3: admission


def test_a_full_queue_is_refused_at_once_with_resource_exhausted(
    start_server: Callable[..., RunningServer],
) -> None:
    """Stand-in blocking solve: one slot, one queue place; the third call is refused in
    milliseconds, not queued, and counted as shed."""
    blocker = Blocker()
    limits = ServiceLimits(max_concurrent_solves=1, max_queued=1, small_nodes=0)  # every Solve large
    running = start_server(solve_fn=blocker, limits=limits)
    channel, stub = stub_of(running)
    with channel, ThreadPoolExecutor(2) as pool:
        first = pool.submit(stub.Solve, small_message(), timeout=20)
        while blocker.calls < 1:
            time.sleep(0.01)
        second = pool.submit(stub.Solve, small_message(), timeout=20)
        while running.admission.gates["/topoplace.v1.Placement/Solve", "large"].waiting < 1:
            time.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            stub.Solve(small_message(), timeout=20)
        refused_in = time.monotonic() - started
        blocker.release.set()
        assert first.result().status == placement_pb2.SOLVE_STATUS_OPTIMAL
        assert second.result().status == placement_pb2.SOLVE_STATUS_OPTIMAL
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "queue" in caught.value.details()
    assert refused_in < 1.0
    assert running.metrics.shed.labels(method="Placement/Solve", reason="queue_full")._value.get() == 1


def test_health_and_small_solves_do_not_wait_behind_big_ones(
    start_server: Callable[..., RunningServer],
) -> None:
    """Stand-in for the big solves (blocking); the small solve is the real pipeline."""
    blocker = Blocker()

    def route(request: SolveRequest, **kwargs: object) -> SolveResult:
        if len(request.inventory.nodes) > 8:
            return blocker(request, **kwargs)  # type: ignore[arg-type]
        return solve(request, **kwargs)  # type: ignore[arg-type]

    limits = ServiceLimits(max_concurrent_solves=2, max_queued=2, small_nodes=8)
    running = start_server(solve_fn=route, limits=limits)
    big = wire.request_to_proto(
        kit.request(kit.cluster(16), [kit.job("b", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)])
    )
    channel, stub = stub_of(running)
    with channel, ThreadPoolExecutor(4) as pool:
        busy = [pool.submit(stub.Solve, big, timeout=30) for _ in range(4)]  # 2 working, 2 queued
        while blocker.calls < 2:
            time.sleep(0.01)
        started = time.monotonic()
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        health_s = time.monotonic() - started
        started = time.monotonic()
        answer = stub.Solve(small_message(), timeout=10)
        small_s = time.monotonic() - started
        blocker.release.set()
        for f in busy:
            f.result()
    assert status.status == health_pb2.HealthCheckResponse.SERVING
    assert health_s < 0.5
    assert len(answer.jobs) == 1 and answer.jobs[0].placed
    assert small_s < 5


def test_a_call_whose_deadline_passes_in_the_queue_does_no_work(
    start_server: Callable[..., RunningServer],
) -> None:
    blocker = Blocker()
    running = start_server(solve_fn=blocker, limits=ServiceLimits(max_concurrent_solves=1, small_nodes=0))
    channel, stub = stub_of(running)
    with channel, ThreadPoolExecutor(1) as pool:
        first = pool.submit(stub.Solve, small_message(), timeout=20)
        while blocker.calls < 1:
            time.sleep(0.01)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Solve(small_message(), timeout=0.3)
        blocker.release.set()
        first.result()
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert blocker.calls == 1  # the expired call never reached the solver
    assert running.metrics.shed.labels(method="Placement/Solve", reason="expired_in_queue")._value.get() == 1


@pytest.mark.parametrize(
    ("limits", "field"),
    [(ServiceLimits(max_nodes=1), "inventory.nodes"), (ServiceLimits(max_jobs=1), "jobs")],
)
def test_requests_above_the_caps_are_refused_naming_the_field(
    start_server: Callable[..., RunningServer], limits: ServiceLimits, field: str
) -> None:
    running = start_server(solve_fn=Blocker(), limits=limits)
    message = wire.request_to_proto(
        kit.request(
            kit.cluster(2),
            [
                kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
                kit.job("b", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
            ],
        )
    )
    channel, stub = stub_of(running)
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.Solve(message, timeout=5)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details().startswith(f"{field}: 2 in the request, above this server's cap of 1")


def test_a_message_above_the_byte_cap_is_refused(start_server: Callable[..., RunningServer]) -> None:
    running = start_server(solve_fn=Blocker(), limits=ServiceLimits(max_message_bytes=10_000))
    message = wire.request_to_proto(
        kit.request(kit.cluster(40), [kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)])
    )
    assert message.ByteSize() > 10_000
    channel, stub = stub_of(running)
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.Solve(message, timeout=5)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_bad_limits_are_refused_before_serving() -> None:
    with pytest.raises(ValueError, match="--max-concurrent-solves: must be at least 1"):
        serve("127.0.0.1", 0, limits=ServiceLimits(max_concurrent_solves=0))


# --------------------------------------------------------------------------- stopping


def test_stop_reports_not_serving_first_and_ends_within_the_grace(
    start_server: Callable[..., RunningServer],
) -> None:
    """A stand-in solve that never looks at its cancel token (the worst case) is in flight: the
    port stays open for the drain with health NOT_SERVING and new solves UNAVAILABLE, and the stop
    still returns within its grace."""
    blocker = Blocker(cooperative=False)
    running = start_server(solve_fn=blocker)
    channel, stub = stub_of(running)
    health = health_pb2_grpc.HealthStub(channel)
    with channel, ThreadPoolExecutor(2) as pool:
        pool.submit(stub.Solve, small_message(), timeout=30)
        while blocker.calls < 1:
            time.sleep(0.01)
        started = time.monotonic()
        stopping = pool.submit(running.stop, 3.0, 1.0)
        time.sleep(0.3)  # inside the drain
        status = health.Check(health_pb2.HealthCheckRequest(), timeout=1).status
        with pytest.raises(grpc.RpcError) as refused:
            stub.Solve(small_message(), timeout=1)
        finished = stopping.result(timeout=10)
        took = time.monotonic() - started
        blocker.release.set()
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not finished  # the call did not finish by itself ...
    assert took < 3.3  # ... and the stop kept its grace anyway


def health_until_not_serving(
    health: health_pb2_grpc.HealthStub, proc: subprocess.Popen[str], until: float
) -> list[int]:
    """Health checks, one after another, until one answers NOT_SERVING, the port closes or
    ``until``: the statuses answered. This used to be one check 0.2 s after SIGTERM with a 1 s
    timeout, which assumed the signal handled and the check answered within those times; under
    load (average 20-30 on 2 cores) one did not. A check that times out is asked again; a closed
    port ends the list (and the test fails if NOT_SERVING never came)."""
    statuses: list[int] = []
    while time.monotonic() < until and proc.poll() is None:
        try:
            statuses.append(health.Check(health_pb2.HealthCheckRequest(), timeout=1).status)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # type: ignore[attr-defined]
                continue  # the machine was busy: ask again
            break  # UNAVAILABLE: the port closed
        if statuses[-1] == health_pb2.HealthCheckResponse.NOT_SERVING:
            break
    return statuses


@pytest.mark.needs_pipeline
def test_sigterm_stops_a_serving_process_within_the_grace_period() -> None:
    """The real process, a real 30 s solve in flight, SIGTERM: NOT_SERVING, then out within the
    grace (3 s here), exit code 0."""
    command = [
        sys.executable, "-m", "solver.cli", "serve", "--port", "0", "--grace-s", "3", "--drain-s", "0.5",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        serving = json.loads(proc.stderr.readline())
        assert serving["event"] == "serving"
        channel = grpc.insecure_channel(f"127.0.0.1:{serving['port']}")
        stub = placement_pb2_grpc.PlacementStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        future = stub.Solve.future(wire.request_to_proto(long_request()))
        time.sleep(3.0)  # converted, validated, searching
        assert not future.done()
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        statuses = health_until_not_serving(health, proc, until=signalled + 3.0)
        code = proc.wait(timeout=10)
        took = time.monotonic() - signalled
        channel.close()
        events = [json.loads(line)["event"] for line in proc.stderr.read().splitlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Health said NOT_SERVING before the port closed (SERVING until the signal was handled).
    assert statuses and statuses[-1] == health_pb2.HealthCheckResponse.NOT_SERVING, statuses
    assert set(statuses[:-1]) <= {health_pb2.HealthCheckResponse.SERVING}
    assert code == 0
    assert took < 3.5, f"stopped {took:.2f} s after SIGTERM with a 3 s grace"
    assert "stopping" in events and events[-1] == "stopped"


@pytest.mark.needs_pipeline
def test_a_cancelled_whatif_run_stops_and_is_logged_as_cancelled(
    start_server: Callable[..., RunningServer], events: list[dict[str, object]]
) -> None:
    """WhatIf runs many solves in its handler; they run under the call's token too."""
    from topoplace.v1 import whatif_pb2_grpc

    running = start_server()
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        stub = whatif_pb2_grpc.WhatIfStub(channel)
        future = stub.Run.future(long_whatif())
        time.sleep(0.5)  # inside the run (19 s uncancelled at a79ef33)
        future.cancel()
        cancelled_at = time.monotonic()
        while running.admission.in_flight() and time.monotonic() < cancelled_at + 10:
            time.sleep(0.01)
        stopped_in = time.monotonic() - cancelled_at
    assert running.admission.in_flight() == 0
    assert stopped_in < 2.0, f"the what-if run went on {stopped_in:.2f} s after the cancel"
    names = [e["event"] for e in events]
    assert "whatif_failed" not in names  # never an INTERNAL with a traceback
    # Stopped by the token inside a solve, or by the run's own check between solves (incomplete).
    assert any(
        e["event"] == "whatif_cancelled" or (e["event"] == "whatif" and not e["complete"]) for e in events
    ), events


class HoldUntilCancelled(grpc.ServerInterceptor):
    """Runs a call's handler only once its caller has cancelled: the window between a request's
    arrival and the admission's callback, which a loaded host opens by chance, opened every time."""

    def __init__(self) -> None:
        self.entered = threading.Event()  # the handler has the call (so the caller's cancel reaches it)
        self.released = threading.Event()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        def held(request: object, context: grpc.ServicerContext) -> object:
            self.entered.set()
            while context.is_active():
                time.sleep(0.01)
            self.released.set()
            return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            held,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


@pytest.mark.needs_pipeline
def test_a_call_cancelled_before_its_handler_starts_stops_at_once(events: list[dict[str, object]]) -> None:
    """gRPC never calls back a callback added after the call ended: the admission must see that and
    stop the work itself (seen once in CI: a what-if run going on for nobody)."""
    from solver.service.metrics import ServiceMetrics
    from solver.whatif.service import add_to_server
    from topoplace.v1 import whatif_pb2_grpc

    hold = HoldUntilCancelled()
    admission = Admission(ServiceLimits(), ServiceMetrics())
    server = grpc.server(ThreadPoolExecutor(max_workers=4), interceptors=(hold, admission))
    add_to_server(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            future = whatif_pb2_grpc.WhatIfStub(channel).Run.future(long_whatif())
            # Cancelled once the server has the call: cancelled before, it never runs a handler at all.
            assert hold.entered.wait(30), "the server never took the call"
            future.cancel()
            assert hold.released.wait(10), "the held handler never saw its call end"
            released_at = time.monotonic()
            time.sleep(0.05)  # the admission has taken the call
            while admission.in_flight() and time.monotonic() < released_at + 10:
                time.sleep(0.01)
            stopped_in = time.monotonic() - released_at
        assert admission.in_flight() == 0
        assert stopped_in < 2.0, f"the what-if run went on {stopped_in:.2f} s after its call ended"
        assert any(e["event"] == "whatif_cancelled" for e in events), events
    finally:
        admission.cancel_all("test over")
        server.stop(grace=None)
