"""The pipeline of one Solve, ring by ring: domain (validate) → reduce → compile → search → answer
(decode, explain, measure, verify).

Each stage is a function over immutable values and can be called alone (the folders of ``solver/``
are the rings); this module only chains them and keeps time. A batch placed one job at a time
(``BatchOrder.LARGEST_FIRST``, ``BEST_OF_ORDERS``) is a chain of such solves taken to their plans
(:func:`search_valid`); the kept plan is explained, measured and verified whole.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

from solver import fallback
from solver.answer.decode import decode, one_member, seated_gang
from solver.answer.explain import explain
from solver.answer.measures import cluster_metrics, fragmentation_change
from solver.answer.unpool import unpool
from solver.answer.verify import verify
from solver.baselines.exchange import FloorExchange
from solver.compile import Compiled, compile_model, cost, shelf
from solver.compile.objective import is_placed_work, priority_levels
from solver.domain import cancel as cancellation
from solver.domain.cancel import Cancel, Cancelled, OutOfBudget, bounded
from solver.domain.errors import InvalidRequest, Problem, VerificationFailed
from solver.domain.fabric import Fabric
from solver.domain.forked import Forked
from solver.domain.model import (
    BatchOrder,
    Job,
    JobResult,
    ModelSize,
    ObjectiveTier,
    Policy,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
    TierValue,
)
from solver.domain.validate import unfit_jobs, validate
from solver.fallback import COMPILE_LATE, NORMALISE_LATE
from solver.reduce.chain import problem_of, rewrite
from solver.reduce.normalise import Normalised
from solver.reduce.pools import Pools
from solver.search.alone import AloneProbe
from solver.search.closer import brought_closer, closer
from solver.search.floor import (
    MAX_SHUFFLES,
    NAMED_ORDERS,
    OUTSIDE_SHARE,
    Candidate,
    Floor,
    Portfolio,
    complete,
    repack,
)
from solver.search.gang import Gang, one_gang
from solver.search.gang import choose as choose_gang
from solver.search.gang import enumerable as gang_enumerable
from solver.search.neighbourhood import Neighbourhoods
from solver.search.previous import from_previous
from solver.search.rounds import ROUND_MAX_S, Rounds
from solver.search.sequence import (
    InOrder,
    StepPlan,
    arrival_steps,
    candidate_orders,
    solve_in_order,
    step_size,
)
from solver.search.single import Single, choose, enumerable, none_placed, one_pod
from solver.search.tiers import least_search_s, searched_whole, settle, solve_lexicographic

# Time kept back from the caller's deadline for the reply: a fixed part, and a share of the time
# for what drifts with the call's length (a search told to stop finishing its work, a stage slowed by
# the load after its budget was set). With the fixed part alone, warm calls whose model was built
# ended 2-12 ms past 5 s and 15 s gRPC deadlines at load 6-8 (bench/RESULTS.md, session 11), and
# with 1 % of the time, served 4,096-node calls whose stages after the search ran 0.1-0.2 s over
# their estimates at load 2-4 ended 50-100 ms past 5 s deadlines (session 13).
DEADLINE_MARGIN_S, DEADLINE_MARGIN_SHARE = 0.05, 0.03
# Explanations search relaxed copies of unplaced jobs (solver.search.alone): this share of the time
# limit, at least the minimum and at most the maximum, for all unplaced jobs of a request together,
# and never past the call's end-to-end deadline.
EXPLAIN_SHARE, EXPLAIN_MIN_S, EXPLAIN_MAX_S = 0.2, 0.25, 2.0
# What one pass of the floor (a greedy plan, completed and valued) costs per model variable: 7 us
# on an idle 2-core machine before the floor's indexes (8ad933b) took 40 % of its CPU time off
# (12.5 -> 7.4 us of CPU a variable measured side by side on a loaded machine, 4,096 nodes x 500
# jobs). What the repack of a plan costs is judged by it.
FLOOR_PASS_S_PER_VARIABLE = 4.5e-6
# What one shuffle of the portfolio costs per model variable on average: most shuffles are ranked
# below a plan in hand by their placement alone and never completed, and a member that may go
# anywhere finds its node in a queue (1.25 us of CPU a variable at 4,096 nodes x 500 jobs, load
# 1.6, session 11). It sizes the portfolio from the request alone, so that deterministic mode
# gives the same answer whatever the machine's load.
SHUFFLE_S_PER_VARIABLE = 1.5e-6
# The share of the time limit the floor's shuffles may cost: at scale the search seldom betters the
# floor's best plan (bench/RESULTS.md, issue 18), while one more tie order often starts more jobs.
# Those the floor's stage leaves are drawn on a spare core while the search runs, so the shuffles
# may cost more than the floor's own stage.
FLOOR_SHARE = 2 / 3
# The share of the time left after compile that the search keeps whatever the floor's passes cost.
SEARCH_SHARE = 1 / 2
# The model is built only when its search is predicted at least this multiple of the least time a
# search of it is started with (solver.search.tiers.least_search_s); otherwise the fallback's
# first-fit orders answer (solver.fallback). Measured on bench.quality's requests (session 21),
# predicted search / least and what answered better: 4,096 nodes x 500 jobs at 2 s 0.2 (the
# fallback: 315/314/310 jobs against the floor's 302/297/301), at 3 s 1.6 (even), at 5 s 4.2 (the
# model); 1,024 x 200 at 1 s 3.0 (the model, one job more on seed 2). Twice was tried: warm 5 s
# calls at 16,384 nodes (1.0-1.1) then reached the greedy's best order through the fallback (1289
# against the floor's 1257 top-priority GPUs on seed 1), but warm 0.5 s calls at 1,024 nodes, the
# Volcano extender's range, started 129 and 118 jobs against the floor's 132 and 119.
SEARCH_WORTH = 1.0
# What one repair of a floor plan costs per node (solver.baselines.exchange.FloorExchange: decode,
# the placer's indexes, the exchange, the plan read back): 0.45-0.6 s at 4,096 nodes x 500 jobs
# (session 23). A repair right after the named placers takes the place of the shuffles it costs;
# it goes there only when it costs at most this share of the time limit: at 4,096 nodes and 5 s the
# first plan repaired started 318 jobs where the best shuffle started 317, but at 16,384 nodes and
# 5 s (warm) it took the place of the shuffle that started 358 jobs, and found nothing (355).
REPAIR_S_PER_NODE, REPAIR_SHARE = 1.2e-4, 0.15
# From this many nodes the fallback's orders (solver.fallback.FloorOrders) are drawn before the class
# orders left while the search runs, else after them. Measured on bench.quality's requests (70 %
# busy, 500 jobs, seeds 1-3), not predicted: at 16,384 nodes and 15 s the class orders and the search
# started 342 jobs on seed 3 in some runs where the fallback's orders start 356 (a 5 s call, which
# never builds the model, answered 356); at 4,096 nodes and 5 s the class orders' shuffles reach the
# greedy's best order (318 / 318 / 310 jobs), and the fallback's orders drawn first took their time
# (316 / 317 / 310). At 8,192 nodes (session 33), first: 337-338 jobs on seed 3 against 320 after,
# one to six fewer on seeds 1 and 2 at 5 s, level at 15 s but one. Drawn first, they
# have three quarters of the search's time (solver.search.floor.OUTSIDE_SHARE), and the floor's
# stage before the search draws one named placer only: with half and four, seed 3 at 16,384 nodes
# still started 342 or 354 jobs in a 15 s call now and then (356 at 5 s), 356 with these (session 33).
OUTSIDE_FIRST_NODES = 8192
# Where the orders answer, the search's own core runs neighbourhood rounds (solver.search.rounds) on
# their plan instead of searching the whole model, which bettered nothing there (8,192 nodes x 500
# jobs, 15 s: the floor's plan answered, gap 1, on every seed): from the orders' plan brought closer,
# and again from any plan that ranks above theirs (an exchange of it, on the spare core). Below
# ROUNDS_BELOW_NODES only: at 16,384 nodes the orders need their time (cut to half, they placed less
# top-priority work: seed 3 1111 GPUs against 1207, session 35), and a round costs 1.7 s.
ROUNDS_BELOW_NODES = 16384
# ... and only when the search's time holds two rounds (solver.search.rounds' ROUND_MAX_S each).
ROUNDS_LEAST_S = 2 * ROUND_MAX_S
# There, the orders' share of the search's time: their work stalls early (seed 3: at their second
# order of eleven), and the time after goes to their plan brought closer, its exchange
# (solver.search.floor.Portfolio._exchange_best) and the rounds, which placed more jobs than the
# orders' last shuffles (session 36: seed 3 342-343 jobs against 336).
ROUNDS_OUTSIDE_SHARE = 0.5
# The orders forked ahead of the build (solver.fallback.orders_ahead) end this share of the time to
# the search's end before the portfolio stops waiting for them (orders_ahead_ends): served warm at
# 16,384 nodes, with their own share of the time alone, their plan came 0.19 s before that wait
# ended (session 37).
AHEAD_MARGIN_SHARE = 0.1
# The fallback's orders get a process of their own where it answers (orders_before_validating,
# unsearched_with_orders) only when one order is predicted to cost at least this: at 4,096 nodes x 500
# jobs about 0.37 s, at 1,024 x 200 0.06 s (where the fork and the plan's way back would be a fifth
# of an order).
AHEAD_LEAST_ORDER_S = 0.1
# With a spare core the floor's own stage stops sooner, the rest of its placers drawn beside the
# search: at 1,024 nodes x 200 jobs, 5 s, a floor stage of half the window left the search too little
# to prove any priority level (session 11).
SPARE_FLOOR_SHARE = 1 / 4


class Stopwatch:
    """Stage timings in milliseconds, in the order the stages ran."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: list[StageTiming] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        stopped: Cancelled | None = None
        try:
            yield
        except Cancelled as exc:
            stopped = exc
            raise
        finally:
            self.stages.append(StageTiming(stage=name, ms=(time.perf_counter() - t0) * 1000))
            if stopped is not None:
                # The outermost stopwatch writes last: a cancelled call's log says which of the
                # pipeline's stages it was stopped in, and what each before it took.
                stopped.stages_ms = {t.stage: round(t.ms, 1) for t in self.stages}

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# While solves run, a full garbage collection waits for this many collections of the middle
# generation instead of Python's 10 (see :func:`rare_full_collections`).
FULL_COLLECTION_EVERY = 1000
_solving = 0  # solves running now (nested steps, the service's workers)
_solving_lock = threading.Lock()
_thresholds = gc.get_threshold()  # as the first solve found them
_froze = False  # whether the first solve in froze the heap (and the last out unfreezes it)
# Whether solves freeze the heap they start with (rare_full_collections); false in a process that
# manages gc.freeze itself.
FREEZE_HEAP = True


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Full garbage collections made rare and short while solves run. A full pass walks every
    object on the heap — the request's nodes, the caches of earlier calls — and at 16,384 nodes one
    landing during a solve took 1.1 s of its 9 s; with the full collection's threshold raised,
    collections took 0.19 s in all (bench/RESULTS.md, session 10), but one still came now and then:
    1.1-1.2 s inside a warm 5 s call at 16,384 nodes, on the spare core's time for the floor's
    shuffles (session 23). So what is alive when the first solve starts is also frozen (``gc.freeze``:
    out of the collector's sight, a constant-time move) and unfrozen when the last one ends: a full
    collection during a solve walks only what solves made. Young objects are still collected as
    usual, and everything is collected as usual once no solve is running (the thresholds restored,
    the frozen objects back in the oldest generation). A process that freezes objects for itself
    sets :data:`FREEZE_HEAP` false (the test suite, before each module): an unfreeze here would
    hand its objects back too, and asking how many are frozen walks them all."""
    global _solving, _thresholds, _froze
    with _solving_lock:
        if not _solving:
            _thresholds = gc.get_threshold()
            gc.set_threshold(_thresholds[0], _thresholds[1], max(_thresholds[2], FULL_COLLECTION_EVERY))
            _froze = FREEZE_HEAP
            if _froze:
                gc.freeze()
        _solving += 1
    try:
        yield
    finally:
        with _solving_lock:
            _solving -= 1
            if not _solving:
                if _froze:
                    gc.unfreeze()
                gc.set_threshold(*_thresholds)


def solve(
    request: SolveRequest, *, deadline_s: float | None = None, cancel: Cancel | None = None
) -> SolveResult:
    """Place ``request.jobs`` on ``request.inventory``; verified, explained, timed.

    ``deadline_s`` is the time the caller still waits (e.g. a gRPC deadline): the search stops in
    time to answer before it, whatever the policy's time limit says.
    Raises ``InvalidRequest`` for bad input and ``VerificationFailed`` if the answer is wrong.
    A batch with ``BatchOrder.LARGEST_FIRST`` is placed one job at a time (``solver.search.sequence``).
    A job with a member no node of the inventory could hold even empty is well formed: it is left
    unplaced with that reason (``NO_NODE_FITS``) and the rest of the batch is placed.
    ``cancel`` is the caller's switch (``solver.domain.cancel``): tripped, the running CP-SAT search
    stops at once and the pipeline raises ``Cancelled`` at its next stage boundary.
    """
    with cancellation.cancelling(cancel), rare_full_collections():
        return _solve(request, deadline_s=deadline_s)


def _solve(request: SolveRequest, *, deadline_s: float | None = None) -> SolveResult:
    clock = Stopwatch()
    early = orders_before_validating(request, clock, deadline_s)
    try:
        unfit = validated(request, clock)
        if unfit:
            return solve_without_unfit(request, unfit, clock, deadline_s)
        return solve_valid(request, clock, deadline_s, early)
    finally:
        if early is not None:
            early.stop()


def validated(request: SolveRequest, clock: Stopwatch) -> dict[int, tuple[Problem, ...]]:
    """The jobs of ``request`` with a member no node could hold even empty (by index, with why);
    raises ``InvalidRequest`` when the request is not valid."""
    with clock.stage("validate"):
        problems = validate(request)
        unfit = {} if problems else unfit_jobs(request)
    if problems:
        raise InvalidRequest(problems)
    cancellation.check()
    return unfit


def solve_valid(
    request: SolveRequest,
    clock: Stopwatch,
    deadline_s: float | None = None,
    early: Forked[tuple[JobResult, ...]] | None = None,
) -> SolveResult:
    """:func:`solve` of a validated request in which every member fits some node. ``early``: the
    fallback's orders forked before it was validated (:func:`orders_before_validating`)."""
    if request.policy.batch_order == BatchOrder.LARGEST_FIRST and len(request.jobs) > 1:
        return solve_largest_first(request, clock, deadline_s=deadline_s)
    if request.policy.batch_order == BatchOrder.BEST_OF_ORDERS and len(request.jobs) > 1:
        return solve_best_of_orders(request, clock, deadline_s=deadline_s)
    if (one_pod(request) or one_gang(request)) and (single := solve_single(request, clock)) is not None:
        return single
    plan = search_valid(request, clock, deadline_s, early)
    if isinstance(plan, SolveResult):  # answered without a model (solver.fallback)
        return plan
    with clock.stage("explain"):
        jobs = plan.explained(plan.explain_until)
    with clock.stage("measures"):
        metrics = cluster_metrics(plan.request, jobs)  # every node's state after: 0.7 s at 16,384 nodes
    result = plan.result(jobs).model_copy(update={"metrics": metrics})
    with clock.stage("verify"):
        violations = verify(plan.request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


def solve_single(request: SolveRequest, clock: Stopwatch) -> SolveResult | None:
    """The answer to a one-pod or one-gang request an enumerator values exactly
    (``solver.search.single``, ``solver.search.gang``): measured and verified as any answer; None
    when it does not apply or no node takes it now (the model path then says why). An online
    replay asks one such request a pod, and the model path cost it ~20x its greedy twin (session
    18); the Slurm hook asks one a submit, a gang's 15-30 ms at 1,024 nodes (session 31)."""
    with clock.stage("enumerate"):
        found = enumerated(request)
    if found is None or found[1] is None:
        return None
    rewritten, single = found
    result = answer_single(rewritten, single)
    with clock.stage("measures"):
        result = result.model_copy(update={"metrics": cluster_metrics(rewritten, result.jobs)})
    with clock.stage("verify"):
        violations = verify(rewritten, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


@dataclass(frozen=True)
class Searched:
    """A joint solve's plan as the search left it, decoded: what the answer stage (explain, measure,
    verify) starts from. Its left-out jobs have no reason yet."""

    request: SolveRequest  # policy chains applied: the request the plan answers
    problem: Normalised
    compiled: Compiled
    pools: Pools
    jobs: tuple[JobResult, ...]  # decoded, of the pooled request
    timed_out: bool  # the search found nothing in its time
    status: SolveStatus
    values: tuple[TierValue, ...]
    plan_source: str
    size: ModelSize  # as built, before the search added to it
    explain_s: float  # the explanations' own search budget
    explain_until: float  # when they stop within the call's deadline (time.perf_counter())

    def placements(self) -> tuple[JobResult, ...]:
        """The plan per job of the request; left-out jobs without a reason."""
        return unpool(self.pools, self.request, self.jobs)

    def explained(self, until: float) -> tuple[JobResult, ...]:
        """The plan per job of the request, every left-out job with its reason; the explanations'
        searches stop by ``until`` (``time.perf_counter()``)."""
        # Relaxations are checked by searches of the relaxed job alone (on the pooled request the
        # explanation's job indexes refer to): a small budget of its own, within the call's deadline.
        explain_s = min(self.explain_s, max(0.0, until - time.perf_counter()))
        probe = AloneProbe(self.problem.request, explain_s, self.request.policy.deterministic)
        jobs = explain(self.problem, self.compiled, self.jobs, timed_out=self.timed_out, probe=probe)
        return unpool(self.pools, self.request, jobs)

    def result(self, jobs: tuple[JobResult, ...]) -> SolveResult:
        """The answer with ``jobs`` as its plan, neither measured nor verified."""
        return SolveResult(
            request_id=self.request.request_id,
            status=self.status,
            jobs=jobs,
            objectives=self.values,
            # The largest gap of any tier: FEASIBLE never reads "gap 0" while a tier is still open.
            gap=max((v.gap for v in self.values), default=0.0),
            model_size=self.size,
            plan_source=self.plan_source,
        )


def search_valid(
    request: SolveRequest,
    clock: Stopwatch,
    deadline_s: float | None = None,
    early: Forked[tuple[JobResult, ...]] | None = None,
) -> Searched | SolveResult:
    """A joint solve of a validated request (every member fits some node) up to its decoded plan;
    the whole answer when there was no time to build the model (``solver.fallback``), with the
    orders forked ``early`` where there are some."""
    limit = call_limit_s(request, deadline_s)
    deadline = call_deadline(request, clock, deadline_s)  # end to end
    # The answer without a model, with the orders forked early where there are some.
    without_model = partial(unsearched_with_orders, early=early)
    with clock.stage("normalise"):
        # Policy chains become tiers and member rules; from here on the rewritten request is the
        # request (the verifier checks against it too, so the chains' filters are checked as well).
        request = rewrite(request)
        # Normalising nodes never seen costs ~0.25 ms each: it stops in time for the greedy answer.
        until = fallback.normalise_until(len(request.inventory.nodes), len(request.jobs), deadline)
        try:
            with bounded(until, NORMALISE_LATE):
                problem: Normalised | None = problem_of(request)
        except OutOfBudget:
            problem = None
    if problem is None:
        return without_model(request, clock, deadline, NORMALISE_LATE)
    cancellation.check()
    estimate = cost.estimate(problem)
    # The model of the last request, when nothing that shapes it has changed (solver.compile.shelf):
    # a scheduler asking again about one cluster does not build it again.
    compiled = shelf.take(problem, request.policy)
    if compiled is not None and not estimate.fits_built(deadline - time.perf_counter()):
        # Even built, the model's first plan would answer late (a warm 2 s call at 16,384 nodes
        # was, by 2 ms): the greedy answers, and the model stays on the shelf for a longer call.
        shelf.put(problem, request.policy, compiled)
        left = max(0.0, deadline - time.perf_counter())
        why = (
            f"the model was built already, but its first plan was predicted to take {estimate.floor_s:.2f} s "
            f"and answering {estimate.answer_s:.2f} s, and {left:.2f} s were left"
        )
        return without_model(request, clock, deadline, why, model_size(problem, compiled))
    if compiled is None and not estimate.fits(deadline - time.perf_counter()):
        # Answer in time, unsearched (solver.fallback).
        return without_model(request, clock, deadline, estimate, model_size(problem, None))
    search_s = search_predicted_s(
        estimate, request.policy, limit, deadline, clock, built=compiled is not None
    )
    least = least_search_s(compiled) if compiled is not None else estimate.least_search_s
    if not estimate.small and search_s < SEARCH_WORTH * least:
        # The model would answer with one of its floor's placers, searched by nothing; the
        # greedy's orders, given that time instead, place as much work and more jobs.
        if compiled is not None:  # off the shelf: back on it, for a longer call
            shelf.put(problem, request.policy, compiled)
        why = estimate.why_unsearched(search_s, least)
        return without_model(request, clock, deadline, why, model_size(problem, compiled))
    if early is not None:  # forked for an answer without a model, until too late for this one
        early.stop()
    # Where the fallback's orders are drawn first, they start now, in a process of their own, while
    # the model is built (solver.fallback.orders_ahead).
    ahead = (
        fallback.orders_ahead(
            request,
            orders_ahead_ends(
                problem, estimate, request.policy, limit, deadline, clock, built=compiled is not None
            ),
        )
        if outside_first(problem) and spare_core(request.policy)
        else None
    )
    try:
        return search_model(request, problem, estimate, compiled, clock, deadline, limit, ahead)
    finally:
        if ahead is not None:
            ahead.stop()


def search_model(
    request: SolveRequest,
    problem: Normalised,
    estimate: cost.Estimate,
    compiled: Compiled | None,
    clock: Stopwatch,
    deadline: float,
    limit: float,
    ahead: Forked[tuple[JobResult, ...]] | None,
) -> Searched | SolveResult:
    """:func:`search_valid` once the model is to be built (unless ``compiled``, off the shelf):
    built, its floor drawn, searched, its plan decoded; the greedy's answer when the build runs
    late. ``ahead``: the fallback's orders already running beside it."""
    if compiled is None:
        compiled = build(problem, request, estimate, clock, deadline)
        if compiled is None:  # the orders ahead, when there are some, answer with it
            return unsearched_with_orders(
                request, clock, deadline, COMPILE_LATE, model_size(problem, None), early=ahead
            )
    size = model_size(problem, compiled)
    cancellation.check()

    # What decode, explain and verify need is kept back out of the caller's end-to-end budget.
    before_search = clock.elapsed()
    explain_s = explain_budget_s(request.policy)
    search_ends = deadline - kept_after_search_s(before_search, estimate, explain_s, limit)
    with clock.stage("floor"):
        floor = Floor(problem, compiled)  # its indexes serve the portfolio and the repack alike
        # How many placers run is sized from the request (``floor_passes``), so that equal requests
        # get equal floors; the clock stops them only when they would leave the search less than
        # its share (on a loaded machine a pass costs several times its idle cost, and the floor
        # alone once took 24 s of a 30 s limit). The ones left are drawn while the search runs.
        # Plans of the floor exchanged on nodes (solver.baselines.exchange) by the fallback's greedy.
        repair = FloorExchange(
            problem, compiled, floor, request, fallback.FIRST_FIT, partial(fallback.ranking, request)
        )
        limit_s = request.policy.time_limit_s
        passes, early = floor_passes(compiled, limit_s), repair_early(problem, limit_s)
        drawing_outside_first = outside_first(problem)
        spare = spare_core(request.policy)
        # Where the orders answer (outside first, ROUNDS_BELOW_NODES), rounds on their plans on the
        # search's core: its model's copy is taken here.
        rounds = (
            Rounds.of(problem, compiled, request.policy)
            if drawing_outside_first
            and len(problem.request.inventory.nodes) < ROUNDS_BELOW_NODES
            and spare
            and not searched_whole(compiled)
            and search_ends - time.perf_counter() >= ROUNDS_LEAST_S
            else None
        )
        # The fallback's own orders too, while the search runs: a call with the time to build the
        # model answers no worse than one without it.
        drawing = Portfolio(
            floor,
            passes,
            request.policy.seed,
            repair=repair,
            repair_early=early,
            outside=fallback.FloorOrders(problem, compiled, floor, request, ahead),
            outside_first=drawing_outside_first,
            # A model small enough to be searched whole is proven in milliseconds (the Slurm hook's
            # and the Volcano extender's calls): gangs brought closer there would only take a core.
            closer=partial(brought_closer, floor) if not searched_whole(compiled) else None,
            outside_share=ROUNDS_OUTSIDE_SHARE if rounds is not None else OUTSIDE_SHARE,
        )
        floor_part = floor_share(spare)
        # The named placers are the strongest: they run before the search while its time lasts
        # (at 1,024 nodes x 200 jobs and 1 s, a quarter of the window ran one of them: 126 jobs
        # placed where the second places 132).
        if drawing_outside_first:
            # The fallback's orders start more jobs than any class order at this size, and their
            # time decides how many (16,384 nodes, seed 3: 352-354 jobs in 3 s, 356 in 6 s, where a
            # class order starts 342): one named placer for the search's hint, the rest beside it.
            drawing.draw(time.perf_counter(), least=1, latest=search_ends)
        else:
            drawing.draw(
                time.perf_counter() + floor_part * (search_ends - time.perf_counter()),
                least=NAMED_ORDERS,
                latest=search_ends,
            )
        held = []
        if request.previous:
            ids = [job.id for job in request.jobs]
            previous = from_previous(problem, compiled, floor, request.previous, ids)
            held = [previous] if previous is not None else []
        # First among equals: a scheduler's plan stays as it was unless something is better.
        best = best_first([*held, *drawing.candidates()])
    cancellation.check()
    with clock.stage("solve"):
        budget = search_ends - time.perf_counter()
        outcomes = []
        moves = (
            partial(repack_in_time, problem, compiled, floor=floor, ends=search_ends),
            partial(closer_in_time, floor, ends=search_ends),
        )
        bettered: list[Candidate] = []
        with drawing.meanwhile(search_ends, spare_core=spare) as enough:
            if rounds is not None:
                found = rounds(None, search_ends, partial(rounds_next, drawing, set()))
                bettered = [found] if found is not None else []
            # A small model is searched whatever the clock says: it is proven in milliseconds.
            elif budget >= least_search_s(compiled) or searched_whole(compiled):
                outcomes = solve_lexicographic(
                    compiled,
                    request.policy,
                    budget,
                    hint=best.plan,
                    polish=lambda solution: complete(problem, compiled, solution),
                    locality_moves=moves,
                    neighbourhoods=partial(Neighbourhoods.of, problem, compiled),
                )
                if outcomes and all(o.value.optimal for o in outcomes):
                    enough()  # proven: no placer can better it, and none is waited for
        best = best_first([*held, *drawing.candidates(), *bettered])  # with the placers drawn meanwhile
        # The answer's true tier values and bounds: a walk of every tier's terms (379k variables
        # at 16,384 nodes), timed with the search it settles.
        solution, values, kept_floor = settle(compiled, outcomes, best.plan, best.values)
    shelf.put(problem, request.policy, compiled)  # the search is done with the model
    cancellation.check()
    status = SolveStatus.OPTIMAL if all(v.optimal for v in values) else SolveStatus.FEASIBLE

    with clock.stage("decode"):
        jobs = decode(problem, compiled, solution)
    return Searched(
        request=request,
        problem=problem,
        compiled=compiled,
        pools=Pools(problem.pooled_from),
        jobs=tuple(jobs),
        timed_out=not outcomes and rounds is None,
        status=status,
        values=tuple(values),
        plan_source=f"floor:{best.placer}" if kept_floor else "search",
        size=size,
        explain_s=explain_s,
        # What verify and the measures after the explanations need is kept back (solver.compile.cost).
        # The whole answer's estimate, not the part left (measures and verify are ~40 % of it): in a
        # served 4,096-node call they took 0.32 s, 2.5x their idle time, where 0.19 s was kept.
        explain_until=deadline - max(0.25 * before_search, estimate.answer_s),
    )


def call_limit_s(request: SolveRequest, deadline_s: float | None) -> float:
    """The call's time: the policy's limit, or the caller's deadline when sooner."""
    limit = request.policy.time_limit_s
    return limit if deadline_s is None else min(limit, deadline_s)


def call_deadline(request: SolveRequest, clock: Stopwatch, deadline_s: float | None) -> float:
    """When the answer must be ready (``time.perf_counter()``): the call's time from its start, less
    what is kept back for the reply (:data:`DEADLINE_MARGIN_S`, :data:`DEADLINE_MARGIN_SHARE`)."""
    limit = call_limit_s(request, deadline_s)
    return clock.started + limit * (1 - DEADLINE_MARGIN_SHARE) - DEADLINE_MARGIN_S


def ahead_worth(request: SolveRequest) -> bool:
    """Whether the fallback's orders are worth a process of their own for the answer without a model:
    one order costs at least :data:`AHEAD_LEAST_ORDER_S`."""
    nodes, jobs = len(request.inventory.nodes), len(request.jobs)
    return jobs > 1 and fallback.placing_s(nodes, jobs, 1) >= AHEAD_LEAST_ORDER_S


def orders_before_validating(
    request: SolveRequest, clock: Stopwatch, deadline_s: float | None
) -> Forked[tuple[JobResult, ...]] | None:
    """The fallback's orders forked before ``request`` is validated, where the answer will be
    theirs: normalising is predicted not to start after validating (``fallback.normalise_until``),
    so no model is built, and the orders run until the fallback's placer must stop
    (``fallback.ahead_ends``) while this process validates. A cold 1 s call at 4,096 nodes x 500
    jobs spends 0.29 s validating, and its orders then had time for one order and a half. None
    without a spare core, for a batch placed one job at a time or a request of one job (the
    enumerators answer those), where an order costs little (:func:`ahead_worth`), or where the
    model may be built."""
    if (
        not spare_core(request.policy)
        or request.policy.batch_order in (BatchOrder.LARGEST_FIRST, BatchOrder.BEST_OF_ORDERS)
        or not ahead_worth(request)
    ):
        return None
    deadline = call_deadline(request, clock, deadline_s)
    nodes = len(request.inventory.nodes)
    validating = cost.VALIDATE_S_PER_NODE * nodes * cost.PACE.ratio()
    if fallback.normalise_until(nodes, len(request.jobs), deadline) > time.perf_counter() + validating:
        return None
    return fallback.orders_ahead(request, fallback.ahead_ends(request, deadline), rewritten=False)


def unsearched_with_orders(
    request: SolveRequest,
    clock: Stopwatch,
    deadline: float,
    why: cost.Estimate | str,
    size: ModelSize | None = None,
    *,
    early: Forked[tuple[JobResult, ...]] | None = None,
    nodes_sent: int | None = None,
) -> SolveResult:
    """``fallback.unsearched`` with the fallback's queue orders in a process beside it: those forked
    ``early``, else forked now where a core is spare and an order is worth it (:func:`ahead_worth`;
    a 5 s call at 16,384 nodes x 500 jobs, cold, answers so after normalising for 2 s; served, one
    that could read only part of its nodes in time, ``nodes_sent``, ``solver.service.partial``)."""
    ahead = early
    if ahead is None and spare_core(request.policy) and ahead_worth(request):
        ahead = fallback.orders_ahead(request, fallback.ahead_ends(request, deadline))
    try:
        return fallback.unsearched(request, clock, deadline, why, size, nodes_sent, ahead=ahead)
    finally:
        if ahead is not None:
            ahead.stop()


def explain_budget_s(policy: Policy) -> float:
    """The explanations' own search budget: a share of the time limit, within its bounds."""
    return min(EXPLAIN_MAX_S, max(EXPLAIN_MIN_S, EXPLAIN_SHARE * policy.time_limit_s))


def kept_after_search_s(
    before_search_s: float, estimate: cost.Estimate, explain_s: float, limit_s: float
) -> float:
    """What the search's end keeps back from the deadline for decode, explain and verify: they grow
    with the problem as the stages before the search did, so half of that time, never less than
    their estimate (with the model off the shelf, the stages before the search are no measure of
    the problem: a reused 16,384-node model left 0.08 s for a 0.45 s answer, and the call ran 0.2 s
    past its limit), and a part of the explanations' own search budget."""
    return max(0.5 * before_search_s, estimate.answer_s) + min(explain_s, 0.1 * limit_s)


def floor_share(spare: bool) -> float:
    """The share of the window before the search's end that the floor's named placers may take."""
    return SPARE_FLOOR_SHARE if spare else 1 - SEARCH_SHARE


def search_predicted_s(
    estimate: cost.Estimate, policy: Policy, limit_s: float, deadline: float, clock: Stopwatch, *, built: bool
) -> float:
    """The search the model path would get, predicted before the model is built (or taken off the
    shelf, ``built``) as :func:`search_valid` shares the time: compile, then the floor's share of
    the window up to the search's end (at least its first pass), the rest to the search."""
    compile_s = 0.0 if built else estimate.build_s - estimate.floor_s
    search_ends = deadline - kept_after_search_s(
        clock.elapsed() + compile_s, estimate, explain_budget_s(policy), limit_s
    )
    window = search_ends - time.perf_counter() - compile_s
    return window - max(floor_share(spare_core(policy)) * window, estimate.floor_s)


def orders_ahead_ends(
    problem: Normalised,
    estimate: cost.Estimate,
    policy: Policy,
    limit_s: float,
    deadline: float,
    clock: Stopwatch,
    *,
    built: bool,
) -> float:
    """When the fallback's orders started ahead of the model's build stop: their share of the time
    from now to the search's end, as predicted before the build (compile and the floor's stage at
    their estimates, ``kept_after_search_s`` as the search's end will keep). The share is the one
    the portfolio gives them when they are drawn on its thread (:data:`ROUNDS_OUTSIDE_SHARE` where
    rounds follow them, else ``OUTSIDE_SHARE``): the time after goes to their plan brought closer,
    its exchanges and the rounds, which read it back once the model is built. Never later than
    :data:`AHEAD_MARGIN_SHARE` of that time before the portfolio stops waiting for them (its share
    of the search's time from the search's start): a stage that runs slower than its estimate
    brings the search's end forward, and an answer after that wait is lost whole."""
    build_s = estimate.floor_s if built else estimate.build_s
    now = time.perf_counter()
    searched_from = now + build_s
    search_ends = deadline - kept_after_search_s(
        clock.elapsed() + build_s, estimate, explain_budget_s(policy), limit_s
    )
    share = (
        ROUNDS_OUTSIDE_SHARE if len(problem.request.inventory.nodes) < ROUNDS_BELOW_NODES else OUTSIDE_SHARE
    )
    window = max(0.0, search_ends - now)
    waited_until = searched_from + share * max(0.0, search_ends - searched_from)
    return min(now + share * window, waited_until - AHEAD_MARGIN_SHARE * window)


def build(
    problem: Normalised, request: SolveRequest, estimate: cost.Estimate, clock: Stopwatch, deadline: float
) -> Compiled | None:
    """The model of ``problem``, or ``None`` when building it ran past the time the greedy answer
    needs (``solver.fallback``)."""
    with clock.stage("compile"):
        # Compile may run slower than the pace said when it was predicted (a 16,384-node compile
        # took 2.0-4.6 s at one pace): the call waits for it while the floor's first pass and the
        # answer still fit, and the greedy answers in the time left.
        compile_started = time.perf_counter()
        # Cut, it leaves the greedy what it needs to place and answer (fallback.needs_s): with only
        # the floor's pass and the answer kept, a 0.75 s solve at 1,024 nodes left the greedy 23 ms,
        # less than its indexes, and placed 0 of 100 jobs (the Volcano adapter, session 13).
        keep = max(
            estimate.answer_s + estimate.floor_s,
            fallback.needs_s(len(request.inventory.nodes), len(request.jobs), deadline - compile_started),
        )
        if estimate.small:  # built whatever the clock says (solver.compile.cost)
            compiled: Compiled | None = compile_model(problem, request.policy)
            cost.PACE.observe(estimate.compile_idle_s, time.perf_counter() - compile_started)
            return compiled
        # Built on a thread of its own: when it cannot end in time, the greedy answers and the build
        # goes on, to be on the shelf for the next request (solver.compile.shelf.Build); an equal
        # build already running behind is waited for instead of started again.
        running = shelf.behind(problem, request.policy)
        building = running or shelf.Build(problem, request.policy, compile_model)
        compiled = building.wait(deadline - keep)
        if compiled is not None and running is None:
            cost.PACE.observe(estimate.compile_idle_s, time.perf_counter() - compile_started)
    return compiled


def solve_without_unfit(
    request: SolveRequest,
    unfit: dict[int, tuple[Problem, ...]],
    clock: Stopwatch,
    deadline_s: float | None = None,
) -> SolveResult:
    """The batch's other jobs solved as a batch of their own; each unfit job unplaced, with every
    member ask no node could meet as its reason; the whole verified against the whole request."""
    rest = request.model_copy(update={"jobs": tuple(j for k, j in enumerate(request.jobs) if k not in unfit)})
    solved = solve_valid(rest, clock, deadline_s)
    found = {jr.job_id: jr for jr in solved.jobs}
    jobs = tuple(
        JobResult(job_id=job.id, placed=False, reason=unfit_reason(job, unfit[k]))
        if k in unfit
        else found[job.id]
        for k, job in enumerate(request.jobs)
    )
    objectives = with_batch_levels(request, rest, solved.objectives)
    result = solved.model_copy(
        update={"jobs": jobs, "metrics": cluster_metrics(request, jobs), "objectives": objectives}
    )
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


def with_batch_levels(
    request: SolveRequest, rest: SolveRequest, objectives: Sequence[TierValue]
) -> tuple[TierValue, ...]:
    """``rest``'s tiers with its placed-work tiers (:func:`priority_levels`) given as the whole
    batch's: a priority level whose every job is unfit has a tier of its own, 0 of a bound of 0 (none
    of its work can be placed); a level's tier keeps its value and bound under the batch's name."""
    mode = request.policy.priority_mode
    levels = priority_levels(request.jobs, mode)
    found = dict(
        zip(
            (lv for _, lv in priority_levels(rest.jobs, mode)),
            (v for v in objectives if is_placed_work(v.name)),
            strict=False,
        )
    )
    placed_work = [
        found[lv].model_copy(update={"name": name})
        if lv in found
        else TierValue(tier=ObjectiveTier.PLACED_WORK, name=name, value=0.0, bound=0.0, optimal=True)
        for name, lv in levels
    ]
    first = next((i for i, v in enumerate(objectives) if is_placed_work(v.name)), None)
    if first is None:
        return tuple(objectives)
    rest_tiers = [v for v in objectives if not is_placed_work(v.name)]
    return (*rest_tiers[:first], *placed_work, *rest_tiers[first:])


def unfit_reason(job: Job, problems: Sequence[Problem]) -> Reason:
    """NO_NODE_FITS, naming each role's member and what it asks beyond every node of the inventory."""
    by_role: dict[int, list[str]] = {}
    for problem in problems:
        by_role.setdefault(int(problem.path.partition(".roles[")[2].partition("]")[0]), []).append(
            problem.message
        )
    parts = [f"a member of role {job.roles[r].name} {'; '.join(asks)}" for r, asks in by_role.items()]
    return Reason(code=ReasonCode.NO_NODE_FITS, message="; ".join(parts))


def solve_largest_first(
    request: SolveRequest, clock: Stopwatch, *, deadline_s: float | None = None
) -> SolveResult:
    """The batch placed one step at a time, largest first (:func:`solve_in_order`)."""
    return one_job_at_a_time(
        request, clock, "steps", lambda r, budget: solve_in_order(r, solve_step, budget), deadline_s
    )


def solve_best_of_orders(
    request: SolveRequest, clock: Stopwatch, *, deadline_s: float | None = None
) -> SolveResult:
    """The batch placed one step at a time in each of several orders (the given one, then
    :func:`solver.search.sequence.candidate_orders`); the plan placing the most work, then leaving the least
    fragmentation, then the earliest order, is kept."""
    return one_job_at_a_time(request, clock, "orders", best_of_orders, deadline_s)


def one_job_at_a_time(
    request: SolveRequest,
    clock: Stopwatch,
    stage: str,
    place: Callable[[SolveRequest, float], InOrder],
    deadline_s: float | None,
) -> SolveResult:
    """The (validated) batch placed by ``place(request, budget_s)`` as chains of one-job solves
    taken to their plans, the kept plan's left-out jobs explained, and the plan measured and
    verified against the whole request: the one check of every rule, those between jobs of
    different steps (shares of one GPU, capacity, metrics) included."""
    request = rewrite(request)
    budget = (
        request.policy.time_limit_s if deadline_s is None else min(request.policy.time_limit_s, deadline_s)
    )
    with clock.stage(stage):
        kept = place(request, budget)
    with clock.stage("explain"):
        result = kept.explained(clock.started + budget)
    result = result.model_copy(update={"metrics": cluster_metrics(request, result.jobs)})
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": (*clock.stages, *result.timings)})


def solve_step(step: SolveRequest, seconds: float) -> StepPlan:
    """One step of a batch placed one job at a time: a joint solve within ``seconds``, taken to its
    plan. The answer stage is the batch's (:func:`one_job_at_a_time`): best-of-orders compares
    several orders' plans and keeps one, so a step's left-out jobs are explained only when asked
    (``StepPlan.explain``), and no step is measured or verified on its own — in a replay's window
    of 16 one-pod steps over five orders, explaining, measuring and verifying every step took a
    quarter of the window's time (notes of session 12).

    Nor is a step validated again: its request is the validated batch's, with a part of its jobs
    and, on its nodes, the allocations of the plans the steps before it made. What validation
    says of jobs and nodes holds for it as for the batch; unfit jobs (a member no node could hold
    even empty) went before the steps, and allocations do not change what a node holds empty; and
    the earlier steps' plans are checked, rule by rule, by the batch's verify."""
    clock = Stopwatch()
    with clock.stage("enumerate"):
        found = enumerated(step)
    if found is not None and found[1] is not None:
        rewritten, single = found
        return StepPlan(answer_single(rewritten, single).model_copy(update={"timings": tuple(clock.stages)}))
    if found is not None and one_pod(step):
        rewritten = found[0]
        # No node takes the pod now. Best-of-orders compares the orders' plans and explains the
        # kept one's left-out jobs only: the model path runs then, to say why, and not before (a
        # fifth of a replay seed's time was the model of pods no node took, in every order).
        unplaced = SolveResult(
            request_id=rewritten.request_id,
            status=SolveStatus.OPTIMAL,
            jobs=(JobResult(job_id=rewritten.jobs[0].id, placed=False),),
            objectives=none_placed(rewritten),
            gap=0.0,
            plan_source="single",
            timings=tuple(clock.stages),
        )
        return StepPlan(unplaced, partial(explain_step, step))
    searched = search_valid(step, clock, seconds)
    if isinstance(searched, SolveResult):  # answered without a model (solver.fallback)
        return StepPlan(searched)
    result = searched.result(searched.placements()).model_copy(update={"timings": tuple(clock.stages)})
    return StepPlan(result, searched.explained)


def enumerated(request: SolveRequest) -> tuple[SolveRequest, Single | Gang | None] | None:
    """For a one-pod or one-gang request an enumerator values exactly (``solver.search.single``,
    ``solver.search.gang``): the request rewritten (policy chains applied) and the enumerator's
    choice, None when it does not fit now; None for any other request. Only such a request is
    rewritten here: the others go to :func:`search_valid`, which rewrites them once."""
    if one_pod(request):
        rewritten = rewrite(request)
        return (rewritten, choose(rewritten)) if enumerable(rewritten) else None
    if one_gang(request):
        rewritten = rewrite(request)
        return (rewritten, choose_gang(rewritten)) if gang_enumerable(rewritten) else None
    return None


def explain_step(step: SolveRequest, until: float) -> tuple[JobResult, ...]:
    """``step``'s job results with every left-out job's reason, by the model path (its search and
    the explanations' stop by ``until``, a ``time.perf_counter()`` time)."""
    clock = Stopwatch()
    searched = search_valid(step, clock, max(0.01, until - time.perf_counter()))
    if isinstance(searched, SolveResult):  # answered without a model (solver.fallback): explained
        return searched.jobs
    return searched.explained(until)


def answer_single(request: SolveRequest, single: Single | Gang) -> SolveResult:
    """A one-pod or one-gang step's answer from the enumerator's choice, as a model answer carries
    it: the plan, its proven tier values, OPTIMAL."""
    job = request.jobs[0]
    if isinstance(single, Gang):
        placed = seated_gang(job, single.seats, Fabric.of(request.inventory))
        source = "gang"
    else:
        placed = one_member(job.id, job.roles[0], single.node, single.shape, single.concrete, single.slot)
        source = "single"
    return SolveResult(
        request_id=request.request_id,
        status=SolveStatus.OPTIMAL,
        jobs=(placed,),
        objectives=single.objectives,
        gap=0.0,
        model_size=ModelSize(node_classes=single.classes),
        plan_source=source,
    )


def best_of_orders(request: SolveRequest, budget_s: float) -> InOrder:
    """Each candidate order's plan in turn, each with an equal part of the time left; the best kept."""
    deadline = time.perf_counter() + budget_s
    groups = arrival_steps(request)
    sizes = [step_size(request, g) for g in groups]
    orders = [list(range(len(groups)))]
    best: tuple[tuple[tuple[float, ...], float, int], InOrder] | None = None
    k = 0
    while k < len(orders):
        # the given, largest first, left-out first and the shuffles
        expected = max(len(orders), 3 + request.policy.order_shuffles)
        left = max(0.01, deadline - time.perf_counter()) / (expected - k)
        why = "placed in the batch's order" if not k else "in the order that placed the most work"
        in_order = solve_in_order(request, solve_step, left, [groups[i] for i in orders[k]], why)
        result = in_order.result
        placed = tuple(v.value for v in result.objectives if is_placed_work(v.name))
        # The change to a millionth of a milli-GPU: ties in exact arithmetic stay ties (the replay's
        # greedy twin sums the same terms its own way).
        key = (placed, -round(fragmentation_change(request, result.jobs), 6), -k)
        if best is None or key > best[0]:
            best = (key, in_order)
        if not k:  # the other orders, now that the given order says which steps it left out
            unplaced = {jr.job_id for jr in result.jobs if not jr.placed}
            left_out = [i for i, g in enumerate(groups) if any(request.jobs[j].id in unplaced for j in g)]
            seed = f"{request.policy.seed}/{request.request_id}"
            orders += candidate_orders(sizes, left_out, seed, request.policy.order_shuffles)
        k += 1
    assert best is not None  # the given order is always tried
    return best[1]


def repack_in_time(
    problem: Normalised, compiled: Compiled, solution: dict[str, int], floor: Floor, ends: float
) -> dict[str, int] | None:
    """The search's repack of a plan (:func:`solver.search.floor.repack`, two greedy passes at
    most), skipped when the passes would run past ``ends``: on 2,048 nodes x 1,250 pods with a 1 s
    limit it once took the search stage to 6.5 s."""
    passes_s = 2 * FLOOR_PASS_S_PER_VARIABLE * len(compiled.model.proto.variables)
    if ends - time.perf_counter() < passes_s:
        return None
    return repack(problem, compiled, solution, floor)


def closer_in_time(floor: Floor, solution: dict[str, int], ends: float) -> dict[str, int] | None:
    """The search's plan with its gangs brought closer (:func:`solver.search.closer.closer`) until
    ``ends``, when its one pass of placing (:data:`FLOOR_PASS_S_PER_VARIABLE`) fits before then."""
    pass_s = FLOOR_PASS_S_PER_VARIABLE * len(floor.compiled.model.proto.variables)
    if ends - time.perf_counter() < pass_s:
        return None
    return closer(floor, solution, ends)


def rounds_next(drawing: Portfolio, offered: set[str]) -> Candidate | None:
    """What the rounds beside the orders are offered next (``solver.search.rounds.Newer``): once
    the orders' plan is brought closer, the portfolio's best plan (the closer's, then an exchange's)
    when not offered before."""
    if not drawing.outside_done:
        return None
    kept = drawing.candidates()
    if not kept or kept[0].placer in offered:
        return None
    offered.add(kept[0].placer)
    return kept[0]


def best_first(candidates: list[Candidate]) -> Candidate:
    """The best plan of the floor by its tier values; of equals, the first given."""
    return max(candidates, key=lambda c: c.values)  # max keeps the first of equals


def spare_core(policy: Policy) -> bool:
    """Whether a core is left beside the search's workers for the floor to keep drawing on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = (policy.workers or 1) if policy.deterministic else cores
    return cores > workers


def floor_passes(compiled: Compiled, time_limit_s: float) -> int:
    """How many shuffles the floor runs besides its named orders: as many as ``FLOOR_SHARE`` of the
    time limit pays for, sized from the model so that equal requests run equal portfolios."""
    per_pass = SHUFFLE_S_PER_VARIABLE * max(1, len(compiled.model.proto.variables))
    return max(0, min(MAX_SHUFFLES, int(FLOOR_SHARE * time_limit_s / per_pass) - NAMED_ORDERS))


def outside_first(problem: Normalised) -> bool:
    """Whether the fallback's orders go before the floor's class orders left while the search runs
    (``solver.search.floor.Portfolio``): on inventories of :data:`OUTSIDE_FIRST_NODES` nodes or more."""
    return len(problem.request.inventory.nodes) >= OUTSIDE_FIRST_NODES


def repair_early(problem: Normalised, time_limit_s: float) -> bool:
    """Whether the floor repairs a plan right after its named placers (else only once every order
    is drawn): when a repair is predicted to cost at most ``REPAIR_SHARE`` of the time limit. Sized
    from the request, as the shuffles are, so that equal requests run equal portfolios."""
    return REPAIR_S_PER_NODE * len(problem.request.inventory.nodes) <= REPAIR_SHARE * time_limit_s


def model_size(problem: Normalised, compiled: Compiled | None) -> ModelSize:
    """The model's size; without a model (``solver.fallback``), what normalise found."""
    if compiled is None:
        return ModelSize(node_classes=len(problem.classes), candidate_nodes=problem.candidate_nodes)
    proto = compiled.model.proto
    return ModelSize(
        variables=len(proto.variables),
        constraints=len(proto.constraints),
        node_classes=len(problem.classes),
        configurations=sum(len(c) for c in compiled.configs.values()),
        candidate_nodes=problem.candidate_nodes,
    )
