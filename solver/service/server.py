"""The gRPC server: the Placement servicer, health checking, reflection, admission, TLS, metrics.

``Solve`` is wire → domain → ``solver.solve.solve`` → wire. Errors keep their meaning on the wire:
bad input is ``INVALID_ARGUMENT`` with a ``google.rpc.BadRequest`` (one field violation per problem)
in the rich status details, a placement the verifier refuses is ``INTERNAL`` with its violations,
and anything else is ``INTERNAL`` "internal error" — the traceback goes to the log, never to the
caller. Calls beyond what the server admits are refused before any work (``solver.service.admission``):
``RESOURCE_EXHAUSTED`` when a queue is full or a request above the caps, ``UNAVAILABLE`` while
stopping. A call whose caller went away (cancelled, past its deadline) has its solve stopped.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from types import FrameType

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from solver.domain import cancel as cancellation
from solver.domain.cancel import Cancel, Cancelled
from solver.domain.errors import InvalidRequest, VerificationFailed
from solver.domain.model import SolveRequest, SolveResult
from solver.domain.nodefold import set_node_memory_budget
from solver.service import allocator, wire
from solver.service.admission import (
    CURRENT_CALL,
    SERVER_STOPPING,
    SOLVE_METHOD,
    Admission,
    Call,
    ServiceLimits,
    deadline_of,
    reply_s,
    stop_when_ended,
)
from solver.service.logging import configure_logging
from solver.service.metrics import MetricsServer, ServiceMetrics, start_metrics_server
from solver.service.status import MAX_MESSAGE_TEXT_BYTES, invalid_argument_status, truncate
from solver.service.tls import CertificateFiles, TlsFiles, server_credentials
from topoplace.v1 import placement_pb2, placement_pb2_grpc

SERVICE_NAME = placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name

# How long a stopping server lets calls in flight finish, unless told otherwise.
SHUTDOWN_GRACE_S = ServiceLimits.grace_s
# What a stop keeps of its grace for gRPC to close the port and the cancelled calls to unwind.
STOP_MARGIN_S = 0.5

SolveFn = Callable[..., SolveResult]
"""``solve(request, *, deadline_s, cancel)``: the pipeline, or a stand-in in tests of the plumbing."""

_log = structlog.get_logger("topoplace.service")


def _pipeline_solve(
    request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
) -> SolveResult:
    """The real pipeline, imported on first use: OR-Tools is heavy, and a server that only answers
    health checks (or a test of them) should not pay for it at import."""
    from solver.solve import solve

    return solve(request, deadline_s=deadline_s, cancel=cancel)


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    """Serves ``topoplace.v1.Placement``; ``solve_fn`` defaults to ``solver.solve.solve``."""

    def __init__(
        self,
        solve_fn: SolveFn | None = None,
        limits: ServiceLimits | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._solve = solve_fn or _pipeline_solve
        self._limits = limits or ServiceLimits()
        self._metrics = metrics or ServiceMetrics()

    def Solve(  # the RPC's name, hence not snake_case
        self, request: placement_pb2.SolveRequest, context: grpc.ServicerContext
    ) -> placement_pb2.SolveResponse:
        # The admission interceptor read the deadline on arrival; without it (a servicer used
        # alone), read it now, still before the request is converted.
        call = CURRENT_CALL.get()
        if call is None:
            now = time.monotonic()
            call = Call(method=SOLVE_METHOD, lane="", arrived=now, deadline=deadline_of(context, now))
            stop_when_ended(context, call.cancel, lambda: "the call ended")
        request_id = request.request_id or uuid.uuid4().hex
        log = _log.bind(
            request_id=request_id, jobs=len(request.jobs), nodes=len(request.inventory.nodes), lane=call.lane
        )
        try:
            result, response, replied_s = self._run(request, request_id, call)
        except InvalidRequest as exc:
            log.info("solve_rejected", code="INVALID_ARGUMENT", problems=len(exc.problems), ms=_ms(call))
            context.abort_with_status(invalid_argument_status(exc.problems))
        except Cancelled as exc:
            # Nobody receives this status (the caller is gone); it ends the handler at once.
            code = grpc.StatusCode.DEADLINE_EXCEEDED if call.late_s() > 0 else grpc.StatusCode.CANCELLED
            log.info(
                "solve_cancelled",
                code=code.name,
                reason=exc.reason,
                ms=_ms(call),
                convert_ms=round(call.converted_s * 1000, 1),
                stages_ms=exc.stages_ms,
            )
            context.abort(code, str(exc))
        except VerificationFailed as exc:
            log.error("solve_failed", code="INTERNAL", violations=list(exc.violations), ms=_ms(call))
            context.abort(grpc.StatusCode.INTERNAL, truncate(str(exc), MAX_MESSAGE_TEXT_BYTES))
        except Exception:
            log.exception("solve_failed", code="INTERNAL", ms=_ms(call))
            context.abort(grpc.StatusCode.INTERNAL, "internal error")
        placed = sum(job.placed for job in result.jobs)
        late = call.late_s()
        if late > 0:
            # An answer nobody received is not a success: said so in the log, and in the metrics
            # (the admission counts every call's end: topoplace_late_answers_total).
            log.warning(
                "solve_late",
                status=result.status.name,
                placed_jobs=placed,
                late_ms=round(late * 1000, 3),
                ms=_ms(call),
                convert_ms=round(call.converted_s * 1000, 1),
                reply_ms=round(replied_s * 1000, 1),
                queued_ms=round(call.queued_s * 1000, 3),
                stages_ms={t.stage: round(t.ms, 1) for t in result.timings},
            )
        else:
            log.info("solve", status=result.status.name, gap=result.gap, placed_jobs=placed, ms=_ms(call))
        self._observe(result, call)
        return response

    def _run(
        self, request: placement_pb2.SolveRequest, request_id: str, call: Call
    ) -> tuple[SolveResult, placement_pb2.SolveResponse, float]:
        """The result, its wire form, and how long that conversion took (logged: it is the one
        part of the call after the pipeline's own stages, kept in the reply's margin)."""
        from solver.solve import rare_full_collections  # OR-Tools on first use, as _pipeline_solve

        # The conversions too: a full collection during a 16,384-node conversion took 1.4-1.7 s of
        # warm calls whose solve then kept its deadline (bench/RESULTS.md, session 10); one during
        # the answer's conversion made a cold 1,024-node call 0.29 s late (session 11).
        with rare_full_collections():
            result = self._converted_and_solved(request, request_id, call)
            started = time.perf_counter()
            response = wire.result_to_proto(result)
            return result, response, time.perf_counter() - started

    def _converted_and_solved(
        self, request: placement_pb2.SolveRequest, request_id: str, call: Call
    ) -> SolveResult:
        from solver.compile.cost import (
            ALIKE_CONVERT_S_PER_NODE,
            CONVERT_S_PER_NODE,
            KIND_S_PER_NODE,
            PACE,
            WARM_CONVERT_S_PER_NODE,
        )
        from solver.fallback import PLACING_SHARE, after_reading_s_per_node, answer_s
        from solver.service.partial import answer_from_nodes_read

        started = time.perf_counter()
        left = call.remaining_s()
        reading = None
        if left is not None:
            # Nodes are read while the answer from them still fits (solver.service.partial): what
            # each costs afterwards, and a share of the time for the greedy's placing, are kept back.
            pace = PACE.ratio()
            per_node, per_miss, per_kind = after_reading_s_per_node(pace)
            reading = wire.Reading(
                until=started + (1 - PLACING_SHARE) * left,
                after_s=answer_s(0, len(request.jobs), pace),
                after_s_per_node=per_node,
                after_s_per_miss=per_miss,
                after_s_per_new_kind=per_kind,
                convert_s_per_hit=WARM_CONVERT_S_PER_NODE * pace,
                convert_s_per_miss=CONVERT_S_PER_NODE * pace,
                convert_s_per_alike=ALIKE_CONVERT_S_PER_NODE * pace,
                convert_s_per_kind=KIND_S_PER_NODE * pace,
                started=started,
            )
        domain = wire.request_from_proto(request, reading)
        converted_s = call.converted_s = time.perf_counter() - started
        self._metrics.stage_seconds.labels(stage="convert").observe(converted_s)
        if reading is not None:
            # What the reading predicted at the calibration's pace (its charges carry this call's).
            PACE.observe(reading.predicted_s(len(domain.inventory.nodes)) / pace, converted_s)
        update: dict[str, object] = {}
        if domain.request_id != request_id:
            update["request_id"] = request_id
        cap = self._limits.search_workers
        if cap and (
            domain.policy.workers > cap or (not domain.policy.workers and not domain.policy.deterministic)
        ):
            update["policy"] = domain.policy.model_copy(update={"workers": cap})
        if update:
            domain = domain.model_copy(update=update)
        call.cancel.check()  # gone while its request was converted: no search for nobody
        # The call's deadline already keeps the reply's fixed margin back (admission.REPLY_MARGIN_S);
        # the answer's conversion, which grows with its jobs, is kept back here.
        reply = reply_s(len(domain.jobs), PACE.ratio())
        if left is not None and len(domain.inventory.nodes) < len(request.inventory.nodes):
            with cancellation.cancelling(call.cancel):
                result = answer_from_nodes_read(
                    domain, len(request.inventory.nodes), started + left - reply, misses=reading.misses
                )
        else:
            remaining = call.remaining_s()
            deadline_s = None if remaining is None else max(0.0, remaining - reply)
            result = self._solve(domain, deadline_s=deadline_s, cancel=call.cancel)
        if result.request_id != request_id:  # the caller matches answers to requests by this id
            result = result.model_copy(update={"request_id": request_id})
        return result

    def _observe(self, result: SolveResult, call: Call) -> None:
        m = self._metrics
        for timing in result.timings:
            m.stage_seconds.labels(stage=timing.stage).observe(timing.ms / 1000)
        m.stage_seconds.labels(stage="total").observe(time.monotonic() - call.arrived)
        m.gap.observe(result.gap)
        placed = sum(job.placed for job in result.jobs)
        m.jobs.labels(outcome="placed").inc(placed)
        m.jobs.labels(outcome="unplaced").inc(len(result.jobs) - placed)


def _ms(call: Call) -> float:
    return round((time.monotonic() - call.arrived) * 1000, 3)


# --------------------------------------------------------------------------- server lifecycle


@dataclass
class RunningServer:
    """A started server and what callers need to reach, watch and stop it."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    admission: Admission
    metrics: ServiceMetrics
    metrics_server: MetricsServer | None = None
    certificates: CertificateFiles | None = None
    trimmer: allocator.Trimmer | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def stop(self, grace_s: float | None = SHUTDOWN_GRACE_S, drain_s: float = 0.0) -> bool:
        """Stop within ``grace_s``, always: report NOT_SERVING first (balancers drain) and refuse new
        heavy calls; keep the port open ``drain_s`` so health checks see NOT_SERVING; let calls in
        flight finish until the grace is nearly spent; then cancel what is left (their searches
        stop) and close. ``grace_s`` None: at once. Whether every call finished by itself."""
        if self._stopped.is_set():  # stopped already (a test's cleanup after the test's own stop)
            return self.admission.in_flight() == 0
        began = time.monotonic()
        grace = 0.0 if grace_s is None else max(0.0, grace_s)
        self.health.enter_graceful_shutdown()
        self.metrics.serving.set(0)
        self.admission.close()
        drain = min(drain_s, grace / 2)
        if drain > 0:
            time.sleep(drain)
        left = max(0.0, grace - (time.monotonic() - began) - STOP_MARGIN_S)
        finished = self.admission.wait_idle(left)
        if not finished:
            cancelled = self.admission.cancel_all(SERVER_STOPPING)
            _log.warning("stop_cancelled_calls", calls=cancelled)
        margin = max(0.0, grace - (time.monotonic() - began))
        self.server.stop(min(margin, STOP_MARGIN_S)).wait(timeout=max(margin, 0.1))
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.trimmer is not None:
            self.trimmer.stop()
        self._stopped.set()
        return finished


