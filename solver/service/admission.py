"""Admission control: which call may work now, which waits (boundedly), which is refused at once.

gRPC's sync server runs every call on one thread pool, in arrival order, with an unbounded queue in
front of it: four big solves once held all four threads while health checks and every small call
timed out behind them (issue 23). Here:

- Heavy methods (``Placement/Solve``, ``WhatIf/Run``) pass a :class:`Gate` per method and lane: a
  fixed number of slots (calls working at once) and a bounded queue (calls waiting for a slot).
  A full queue is ``RESOURCE_EXHAUSTED`` at once; a call whose deadline passes or whose caller
  cancels while it waits leaves the queue without doing any work.
- A Solve is *small* when its inventory and batch are (``ServiceLimits.small_nodes`` and
  ``small_jobs``); small solves have their own lane, so they never wait behind big ones.
- Light methods (health, reflection) pass no gate. The thread pool is sized to every gate's slots
  plus queue plus ``light_workers``, so a light call always finds a thread.
- The deadline is read on arrival (before the request is converted), and each admitted call gets a
  :class:`~solver.cancel.Cancel` token tripped by gRPC when the call ends early (cancelled by the
  caller, past its deadline, or the server stopping), which stops the solve's search at once.

The interceptor hands the servicer what it learned through :data:`CURRENT_CALL` (same thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog

from solver.domain.cancel import Cancel, cancelling
from solver.domain.nodefold import DEFAULT_NODE_MEMORY_BYTES
from solver.service.channel import MAX_MESSAGE_BYTES
from solver.service.metrics import ServiceMetrics

SOLVE_METHOD = "/topoplace.v1.Placement/Solve"
WHATIF_METHOD = "/topoplace.v1.WhatIf/Run"
SMALL, LARGE = "small", "large"
# What the caller's deadline is worth less on this side. gRPC sends a deadline as a timeout relative
# to when the caller sent it, so the server's copy runs late by the request header's transit, and
# the caller's own deadline fires first: its cancel (RST_STREAM, the same on the wire as a cancel by
# hand) can reach the server before the server's copy has passed, and the call was logged as
# CANCELLED by the caller (seen under load: test_an_expired_deadline_stops_the_work_...). The
# answer also needs its conversion and the reply: an answer finished 12 ms before the server's copy
# of a 1 s deadline reached the client 3 ms after its own (bench/deadlines.py, 1,024 x 200). So a
# call's deadline here is the caller's less this margin: the pipeline aims to answer before it, an
# answer after it is late, and a call that ends within it ended by its deadline (a cancel by hand
# in the last 50 ms before a deadline cannot be told apart from the deadline, and is counted so).
REPLY_MARGIN_S = 0.05
# The answer's conversion to the wire grows with its jobs (``wire.result_to_proto``): 20 ms idle for
# 500 jobs at 4,096 nodes, 30-65 ms at load 4, which the fixed margin alone could not pay for (two
# of four warm 5 s calls were 50-100 ms late, session 13). Kept back from the pipeline's time, at
# about 2.5x its idle cost, scaled by the process's pace (solver.compile.cost.PACE).
REPLY_S_PER_JOB = 1e-4


def reply_s(jobs: int, pace: float) -> float:
    """What the answer's conversion to the wire is kept, for ``jobs`` jobs at ``pace``."""
    return REPLY_S_PER_JOB * jobs * pace


# A deadline further away than a year is a call without one (gRPC reports "none" as ~2**63 ns).
NO_DEADLINE_ABOVE_S = 365 * 24 * 3600.0
# How often a queued call looks at its deadline and its caller while it waits.
QUEUE_POLL_S = 0.02
# Why a call's token was tripped (``Cancel.reason``), and the metric's word for each.
PAST_DEADLINE = "past the caller's deadline"
ENDED_EARLY = "the call ended (cancelled by the caller or the server stopping)"
SERVER_STOPPING = "the server is stopping"
CANCEL_KINDS = {PAST_DEADLINE: "deadline", ENDED_EARLY: "caller", SERVER_STOPPING: "stopping"}

