"""The extender's verbs, independent of HTTP: request body (parsed JSON) in, reply body out.

``onSessionOpen`` turns the snapshot into one batch, solves it once within Volcano's HTTP timeout,
and keeps the plan until ``onSessionClose``; every other verb answers from the plan. When there is
no plan — no session open, no GPU work, the solver refused the batch or ran out of time — every
answer is neutral (admit, score 0, ready), so Volcano schedules as if topoplace were not there:
a broken optimiser must never stop a cluster.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from adapters.volcano import batch as batch_mod
from adapters.volcano import hypernodes as hn
from adapters.volcano import wire
from adapters.volcano.patcher import PatchError, PodPatcher
from adapters.volcano.plan import PLANNED_SCORE, Plan
from solver.answer.measures import cluster_metrics
from solver.answer.verify import verify
from solver.domain.errors import InvalidRequest, VerificationFailed
from solver.domain.model import (
    BatchOrder,
    JobResult,
    Node,
    Packing,
    Policy,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
)

SolveFn = Callable[[SolveRequest, float], SolveResult]
"""``solve(request, deadline_s)``: in process (``solver.solve.solve``) or over gRPC."""

_log = structlog.get_logger("topoplace.volcano")


@dataclass(frozen=True)
class Config:
    http_timeout_s: float = 1.0  # Volcano's extender.httpTimeout
    margin_s: float = 0.25  # kept back for parsing, the reply and the network
    planned_score: float = PLANNED_SCORE
    plan_pending: bool = True  # also plan PodGroups still in phase Pending (enqueued in this session)
    # Each prioritize call lists every node Volcano's predicates pass (vc-scheduler
    # --percentage-nodes-to-find=100): a planned node missing from it was refused by a rule not
    # modelled here, so the job is held this session and re-planned without that node.
    all_nodes_scored: bool = False
    packing: Packing = Packing.BINPACK
    batch_order: BatchOrder = BatchOrder.JOINT  # the session's PodGroups as one model, or one at a time
    order_shuffles: int = 3  # BEST_OF_ORDERS: seeded shuffles besides the fixed orders
    node_policy: str = ""
    gpu_policy: str = ""
    # Search limit of a solve too big for one session; 0 = the session's own budget. A plan that is
    # ready a session later beats a slightly better one ten seconds later: every session without a
    # plan is one Volcano schedules alone, and the snapshot has usually changed by then.
    background_limit_s: float = 0.0
    # Answer onSessionOpen 503 when the session has no plan (the first snapshot of a large cluster,
    # a solve still running, a batch refused): with extender.ignorable false Volcano's extender
    # plugin then registers no verb for the session, so it schedules alone without one predicate
    # or prioritize call per task for answers that would all be neutral anyway.
    decline_without_plan: bool = False


@dataclass
class SessionStatus:
    """What the last session did, for ``GET /status`` and the logs."""

    opened: float = 0.0
    nodes: int = 0
    jobs: int = 0
    tasks: int = 0
    placed_jobs: list[str] = field(default_factory=list)
    unplaced_jobs: dict[str, str] = field(default_factory=dict)
    solver_status: str = ""
    plan_source: str = ""  # the result's: search, floor:…, unsearched:…, carried:… (the last plan's)
    solved: bool = False
    reused: bool = False  # the result of an earlier session with the same inventory and jobs
    open_ms: float = 0.0
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    off_plan: list[str] = field(default_factory=list)  # allocations Volcano made elsewhere than planned
    refused: list[str] = field(default_factory=list)  # planned nodes Volcano's predicates refused
    patch_failures: list[str] = field(default_factory=list)  # annotations that could not be written
    verb_calls: dict[str, int] = field(default_factory=dict)  # calls answered this session, by verb
    verb_ms: dict[str, float] = field(default_factory=dict)  # their server time
    declined: bool = False  # onSessionOpen answered 503 (decline_without_plan): no verb registered


_KEPT = 50  # off-plan notes and patch failures kept per session for /status

# What the pipeline costs outside its search (validate, normalise, compile, the floor, decode,
# verify) before one of its solves has been measured, per node: 0.6 s warm and 0.87 s for nodes the
# solver has never seen (its per-node memos empty) at 1,024 nodes x 100 jobs (2 cores, load 1,
# session 13). The core reads ``Policy.time_limit_s`` end to end, so a background solve is given
# this on top of its search: given a session's 0.75 s alone, a 1,024-node batch's compile was cut
# and the greedy answered with no time left, placing 0-3 of 100 jobs.
OVERHEAD_S, OVERHEAD_S_PER_NODE = 0.1, 6e-4
UNSEEN_S_PER_NODE = 3e-4
OVERHEAD_MARGIN = 1.25  # a loaded machine is slower than the measurement: a cut compile costs a session
# Converting a node never seen (batch.NodeCache) at the pace of the per-node figures above: 0.32 s
# for 1,024 nodes (load 1). A session that converts many nodes measures the machine's pace with it
# (a loaded machine is slower at both), and the estimates are scaled by that.
CONVERT_S_PER_NODE = 3e-4
PACE_FROM_NODES = 64  # converted nodes enough to read a pace from


CARRIED = "carried:"  # plan_source prefix of the last plan carried over to a changed snapshot


def reusable(result: SolveResult | None) -> bool:
    """A result later sessions of the same batch may be served: a verified plan that was searched
    for that batch. An unsearched one (no time was left to build the model: a greedy placer's
    answer, which may place nothing) is not: an unchanged cluster would be served it every session
    and never solved again (bench.volcano_cost at 1,024 nodes: 0 of 100 jobs placed for 60
    sessions); nor a carried one (:func:`carried`), which stands in while the batch is solved."""
    return (
        result is not None
        and result.status != SolveStatus.UNKNOWN
        and not result.plan_source.startswith(("unsearched:", CARRIED))
    )


def carried(request: SolveRequest, last: SolveRequest, plan: SolveResult) -> SolveResult | None:
    """``plan`` (the last searched plan, for the batch ``last``) carried over to ``request``, a
    changed snapshot, while ``request`` is solved in the background: each job of ``request`` that
    ``last`` asked for exactly so keeps its placement, every other job is left unplaced this
    session. The commonest change between two sessions is a job Volcano bound where it was planned:
    every other job's placement still holds, and a session without a plan is Volcano's alone.

    Handed out only if the core's verifier finds it valid on ``request``'s cluster (devices still
    free and healthy, capacity, locality); otherwise the jobs with a member on a node that changed
    are dropped as well and it is checked again; None when it still fails or places nothing."""
    asked = {j.id: j for j in last.jobs}
    planned = {r.job_id: r for r in plan.jobs}
    waiting = Reason(
        code=ReasonCode.TIME_LIMIT,
        message="new or changed since the last plan: it is being planned in the background",
        relaxation="the next session",
    )

    def keeping(keep: Callable[[JobResult], bool]) -> SolveResult | None:
        jobs = tuple(
            r
            if r is not None and asked.get(job.id) == job and keep(r)
            else JobResult(job_id=job.id, placed=False, reason=waiting)
            for job in request.jobs
            for r in (planned.get(job.id),)
        )
        if not any(r.placed for r in jobs):
            return None
        candidate = plan.model_copy(
            update={
                "request_id": request.request_id,
                "status": SolveStatus.FEASIBLE,  # proven for ``last``, not for this batch
                "jobs": jobs,
                "metrics": cluster_metrics(request, jobs),
                "plan_source": CARRIED + plan.plan_source.removeprefix(CARRIED),
                "timings": (),
            }
        )
        return None if verify(request, candidate) else candidate

    first = keeping(lambda r: True)
    if first is not None:
        return first
    before = {n.name: n for n in last.inventory.nodes}
    now = {n.name: n for n in request.inventory.nodes}
    # The same object: the node cache hands back the node of the last session when it is unchanged.
    return keeping(lambda r: all(before.get(m.node) is now.get(m.node) for m in r.members))


def local_solve(request: SolveRequest, deadline_s: float) -> SolveResult:
    """The pipeline in this process; OR-Tools is imported on first use."""
    from solver.solve import solve

    return solve(request, deadline_s=deadline_s)


# How often the solver process looks whether the extender that started it is still there.
PARENT_WATCH_S = 1.0


def _die_with_parent(parent: int) -> None:
    """In the solver process: exit once ``parent`` (the extender) is gone. Killed (SIGKILL, the
    OOM killer, the --standby front replacing a hung server), the extender cannot stop its
    solver process, which then waited forever on a queue it holds both ends of: each such
    restart left one behind, with OR-Tools loaded (~140 MB)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_WATCH_S)
        os._exit(0)

    threading.Thread(target=watch, name="topoplace-parent-watch", daemon=True).start()