def serve(
    host: str = "127.0.0.1",
    port: int = 50051,
    *,
    limits: ServiceLimits | None = None,
    solve_fn: SolveFn | None = None,
    tls: TlsFiles | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> RunningServer:
    """Start serving Placement, WhatIf, health and reflection on ``host:port`` (0 = any free port).

    Returns at once with the server running; ``RunningServer.port`` is the port actually bound.
    ``limits`` are the admission caps (:class:`ServiceLimits`); ``tls`` serves TLS (mTLS with a
    client CA) from files re-read on change; ``metrics_port`` serves Prometheus ``/metrics``.
    """
    limits = limits or ServiceLimits()
    problems = limits.problems() + (tls.problems() if tls else [])
    if problems:
        raise ValueError("; ".join(problems))
    # Process-wide: one budget for the wire cache and the per-node memos, shared by every server
    # (and solve) of the process.
    set_node_memory_budget(limits.node_cache_bytes)
    allocator.tune()  # what the caches evict goes back to the system (solver.service.allocator)
    metrics = ServiceMetrics()
    admission = Admission(limits, metrics)
    options = (
        ("grpc.max_receive_message_length", limits.max_message_bytes),
        ("grpc.max_send_message_length", limits.max_message_bytes),
        # Without SO_REUSEPORT off, a second server on a busy port binds too and silently shares its calls.
        ("grpc.so_reuseport", 0),
    )
    pool = limits.pool_size()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=pool, thread_name_prefix="topoplace-rpc"),
        interceptors=(admission,),
        options=options,
        # A backstop far above what the gates let through: beyond it gRPC itself refuses
        # (RESOURCE_EXHAUSTED) rather than queue without bound. Not tighter: its refusals would hit
        # health checks too, which must not be shed while the gates already shed heavy calls.
        maximum_concurrent_rpcs=2 * pool,
    )
    placement_pb2_grpc.add_PlacementServicer_to_server(PlacementServicer(solve_fn, limits, metrics), server)
    whatif_name = _add_whatif(server)
    health_servicer = _add_health(server, (SERVICE_NAME, whatif_name))
    reflection.enable_server_reflection(
        (SERVICE_NAME, whatif_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    certificates = None
    address = f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            credentials, certificates = server_credentials(tls)
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # grpc reports a failed bind as RuntimeError (older versions: 0)
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    if certificates is not None:
        certs = certificates
        metrics.count_tls_reloads(lambda: certs.reloads, lambda: certs.failures)
    server.start()
    metrics.serving.set(1)
    metrics_server = None
    if metrics_port is not None:
        try:
            metrics_server = start_metrics_server(metrics, metrics_host, metrics_port)
        except OSError as exc:
            server.stop(None)
            raise OSError(f"cannot serve metrics on {metrics_host}:{metrics_port}: {exc.strerror}") from None
    return RunningServer(
        server=server,
        port=bound,
        health=health_servicer,
        admission=admission,
        metrics=metrics,
        metrics_server=metrics_server,
        certificates=certificates,
        trimmer=allocator.Trimmer().start(),
    )


def _add_whatif(server: grpc.Server) -> str:
    """``topoplace.v1.WhatIf`` (offline what-if queries, ``solver/whatif``), imported here only: the
    solver core never imports the what-if package, the service merely hosts it."""
    from solver.whatif.service import add_to_server

    return add_to_server(server)


def _add_health(server: grpc.Server, services: tuple[str, ...]) -> health.HealthServicer:
    servicer = health.HealthServicer()
    for name in ("", *services):
        servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer


def run_forever(
    host: str = "127.0.0.1",
    port: int = 50051,
    *,
    limits: ServiceLimits | None = None,
    tls: TlsFiles | None = None,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> None:
    """Serve until SIGTERM or SIGINT, then stop within the grace period (see
    :meth:`RunningServer.stop`). Must run in the main thread (signals)."""
    configure_logging()
    limits = limits or ServiceLimits()
    running = serve(host, port, limits=limits, tls=tls, metrics_port=metrics_port, metrics_host=metrics_host)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    _log.info(
        "serving",
        host=host,
        port=running.port,
        tls=tls is not None,
        mtls=tls is not None and tls.client_ca is not None,
        metrics_port=running.metrics_server.port if running.metrics_server else None,
        max_concurrent_solves=limits.max_concurrent_solves,
        max_queued=limits.max_queued,
        threads=limits.pool_size(),
    )
    try:
        while not stop.wait(timeout=1.0):  # a timed wait lets the main thread run signal handlers
            pass
    finally:
        _log.info("stopping", signal=received[0] if received else None, grace_s=limits.grace_s)
        finished = running.stop(limits.grace_s, drain_s=limits.drain_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _log.info("stopped", calls_unfinished=running.admission.in_flight())
    if not finished or running.admission.in_flight():
        # A handler still inside a stage that does not look at its cancel token (Python code
        # between checks) would hold the interpreter's exit (it joins the gRPC worker threads):
        # the grace period is a promise, so leave without waiting for it.
        sys.stderr.flush()
        os._exit(0)