_log = structlog.get_logger("topoplace.service")


@dataclass(frozen=True)
class ServiceLimits:
    """The caps ``topoplace serve`` takes. Defaults fit a small machine: two big solves at once,
    each with every core, would only share them."""

    max_message_bytes: int = MAX_MESSAGE_BYTES  # large clusters' inventories outgrow gRPC's 4 MiB
    max_nodes: int = 20_000  # per Solve request (inventory.nodes)
    max_jobs: int = 5_000  # per Solve request (jobs)
    max_concurrent_solves: int = 2  # large-lane Solve calls working at once
    max_queued: int = 8  # calls waiting per method and lane; beyond: RESOURCE_EXHAUSTED
    small_nodes: int = 64  # a Solve with at most this many nodes ...
    small_jobs: int = 16  # ... and this many jobs is small: its own lane
    small_concurrent: int = 2
    small_queued: int = 32
    search_workers: int = 0  # cap on CP-SAT workers per solve (0 = the policy's own choice)
    light_workers: int = 4  # threads kept for health, reflection and other light calls
    node_cache_bytes: int = DEFAULT_NODE_MEMORY_BYTES  # per-node caches of the process, by size
    grace_s: float = 10.0  # SIGTERM → stopped, always within this
    drain_s: float = 1.0  # of the grace: NOT_SERVING reported while the port stays open

    def problems(self) -> list[str]:
        """What is wrong with these limits, as ``--flag: reason`` lines (empty when fine)."""
        out = []
        for name in (
            "max_message_bytes",
            "max_nodes",
            "max_jobs",
            "max_concurrent_solves",
            "small_concurrent",
            "node_cache_bytes",
        ):
            if getattr(self, name) < 1:
                out.append(f"--{name.replace('_', '-')}: must be at least 1")
        for name in (
            "max_queued",
            "small_queued",
            "search_workers",
            "light_workers",
            "small_nodes",
            "small_jobs",
        ):
            if getattr(self, name) < 0:
                out.append(f"--{name.replace('_', '-')}: must not be negative")
        if self.light_workers < 1:
            out.append("--light-workers: at least 1, or health checks could wait behind solves")
        if not 0 < self.grace_s <= 3600:
            out.append("--grace-s: must be in (0, 3600]")
        if not 0 <= self.drain_s < self.grace_s:
            out.append("--drain-s: must be at least 0 and below --grace-s")
        return out

    def pool_size(self) -> int:
        """Threads for the gRPC server: every heavy call admitted or queued, and the light reserve."""
        solve = self.max_concurrent_solves + self.max_queued + self.small_concurrent + self.small_queued
        whatif = self.max_concurrent_solves + self.max_queued
        return solve + whatif + self.light_workers


@dataclass(eq=False)  # compared and hashed by identity: the set of calls in flight
class Call:
    """One admitted heavy call, as the servicer sees it."""

    method: str
    lane: str
    arrived: float  # time.monotonic() when the call reached the handler
    deadline: float | None  # time.monotonic() the caller stops waiting; None without a deadline
    cancel: Cancel = field(default_factory=Cancel)
    queued_s: float = 0.0
    converted_s: float = 0.0  # the request's conversion from the wire, before the pipeline's stages

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def late_s(self) -> float:
        """How far past its deadline the call is now (0 when in time or without one)."""
        return 0.0 if self.deadline is None else max(0.0, time.monotonic() - self.deadline)


CURRENT_CALL: ContextVar[Call | None] = ContextVar("topoplace_call", default=None)


def deadline_of(context: grpc.ServicerContext, now: float) -> float | None:
    """When the answer must leave for its caller to have it in time: the caller's deadline, less
    :data:`REPLY_MARGIN_S`. None for a call without a deadline."""
    remaining = context.time_remaining()
    if remaining is None or remaining > NO_DEADLINE_ABOVE_S:
        return None
    return now + max(0.0, remaining - REPLY_MARGIN_S)