def _load_solver() -> None:
    """Load OR-Tools and the pipeline in the solver process, and run one small solve there, so
    that the first session's solve pays for no import or first-call cost."""
    from solver.domain.model import Gpu, Inventory, Job, MemberShape, Role
    from solver.solve import solve

    node = Node(name="warm-up", gpus=tuple(Gpu(id=f"g{i}", index=i) for i in range(2)))
    job = Job(id="warm-up", roles=(Role(name="r", replicas=1, member=MemberShape(gpus=1)),))
    solve(SolveRequest(inventory=Inventory(nodes=(node,)), jobs=(job,)), deadline_s=5.0)


def _log_failed_open(future: Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _log.error("converting the snapshot failed", error=repr(future.exception()))


def _warm_measures(request: SolveRequest, result: SolveResult) -> None:
    """Fill this process's per-node memos of the measures and the verifier for ``request``'s nodes."""
    try:
        verify(request, result.model_copy(update={"metrics": cluster_metrics(request, result.jobs)}))
    except Exception:  # a warm-up only: a failure costs the carry its speed, never its check
        _log.exception("warming the measures failed")


class NodesUnknown(RuntimeError):
    """The solver process was sent a node token it does not hold (it restarted, or a request was
    cancelled before it ran): the extender sends every node with its next request."""


_HELD: dict[int, Node] = {}  # in the solver process: the last request's nodes, by the extender's token


def solve_shipped(
    solve: SolveFn, bare: SolveRequest, shipped: Sequence[tuple[int, Node | None]], deadline_s: float
) -> SolveResult:
    """In the solver process: ``bare`` with its nodes put back — those sent, and those held from
    the last request (the same objects as then, so per-node memos hit)."""
    global _HELD
    held, nodes = _HELD, []
    for token, node in shipped:
        node = node if node is not None else held.get(token)
        if node is None:
            _HELD = {}
            raise NodesUnknown(f"node token {token} is not held by the solver process")
        nodes.append(node)
    _HELD = {token: node for (token, _), node in zip(shipped, nodes, strict=True)}
    inventory = bare.inventory.model_copy(update={"nodes": tuple(nodes)})
    return solve(bare.model_copy(update={"inventory": inventory}), deadline_s)


def remote_solve(target: str) -> SolveFn:
    """The pipeline on a topoplace gRPC server at ``target``."""
    from solver.service.client import solve_remote

    def call(request: SolveRequest, deadline_s: float) -> SolveResult:
        return solve_remote(target, request, timeout_s=deadline_s)

    return call


class Extender:
    def __init__(
        self,
        *,
        solve: SolveFn,
        patcher: PodPatcher,
        hypernodes: Callable[[], Sequence[hn.HyperNode]] = tuple,
        config: Config = Config(),
        solver_process: bool = False,
    ) -> None:
        """``solver_process``: run ``solve`` (a picklable function, e.g. :func:`local_solve`) in a
        child process, so a long solve does not hold the GIL the HTTP threads need."""
        self._solve = solve
        self._patcher = patcher
        self._hypernodes = hypernodes
        self.config = config
        self._lock = threading.Lock()
        self._plan: Plan | None = None
        self._generation = 0  # bumped by every open and close: a late open installs nothing
        self.status = SessionStatus()
        self._executor: Executor = (
            ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_die_with_parent,
                initargs=(os.getpid(),),
            )
            if solver_process
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="topoplace-solve")
        )
        self._warming: Future[None] | None = None
        self._last_open: (
            tuple[str, Any, batch_mod.Batch, SolveResult | None, hn.HyperNodeTree, SessionStatus] | None
        ) = None
        if solver_process:
            self._warming = self._executor.submit(_load_solver)  # OR-Tools loads now, not in a session
        self._inflight: tuple[str, Future[SolveResult]] | None = None
        # The last searched result, by batch fingerprint, with the request it answers.
        self._cache: tuple[str, SolveResult, SolveRequest] | None = None
        self._overhead_s = 0.0  # the last solve's time outside the search (validate, compile, explain)
        self._measured = False  # _overhead_s is a searched solve's (not only a lower bound)
        self._pace = 1.0  # the machine's pace the last time many nodes were converted (1 = as measured)
        self._solves = 0
        self._nodes = batch_mod.NodeCache()  # the last session's inventory nodes, reused if unchanged
        self._refusals: dict[str, set[str]] = {}  # Volcano job → planned nodes Volcano's predicates refused
        self._fabric: tuple[Sequence[hn.HyperNode], Any, hn.HyperNodeTree] | None = None
        self._solver_process = solver_process
        self._shipped: dict[int, Node] = {}  # nodes the solver process holds, by token (their id here)
        self._predicates = wire.PredicateReader()
        self._prioritizes = wire.PrioritizeReader()
        # One open converts at a time (the node cache is shared); it may outlive its session.
        self._opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="topoplace-open")

    @property
    def plan(self) -> Plan | None:
        return self._plan

    def declined(self) -> str:
        """Why this session's onSessionOpen is answered 503 so that Volcano registers no verb
        (``decline_without_plan`` and no plan); empty to answer 200."""
        if not self.config.decline_without_plan or self._plan is not None:
            return ""
        with self._lock:
            self.status.declined = True
            why = self.status.error or "no plan"
        return f"topoplace has no plan for this session ({why}); Volcano schedules alone"

    # ------------------------------------------------------------------ session

    def reopen(self, digest: str) -> dict[str, Any] | None:
        """Open a session whose body is byte for byte the last one's (``digest`` of the raw body)
        with the last batch and result, skipping JSON parsing and conversion; None if it differs.
        Volcano sends the same bytes while nothing changes: Go writes map keys sorted."""
        started = time.perf_counter()
        last = self._last_open
        if last is None or last[0] != digest or last[1] is not self._hypernodes():
            return None
        _, _, work, result, fabric, status = last
        plan = Plan.of(work, result, fabric, self.config.planned_score)
        status = replace(
            status,
            opened=time.time(),
            reused=True,
            open_ms=(time.perf_counter() - started) * 1000,
            off_plan=[],  # this session's own, not the reused one's
            refused=[],
            patch_failures=[],
            verb_calls={},
            verb_ms={},
        )
        with self._lock:
            self._generation += 1
            self._plan = plan
            self.status = status
        return {}

    def on_session_open(self, body: Any, digest: str = "", received: float | None = None) -> dict[str, Any]:
        """Read the snapshot, then convert and solve it on the opener thread, waiting at most what
        the session allows: the answer always comes within Volcano's ``httpTimeout``. A snapshot
        that takes longer (the first of a large cluster: every node converted and sent to the
        solver process) is answered neutrally and its work goes on, so the next session finds its
        nodes converted and its solve under way. ``received``: when the body was in (``perf_counter``),
        so that parsing it counts against the session's time too."""
        started = time.perf_counter() if received is None else received
        snapshot = wire.snapshot(body)  # BadPayload → 400, before anything changes
        with self._lock:
            self._generation += 1
            generation = self._generation
        future = self._opener.submit(self._open, snapshot, digest, started, generation)
        future.add_done_callback(_log_failed_open)  # a late open's failure has no caller to tell
        wait = self.config.http_timeout_s - self.config.margin_s / 2 - (time.perf_counter() - started)
        try:
            future.result(timeout=max(0.0, wait))
        except FutureTimeout:
            with self._lock:
                if generation == self._generation:
                    self._generation += 1  # what finishes late installs no plan in this session
                    self._plan = None
                self.status = SessionStatus(
                    opened=time.time(),
                    nodes=len(snapshot.nodes),
                    jobs=len(snapshot.jobs),
                    open_ms=(time.perf_counter() - started) * 1000,
                    error="converting the snapshot took longer than the session allows; answering "
                    "neutrally, the work goes on for the next session",
                )
            _log.info("session opened neutrally: conversion outlasted the session", nodes=len(snapshot.nodes))
        return {}

    def _open(self, snapshot: wire.Snapshot, digest: str, started: float, generation: int) -> None:
        if generation != self._generation:
            return  # a newer open or a close came while this one waited its turn: nothing to do
        status = SessionStatus(opened=time.time(), nodes=len(snapshot.nodes), jobs=len(snapshot.jobs))
        hypernodes = self._hypernodes()
        fabric = self._fabric_for(hypernodes, snapshot)
        policy = self._policy(started)
        with self._lock:
            avoid = {job: frozenset(nodes) for job, nodes in self._refusals.items()}
        building = time.perf_counter()
        work = batch_mod.build(
            snapshot, fabric, policy, plan_pending=self.config.plan_pending, cache=self._nodes, avoid=avoid
        )
        if self._nodes.converted >= PACE_FROM_NODES:
            per_node = (time.perf_counter() - building) / self._nodes.converted
            self._pace = max(1.0, per_node / CONVERT_S_PER_NODE)
        with self._lock:  # a job no longer pending needs no memory of where it could not go
            for job in set(self._refusals) - set(work.jobs):
                del self._refusals[job]
        status.tasks = len(work.members)
        status.warnings = work.warnings
        result: SolveResult | None = None
        if work.has_work:
            result, status.error, status.reused = self._result_for(work.request, started)
        status.solved = result is not None
        if result is not None:
            status.solver_status = SolveStatus(result.status).name
            status.plan_source = result.plan_source
            if result.status == SolveStatus.UNKNOWN:
                status.error = "the solver found no placement in time; answering neutrally this session"
                result = None
            elif result.plan_source.startswith("unsearched:") and not all(j.placed for j in result.jobs):
                # A greedy's answer when the model could not be built in time: the jobs it left
                # out were never searched for, and a plan holds (jobReady) every job it leaves out.
                # Volcano alone would place them: the session is answered neutrally instead.
                placed = sum(j.placed for j in result.jobs)
                status.error = (
                    f"the solver ran out of time to build its model; its greedy plan places {placed} of "
                    f"{len(result.jobs)} jobs, so this session is answered neutrally"
                )
                result = None
        plan = (
            Plan.of(work, result, fabric, self.config.planned_score)
            if result is not None or not work.has_work
            else None
        )
        if plan is not None:
            for vjob in work.jobs:
                if plan.gang_placed(vjob):
                    status.placed_jobs.append(vjob)
                else:
                    status.unplaced_jobs[vjob] = plan.unplaced_reason(vjob)
        status.open_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            if generation == self._generation:  # no close or newer open came meanwhile
                self._plan = plan
            else:
                status.error = status.error or "finished after the session's answer; serves the next session"
            self.status = status
            # Reopened byte for byte, a session is served this one's plan without a solve: never
            # an unsearched one, or an unchanged cluster keeps it for good.
            if digest and plan is not None and (result is None or reusable(result)):
                self._last_open = (digest, hypernodes, work, result, fabric, status)
        _log.info(
            "session opened",
            nodes=status.nodes,
            jobs=status.jobs,
            gpu_tasks=status.tasks,
            placed=len(status.placed_jobs),
            unplaced=len(status.unplaced_jobs),
            solver=status.solver_status,
            source=status.plan_source or None,
            ms=round(status.open_ms, 1),
            error=status.error or None,
            warnings=len(status.warnings),
        )

    def _fabric_for(self, hypernodes: Sequence[hn.HyperNode], snapshot: wire.Snapshot) -> hn.HyperNodeTree:
        """The HyperNode tree over this session's nodes; the last session's while neither the
        HyperNodes nor any node's labels changed (resolving matches every member selector against
        every node: a fifth of a second at 1,000 nodes)."""
        labels = tuple((n.name, tuple(sorted(n.labels.items()))) for n in snapshot.nodes)
        last = self._fabric
        if last is not None and last[0] is hypernodes and last[1] == labels:
            return last[2]
        fabric = hn.resolve(hypernodes, {name: dict(pairs) for name, pairs in labels})
        self._fabric = (hypernodes, labels, fabric)
        return fabric

    def on_session_close(self, body: Any) -> dict[str, Any]:
        wire.as_object(body, "body")
        with self._lock:
            self._generation += 1
            self._plan = None
        return {}

    def ready(self, timeout_s: float) -> bool:
        """Wait until the solver process has loaded (True) or ``timeout_s`` passed. A warm-up that
        failed counts as loaded: there is nothing left to wait for (the solves will fail and be
        answered neutrally, with the reason in /status)."""
        try:
            if self._warming is not None:
                self._warming.result(timeout=timeout_s)
        except FutureTimeout:
            return False
        except Exception:
            _log.exception("the solver process failed to warm up")
            self._warming = None
        return True

    def wait_for_solver(self, timeout_s: float) -> bool:
        """Wait for the solve in flight (for benchmarks and tests); True if none is left running."""
        inflight = self._inflight
        if inflight is None:
            return True
        try:
            inflight[1].result(timeout=timeout_s)
        except FutureTimeout:
            return False
        except Exception:
            return True
        time.sleep(0.05)  # let the done-callback record the result
        return True

    def close(self) -> None:
        """Stop the solver thread (a solve in flight is abandoned)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._opener.shutdown(wait=False, cancel_futures=True)

    def _policy(self, started: float) -> Policy:
        budget = self._budget(started)
        return Policy(
            time_limit_s=budget,
            packing=self.config.packing,
            batch_order=self.config.batch_order,
            order_shuffles=self.config.order_shuffles,
            node_policy=self.config.node_policy,
            gpu_policy=self.config.gpu_policy,
            deterministic=True,
        )

    def _budget(self, started: float) -> float:
        left = self.config.http_timeout_s - self.config.margin_s - (time.perf_counter() - started)
        return max(0.05, left)

    def _result_for(self, request: SolveRequest, started: float) -> tuple[SolveResult | None, str, bool]:
        """(result, error, reused). Solves within this session's budget when the last solve says the
        pipeline fits in it; otherwise solves in the background with a longer search and answers
        neutrally until a session with the same inventory and jobs can reuse that result."""
        key = fingerprint(request, self._nodes)
        with self._lock:
            cached, inflight = self._cache, self._inflight
        if cached is not None and cached[0] == key:
            return cached[1], "", True
        budget = self._budget(started)
        if inflight is not None and not inflight[1].done():
            if inflight[0] != key:
                return self._carry(request, cached, "the previous batch is still being solved")
            future = inflight[1]
        else:
            # In the background when the pipeline's overhead (measured, or estimated for a batch
            # never solved) does not fit in what is left, or nothing is left (the conversion took
            # the session: a late open, or the first one).
            overhead = self._overhead_for(request.inventory.nodes)
            background = overhead > 0.8 * budget or budget <= 0.1
            session = max(0.05, self.config.http_timeout_s - self.config.margin_s)
            # Without any plan yet every session is Volcano's alone: the first plan's search is
            # half a session's (the floor's plan is most of it), a re-plan's a whole one.
            search = self.config.background_limit_s or (session if cached is not None else session / 2)
            # The core's time limit is end to end: the pipeline's overhead, then the search.
            limit = OVERHEAD_MARGIN * overhead + search if background else budget
            deadline = limit + 1.0 if background else budget
            policy = request.policy.model_copy(update={"time_limit_s": limit})
            # The last plan, where it still holds, is the new solve's start: a session's budget
            # leaves the floor few placers, and the plan moves fewer pods (solver.search.previous).
            previous = cached[1].jobs if cached is not None else ()
            asked = request.model_copy(update={"policy": policy, "previous": previous})
            future = self._submit(asked, deadline)
            future.add_done_callback(lambda f: self._solved(key, f, limit, asked))
            with self._lock:
                self._inflight = (key, future)
            if background:
                return self._carry(
                    request, cached, "the batch takes longer than a session allows; solving in the background"
                )
        try:
            return future.result(timeout=max(0.0, self._budget(started) + 0.05)), "", False
        except FutureTimeout:
            with self._lock:  # next time, solve such a batch in the background from the start
                self._overhead_s = max(self._overhead_s, budget)
            return self._carry(
                request, cached, "the solve did not finish within the session; its result serves the next one"
            )
        except InvalidRequest as err:
            problems = "; ".join(str(p) for p in err.problems[:5])
            more = f" (and {len(err.problems) - 5} more)" if len(err.problems) > 5 else ""
            return None, f"the solver refused the batch: {problems}{more}", False
        except VerificationFailed as err:
            _log.error("placement failed verification", error=str(err))
            return None, f"internal: {err}", False
        except Exception as err:  # remote errors, timeouts: answer neutrally, say why
            _log.exception("solve failed")
            return None, f"solve failed: {type(err).__name__}: {err}", False

    def _carry(
        self, request: SolveRequest, cached: tuple[str, SolveResult, SolveRequest] | None, why: str
    ) -> tuple[SolveResult | None, str, bool]:
        """While ``request`` is solved, the last searched plan where it still holds (:func:`carried`),
        or a neutral answer; ``why``: why this session has no plan of its own."""
        result = None if cached is None else carried(request, cached[2], cached[1])
        if result is None:
            return None, f"{why}; answering neutrally", False
        return result, f"{why}; the last plan serves its unchanged jobs", False

    def _overhead_for(self, nodes: Sequence[Node]) -> float:
        """What the pipeline will spend outside its search on ``nodes``: the last searched solve's
        overhead (or the per-node estimate before one, at the pace the conversion measured), plus
        the per-node cost of the nodes the solver has not seen (held by object identity:
        :meth:`_submit`)."""
        unseen = sum(1 for n in nodes if self._shipped.get(id(n)) is not n)
        known = self._overhead_s
        if not self._measured:
            known = max(known, (OVERHEAD_S + OVERHEAD_S_PER_NODE * len(nodes)) * self._pace)
        return known + UNSEEN_S_PER_NODE * unseen * self._pace

    def _submit(self, request: SolveRequest, deadline: float) -> Future[SolveResult]:
        """Start ``request``'s solve. To the solver process, nodes it already holds (the same
        ``Node`` objects as in the request it solved last) go as a token only: pickling a 1,000-node
        inventory both ways cost more than a second, and new objects there would miss the core's
        per-node memos, which key on the object."""
        nodes = request.inventory.nodes
        if not self._solver_process:
            self._shipped = {id(n): n for n in nodes}  # what the pipeline's per-node memos now hold
            return self._executor.submit(self._solve, request, deadline)
        shipped = tuple((id(n), None if self._shipped.get(id(n)) is n else n) for n in nodes)
        self._shipped = {id(n): n for n in nodes}  # kept alive here: their ids stay theirs
        bare = request.model_copy(update={"inventory": request.inventory.model_copy(update={"nodes": ()})})
        return self._executor.submit(solve_shipped, self._solve, bare, shipped, deadline)

    def _solved(self, key: str, future: Future[SolveResult], limit: float, request: SolveRequest) -> None:
        """Keep what a finished solve of ``request`` teaches: its overhead, and its result for
        reuse. ``limit``: the time limit it was given."""
        if future.cancelled():
            return
        if future.exception() is not None:
            if isinstance(future.exception(), NodesUnknown):
                self._shipped = {}  # the solver process lost its table: send every node next time
            return
        result = future.result()
        search = sum(t.ms for t in result.timings if t.stage == "solve") / 1000
        unsearched = result.plan_source.startswith("unsearched:")
        with self._lock:
            self._solves += 1
            if unsearched:
                # Its stages were cut short, so its timings tell nothing of the overhead but that
                # it is more than the time limit was: the next solve of it is given twice that.
                self._overhead_s = max(self._overhead_s, 2 * limit)
                self._measured = False
            else:
                self._overhead_s = max(0.0, sum(t.ms for t in result.timings) / 1000 - search)
                self._measured = True
            # Not kept for reuse unless searched (see reusable): the next session solves it anew,
            # in the background with a whole search when the overhead says so.
            if reusable(result):
                self._cache = (key, result, request)
            elif unsearched:
                _log.info("an unsearched plan is not reused", source=result.plan_source)
        if reusable(result) and self._solver_process:
            # The solver process measured and verified it; carrying it to a changed snapshot
            # (:func:`carried`) does both again here, where the per-node memos are empty: 0.15 s
            # and more at 1,024 nodes, in a session's open. Filled now, between sessions.
            threading.Thread(target=_warm_measures, args=(request, result), daemon=True).start()

    # ------------------------------------------------------------------ per-task verbs (never solve)

    def predicate(self, body: Any) -> dict[str, Any]:
        return self._predicate(
            wire.body_task(body), wire.body_node_name(body), wire.body_node_task_uids(body)
        )

    def predicate_raw(self, raw: bytes) -> dict[str, Any] | None:
        """``predicate`` on the raw body, parts parsed once per distinct text; None when the body
        is not in Go's form (the caller parses it in full)."""
        read = self._predicates.read(raw)
        return None if read is None else self._predicate(*read)

    def _predicate(self, task: wire.Task, node: str, on_node: frozenset[str]) -> dict[str, Any]:
        plan = self._plan
        if plan is None:
            return wire.predicate_reply()
        code, reason = plan.predicate(task, node, on_node)
        return wire.predicate_reply(code, reason)

    def count(self, verb: str, seconds: float) -> None:
        """One call of ``verb`` answered in ``seconds`` (server time), for /status: what Volcano's
        calls cost this session."""
        with self._lock:
            status = self.status
            status.verb_calls[verb] = status.verb_calls.get(verb, 0) + 1
            status.verb_ms[verb] = status.verb_ms.get(verb, 0.0) + seconds * 1000

    def prioritize(self, body: Any) -> dict[str, Any]:
        return self._prioritize(wire.body_task(body), wire.body_node_names(body))

    def prioritize_raw(self, raw: bytes) -> dict[str, Any] | None:
        """``prioritize`` on the raw body (the task parsed once, node names found by a scan); None
        when the body is not in Go's form (the caller parses it in full)."""
        read = self._prioritizes.read(raw)
        return None if read is None else self._prioritize(*read)

    def _prioritize(self, task: wire.Task, nodes: list[str]) -> dict[str, Any]:
        plan = self._plan
        if plan is None:
            return wire.prioritize_reply(dict.fromkeys(nodes, 0.0))
        if self.config.all_nodes_scored:
            refused = plan.refused_planned_node(task, nodes)
            if refused is not None:
                self._refused(plan, task, refused)
        return wire.prioritize_reply(plan.prioritize(task, nodes))

    def _refused(self, plan: Plan, task: wire.Task, node: str) -> None:
        """Volcano's predicates refused ``task`` its planned ``node`` (a rule the plan does not
        model: pod count, ports, volumes, a taint seen late): hold the job this session, so it is not
        split between the plan and Volcano's choices, and plan it without ``node`` from the next."""
        job = plan.batch.task_job.get(task.uid)
        if job is None:
            return
        with self._lock:
            plan.diverted.add(job)
            known = self._refusals.setdefault(job, set())
            if node in known:
                return
            known.add(node)
            self._last_open = None  # the next session is planned again, even with the same body
            if len(self.status.refused) < _KEPT:
                self.status.refused.append(f"{task.key}: Volcano's predicates refused planned node {node}")
        _log.warning(
            "planned node refused by Volcano's predicates: job held, re-planned without it",
            task=task.key,
            node=node,
            job=job,
        )

    def job_ready(self, body: Any) -> dict[str, Any]:
        job = wire.body_job(body)
        plan = self._plan
        with self._lock:
            ready = True if plan is None else plan.job_ready(job)
        return wire.job_ready_reply(ready)

    # allocateFunc/deallocateFunc always answer with an empty errorMessage: Volcano's extender plugin
    # turns any non-empty one into an error on the allocation event, which rolls the task back. What
    # Volcano chose stands; the plan's ledger follows it, and what could not be written is logged and
    # shown in /status (the device plugin then falls back to its own choice on that node).

    def allocate(self, body: Any) -> dict[str, Any]:
        task = wire.body_task(body)
        plan = self._plan
        if plan is None:
            return wire.event_reply()
        with self._lock:
            pod_notes, group_notes, off_plan = plan.allocate(task)
        failures = []
        if pod_notes:
            failures += self._patch(lambda: self._patcher.patch_pod(task.namespace, task.name, pod_notes))
        entry = plan.batch.jobs.get(plan.batch.task_job.get(task.uid, ""))
        if group_notes and entry is not None:
            failures += self._patch(
                lambda: self._patcher.patch_podgroup(entry.namespace, entry.name, group_notes)
            )
        self._record(off_plan, failures)
        if off_plan:
            _log.info("allocated off plan", task=task.key, node=task.node_name, note=off_plan)
        if failures:
            _log.warning("annotations not written", task=task.key, node=task.node_name, problems=failures)
        return wire.event_reply()

    def deallocate(self, body: Any) -> dict[str, Any]:
        task = wire.body_task(body)
        plan = self._plan
        if plan is None:
            return wire.event_reply()
        with self._lock:
            removal = plan.deallocate(task)
        failures = (
            self._patch(lambda: self._patcher.patch_pod(task.namespace, task.name, removal))
            if removal
            else []
        )
        self._record("", failures)
        if failures:
            _log.warning("annotations not removed", task=task.key, problems=failures)
        return wire.event_reply()

    def _record(self, off_plan: str, failures: list[str]) -> None:
        with self._lock:
            status = self.status
            if off_plan and len(status.off_plan) < _KEPT:
                status.off_plan.append(off_plan)
            status.patch_failures += failures[: max(0, _KEPT - len(status.patch_failures))]

    @staticmethod
    def _patch(call: Callable[[], None]) -> list[str]:
        try:
            call()
        except PatchError as err:
            return [str(err)]
        return []

    def status_view(self) -> dict[str, Any]:
        s = self.status
        return {
            "sessionOpen": self._plan is not None,
            "nodes": s.nodes,
            "jobs": s.jobs,
            "gpuTasks": s.tasks,
            "solved": s.solved,
            "solverStatus": s.solver_status,
            "planSource": s.plan_source,
            "reused": s.reused,
            "openMs": round(s.open_ms, 1),
            "placedJobs": s.placed_jobs,
            "unplacedJobs": s.unplaced_jobs,
            "error": s.error,
            "warnings": s.warnings[:50],
            "offPlan": s.off_plan,
            "refused": s.refused,
            "avoiding": {job: sorted(nodes) for job, nodes in self._refusals.items()},
            "patchFailures": s.patch_failures,
            "calls": dict(s.verb_calls),
            "callMs": {k: round(v, 1) for k, v in s.verb_ms.items()},
            "declined": s.declined,
            "pid": os.getpid(),  # the serving process (under --standby, not the standby's)
            "predicateFullReads": self._predicates.full_reads,  # since start: not in Go's form
            "prioritizeFullReads": self._prioritizes.full_reads,
        }


def fingerprint(request: SolveRequest, nodes: batch_mod.NodeCache | None = None) -> str:
    """What makes two sessions' batches the same: inventory and jobs (not the per-session policy).
    ``nodes``: the session's node cache, whose per-node digests spare serialising unchanged nodes."""
    digest = hashlib.blake2b(digest_size=16)
    inventory = request.inventory
    if nodes is None:
        digest.update(inventory.model_dump_json().encode())
    else:
        digest.update(inventory.model_copy(update={"nodes": ()}).model_dump_json().encode())
        for node_digest in nodes.digest(inventory.nodes):
            digest.update(node_digest.encode())
    for job in request.jobs:
        digest.update(job.model_dump_json().encode())
    return digest.hexdigest()
