"""The gRPC server: the Placement servicer, health checking and reflection.

``Solve`` is wire → domain → ``solver.solve.solve`` → wire. Errors keep their meaning on the wire:
bad input is ``INVALID_ARGUMENT`` with a ``google.rpc.BadRequest`` (one field violation per problem)
in the rich status details, a placement the verifier refuses is ``INTERNAL`` with its violations,
and anything else is ``INTERNAL`` "internal error" — the traceback goes to the log, never to the
caller.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from types import FrameType

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from solver.domain.errors import InvalidRequest, VerificationFailed
from solver.domain.model import SolveRequest, SolveResult
from solver.service import wire
from solver.service.channel import CHANNEL_OPTIONS
from solver.service.logging import configure_logging
from solver.service.status import MAX_MESSAGE_TEXT_BYTES, invalid_argument_status, truncate
from topoplace.v1 import placement_pb2, placement_pb2_grpc

SERVICE_NAME = placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name

# A deadline further away than a year is a call without one.
NO_DEADLINE_ABOVE_S = 365 * 24 * 3600.0
# How long a stopping server lets calls in flight finish.
SHUTDOWN_GRACE_S = 5.0

SolveFn = Callable[..., SolveResult]
"""``solve(request, *, deadline_s)``: the pipeline, or a stand-in in tests of the plumbing."""

_log = structlog.get_logger("topoplace.service")


def _pipeline_solve(request: SolveRequest, *, deadline_s: float | None = None) -> SolveResult:
    """The real pipeline, imported on first use: OR-Tools is heavy, and a server that only answers
    health checks (or a test of them) should not pay for it at import."""
    from solver.solve import solve

    return solve(request, deadline_s=deadline_s)


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    """Serves ``topoplace.v1.Placement``; ``solve_fn`` defaults to ``solver.solve.solve``."""

    def __init__(self, solve_fn: SolveFn | None = None) -> None:
        self._solve = solve_fn or _pipeline_solve

    def Solve(  # the RPC's name, hence not snake_case
        self, request: placement_pb2.SolveRequest, context: grpc.ServicerContext
    ) -> placement_pb2.SolveResponse:
        started = time.perf_counter()
        request_id = request.request_id or uuid.uuid4().hex
        log = _log.bind(request_id=request_id, jobs=len(request.jobs), nodes=len(request.inventory.nodes))
        try:
            result = self._run(request, request_id, _deadline_s(context))
            response = wire.result_to_proto(result)
        except InvalidRequest as exc:
            log.info("solve_rejected", code="INVALID_ARGUMENT", problems=len(exc.problems), ms=_ms(started))
            context.abort_with_status(invalid_argument_status(exc.problems))
        except VerificationFailed as exc:
            log.error("solve_failed", code="INTERNAL", violations=list(exc.violations), ms=_ms(started))
            context.abort(grpc.StatusCode.INTERNAL, truncate(str(exc), MAX_MESSAGE_TEXT_BYTES))
        except Exception:
            log.exception("solve_failed", code="INTERNAL", ms=_ms(started))
            context.abort(grpc.StatusCode.INTERNAL, "internal error")
        log.info(
            "solve",
            status=result.status.name,
            gap=result.gap,
            placed_jobs=sum(job.placed for job in result.jobs),
            ms=_ms(started),
        )
        return response

    def _run(
        self, request: placement_pb2.SolveRequest, request_id: str, deadline_s: float | None
    ) -> SolveResult:
        domain = wire.request_from_proto(request)
        if domain.request_id != request_id:
            domain = domain.model_copy(update={"request_id": request_id})
        result = self._solve(domain, deadline_s=deadline_s)
        if result.request_id != request_id:  # the caller matches answers to requests by this id
            result = result.model_copy(update={"request_id": request_id})
        return result


def _deadline_s(context: grpc.ServicerContext) -> float | None:
    """Seconds until the caller's deadline, or None without one. gRPC reports "no deadline" as
    about 2**63 ns rather than None; passing that on would overflow any time arithmetic."""
    remaining = context.time_remaining()
    if remaining is None or remaining > NO_DEADLINE_ABOVE_S:
        return None
    return max(0.0, remaining)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


# --------------------------------------------------------------------------- server lifecycle


@dataclass(frozen=True)
class RunningServer:
    """A started server and what callers need to reach and stop it."""

    server: grpc.Server
    port: int
    health: health.HealthServicer

    def stop(self, grace_s: float | None = SHUTDOWN_GRACE_S) -> None:
        """Report NOT_SERVING (so balancers drain), then stop, letting calls in flight finish."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()


def serve(
    host: str = "127.0.0.1",
    port: int = 50051,
    *,
    max_workers: int = 4,
    solve_fn: SolveFn | None = None,
) -> RunningServer:
    """Start serving Placement, health and reflection on ``host:port`` (0 = any free port).

    Returns at once with the server running; ``RunningServer.port`` is the port actually bound.
    ``max_workers`` bounds concurrent solves: each one uses its own CP-SAT workers.
    """
    # Without SO_REUSEPORT off, a second server on a busy port binds too and silently shares its calls.
    options = (*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=options)
    placement_pb2_grpc.add_PlacementServicer_to_server(PlacementServicer(solve_fn), server)
    whatif_name = _add_whatif(server)
    health_servicer = _add_health(server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, whatif_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:  # grpc reports a failed bind as RuntimeError (older versions: 0)
        raise OSError(f"cannot listen on {host}:{port}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    server.start()
    return RunningServer(server=server, port=bound, health=health_servicer)


def _add_whatif(server: grpc.Server) -> str:
    """``topoplace.v1.WhatIf`` (offline what-if queries, ``solver/whatif``), imported here only: the
    solver core never imports the what-if package, the service merely hosts it."""
    from solver.whatif.service import add_to_server

    return add_to_server(server)


def _add_health(server: grpc.Server) -> health.HealthServicer:
    servicer = health.HealthServicer()
    for name in ("", SERVICE_NAME):
        servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


def run_forever(host: str = "127.0.0.1", port: int = 50051, *, max_workers: int = 4) -> None:
    """Serve until SIGTERM or SIGINT, then drain and stop. Must run in the main thread (signals)."""
    configure_logging()
    running = serve(host, port, max_workers=max_workers)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    _log.info("serving", host=host, port=running.port, max_workers=max_workers)
    try:
        while not stop.wait(timeout=1.0):  # a timed wait lets the main thread run signal handlers
            pass
    finally:
        _log.info("stopping", signal=received[0] if received else None)
        running.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _log.info("stopped")