def stop_when_ended(context: grpc.ServicerContext, cancel: Cancel, why: Callable[[], str]) -> None:
    """Trip ``cancel`` when the call ends for any reason (after a normal answer the trip is
    harmless). gRPC calls back only a call still open when the callback is added: a caller that
    cancelled between its request's arrival and this line (a large request's deserialising, a
    loaded host) gets ``False`` here and no call back ever, and its work would run to its own time
    limit for nobody (a what-if run of 19 s, seen once in CI). So a call already over trips now."""
    if not context.add_callback(lambda: cancel.trip(why())):
        cancel.trip(why())


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        self.code, self.reason, self.message = code, reason, message
        super().__init__(message)


class Gate:
    """``slots`` calls at work, at most ``queue`` waiting; the rest refused at once."""

    def __init__(self, method: str, lane: str, slots: int, queue: int, metrics: ServiceMetrics) -> None:
        self.method, self.lane, self.slots, self.queue = method, lane, slots, queue
        self._cond = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.closed = False
        self._depth = metrics.queue_depth.labels(method=_short(method), lane=lane)
        self._busy = metrics.in_flight.labels(method=_short(method), lane=lane)

    @contextmanager
    def slot(self, call: Call) -> Iterator[None]:
        self._enter(call)
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._busy.set(self.running)
                self._cond.notify()

    def _enter(self, call: Call) -> None:
        with self._cond:
            if self.closed:
                raise Refused(grpc.StatusCode.UNAVAILABLE, "shutting_down", "the server is shutting down")
            if self.running < self.slots and not self.waiting:
                self._take()
                return
            if self.waiting >= self.queue:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "queue_full",
                    f"{_short(self.method)} ({self.lane}): {self.running} working and {self.waiting} "
                    "waiting, the most this server queues; retry later",
                )
            self.waiting += 1
            self._depth.set(self.waiting)
            try:
                while self.running >= self.slots and not self.closed:
                    if call.cancel.tripped:
                        raise Refused(
                            grpc.StatusCode.CANCELLED, "cancelled_in_queue", "cancelled while queued"
                        )
                    remaining = call.remaining_s()
                    if remaining == 0.0:
                        raise Refused(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            "expired_in_queue",
                            "the deadline passed while the call waited for a slot",
                        )
                    self._cond.wait(QUEUE_POLL_S if remaining is None else min(QUEUE_POLL_S, remaining))
                if self.closed:
                    raise Refused(grpc.StatusCode.UNAVAILABLE, "shutting_down", "the server is shutting down")
                self._take()
            finally:
                self.waiting -= 1
                self._depth.set(self.waiting)

    def _take(self) -> None:
        self.running += 1
        self._busy.set(self.running)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _short(method: str) -> str:
    return method.rsplit(".", 1)[-1]  # "/topoplace.v1.Placement/Solve" -> "Placement/Solve"


Sizer = Callable[[Any], tuple[int, int]]


def solve_size(request: Any) -> tuple[int, int]:
    return len(request.inventory.nodes), len(request.jobs)


class Admission(grpc.ServerInterceptor):
    """The gates of every heavy method, the calls in flight, and the switch that closes them all."""

    def __init__(self, limits: ServiceLimits, metrics: ServiceMetrics) -> None:
        self.limits = limits
        self.metrics = metrics
        self.gates = {
            (SOLVE_METHOD, SMALL): Gate(
                SOLVE_METHOD, SMALL, limits.small_concurrent, limits.small_queued, metrics
            ),
            (SOLVE_METHOD, LARGE): Gate(
                SOLVE_METHOD, LARGE, limits.max_concurrent_solves, limits.max_queued, metrics
            ),
            (WHATIF_METHOD, LARGE): Gate(
                WHATIF_METHOD, LARGE, limits.max_concurrent_solves, limits.max_queued, metrics
            ),
        }
        self._lock = threading.Lock()
        self._live: set[Call] = set()
        self._idle = threading.Condition(self._lock)

    # ------------------------------------------------------------------ grpc.ServerInterceptor

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or handler.unary_unary is None or method not in (SOLVE_METHOD, WHATIF_METHOD):
            return handler  # light, or streaming: no gate
        inner = handler.unary_unary

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            return self._admit(method, inner, request, context)

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    # ------------------------------------------------------------------ one call

    def _admit(
        self,
        method: str,
        inner: Callable[[Any, grpc.ServicerContext], Any],
        request: Any,
        context: grpc.ServicerContext,
    ) -> Any:
        arrived = time.monotonic()
        call = Call(method=method, lane=LARGE, arrived=arrived, deadline=deadline_of(context, arrived))
        try:
            if method == SOLVE_METHOD:
                call.lane = self._solve_lane(request)
            gate = self.gates[method, call.lane]
            stop_when_ended(context, call.cancel, lambda: _why_ended(call))
            with self._tracked(call), gate.slot(call):
                call.queued_s = time.monotonic() - arrived
                self.metrics.stage_seconds.labels(stage="queue").observe(call.queued_s)
                token = CURRENT_CALL.set(call)
                failed = False
                try:
                    # Any solve the handler runs in this thread (WhatIf runs many) stops with the call.
                    with cancelling(call.cancel):
                        return inner(request, context)
                except Exception:
                    failed = True  # context.abort raises; the code it set is the call's
                    raise
                finally:
                    CURRENT_CALL.reset(token)
                    self._count_end(call, context, failed)
        except Refused as refused:
            self.metrics.shed.labels(method=_short(method), reason=refused.reason).inc()
            self.metrics.calls.labels(method=_short(method), code=refused.code.name).inc()
            _log.info("shed", method=_short(method), lane=call.lane, reason=refused.reason)
            context.abort(refused.code, refused.message)

    def _count_end(self, call: Call, context: grpc.ServicerContext, failed: bool) -> None:
        """Every admitted call's end, in the metrics, for every heavy method alike: its gRPC code
        (an answer after the deadline counts as DEADLINE_EXCEEDED, and as late: nobody received
        it), and whether its work was stopped by its token, and why."""
        method = _short(call.method)
        code = context.code() if failed else None  # type: ignore[attr-defined]  # grpc ≥ 1.38
        name = code.name if code is not None else ("UNKNOWN" if failed else "OK")
        if name == "OK" and call.late_s() > 0:
            name = "DEADLINE_EXCEEDED"
            self.metrics.late.labels(method=method).inc()
        self.metrics.calls.labels(method=method, code=name).inc()
        if failed and call.cancel.reason is not None:
            kind = CANCEL_KINDS.get(call.cancel.reason, "other")
            self.metrics.cancelled.labels(method=method, reason=kind).inc()

    def _solve_lane(self, request: Any) -> str:
        nodes, jobs = solve_size(request)
        limits = self.limits
        for what, count, cap, flag in (
            ("inventory.nodes", nodes, limits.max_nodes, "--max-nodes"),
            ("jobs", jobs, limits.max_jobs, "--max-jobs"),
        ):
            if count > cap:
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "too_large",
                    f"{what}: {count} in the request, above this server's cap of {cap} ({flag})",
                )
        return SMALL if nodes <= limits.small_nodes and jobs <= limits.small_jobs else LARGE

    @contextmanager
    def _tracked(self, call: Call) -> Iterator[None]:
        with self._lock:
            self._live.add(call)
        try:
            yield
        finally:
            with self._lock:
                self._live.discard(call)
                self._idle.notify_all()

    # ------------------------------------------------------------------ shutting down

    def close(self) -> None:
        """Refuse every new heavy call (UNAVAILABLE) and release the queued ones the same way."""
        for gate in self.gates.values():
            gate.close()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no heavy call is in flight, at most ``timeout_s``; whether none is."""
        end = time.monotonic() + timeout_s
        with self._lock:
            while self._live:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    def cancel_all(self, reason: str) -> int:
        """Trip every call in flight (their searches stop); how many there were."""
        with self._lock:
            live = list(self._live)
        for call in live:
            call.cancel.trip(reason)
        return len(live)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._live)


def _why_ended(call: Call) -> str:
    if call.deadline is not None and time.monotonic() >= call.deadline - 0.001:
        return PAST_DEADLINE
    return ENDED_EARLY
