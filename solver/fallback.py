"""The answer when the model cannot be built in time: a greedy plan that needs no model.

``solver.solve`` predicts what compiling the model and one pass of the floor will cost
(``solver.compile.cost``); when that does not fit in the time left, building the model anyway
meant answering late (issue 18 item 4: "the time limit is a promise"; issue 23 item 2). This
module answers instead, inside the time left, with the plan of a greedy placer that works on the
request itself: the Volcano-like greedy of ``solver.baselines`` in its first-fit form (HyperNode
locality, lowest switch tier first, fullest domain first; the first node in name order that admits
a member, its first GPUs with a near NIC, as Slurm's gres binding; each gang whole or not at all),
jobs by priority, then batch order, until its deadline. First fit, not Volcano's scoring of every
node: scoring cost 0.5 s a member at 16,384 nodes.

The answer is verified like every other, and says what it is:

- ``status`` FEASIBLE and ``plan_source`` ``unsearched:<placer>``: nothing was searched;
- the placed-work tiers (one a priority level, as the model's) and the jobs tier, valued on the
  plan, each with its largest value as its bound, so that no tier claims a proof it does not have
  (a tier reads optimal only when the plan places everything the tier counts); the tiers below
  (topology, packing, fragmentation, node order) are defined on the model and are not reported,
  so ``gap`` is 1 when the policy has any;
- every unplaced job: TIME_LIMIT, the reason the model was not built, and what the placer found.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import NamedTuple, Protocol

from solver.answer.measures import cluster_metrics, measure_nodes
from solver.answer.verify import verify
from solver.baselines import volcano
from solver.baselines.exchange import exchange
from solver.baselines.topology import Greedy, Start, first_aligned_pick
from solver.compile import Compiled
from solver.compile.cost import (
    NORMALISE_S_PER_NODE,
    PACE,
    SMALL_BUILD_S,
    VALIDATE_KNOWN_S_PER_NODE,
    VALIDATE_S_PER_NODE,
    Estimate,
)
from solver.compile.objective import JOBS_TIER, member_work, priority_levels, priority_weight
from solver.domain.errors import VerificationFailed
from solver.domain.forked import Forked
from solver.domain.model import (
    JobResult,
    ModelSize,
    ObjectiveTier,
    PriorityMode,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
    TierValue,
)
from solver.reduce.chain import rewrite
from solver.reduce.normalise import Normalised
from solver.search.floor import Candidate, Floor, refused_first
from solver.search.previous import from_previous


class Clock(Protocol):
    """How the pipeline times its stages (``solver.solve.Stopwatch``)."""

    stages: list[StageTiming]

    def stage(self, name: str) -> AbstractContextManager[None]: ...


# What the placer builds before it places anything: its indexes of free devices and of the fabric
# (Start), and the measures of every node not measured before (measure_nodes), 20 us a node each at
# 1,024 to 16,384 nodes (idle, session 25; the development machine of solver.compile.cost).
PLACER_SETUP_S_PER_NODE = 4e-5
# What this answer needs after the placer's deadline: the job in hand when it passes (the placer
# looks at the clock per member and per domain), the plan's measures (its nodes only: the others
# were measured before the placer started), the tiers and the verifier, most of it the verifier's
# walk of the nodes. Measured from the placer's end to the answer (idle, session 25): 0.027 s at
# 1,024 nodes x 200 jobs, 0.10 s (warm) and 0.136 s (cold) at 4,096 x 500, 0.19 s and 0.39 s at
# 16,384 x 500; fitted to the cold ones, a tenth above them (at 2.2e-5 a node, the fit itself,
# cold 1 s calls at 4,096 nodes ended at 0.92-0.98 s of their 0.92 s on a noisy afternoon).
# Session 11's 0.05 s + 2e-4 a job, fitted at load 20 and scaled by the pace on top, kept 4 times
# the tail at 1,024 nodes: a cold 0.3 s call there had no time left for the placer and answered
# no job. Not solver.compile.cost's answer estimate: there is no decode, explain or model here, and
# at 16,384 nodes that estimate (1.3 s) left a 5 s call's greedy a quarter of its time unused.
ANSWER_S, ANSWER_S_PER_NODE, ANSWER_S_PER_JOB = 0.01, 2.5e-5, 6e-5
# What the answer costs more on a node the process has never seen, beyond ANSWER_S_PER_NODE (fitted
# in process): over gRPC a cold 16,384-node 5 s call verified its 7,259 nodes read in 0.26-0.30 s
# (3.6-4.1e-5 a node) and answered after its deadline (session 26). Charged per node never seen
# by the wire's reading (solver.service.wire.Reading) and by the answer from the nodes read
# (solver.service.partial). It replaces the cold *measures* charged there until session 26
# (1.5e-4 a node), which the placer's setup also paid since session 25: counted twice, they kept a
# cold 1 s call at 4,096 nodes to 1,276 of its nodes read and an answer at 0.69 s.
ANSWER_COLD_S_PER_NODE = 5e-5
# The verifier's share of that, the part of this answer timed against its prediction for the
# process's pace (solver.compile.cost.PACE): 0.33 s at 16,384 nodes never verified before, 0.11-0.14 s
# once seen (load 0.5, session 12). Calibrated cold: at 8e-6 a node, the first call of an idle process
# read a pace of 2.5 and sent the next warm 5 s call to this greedy. Warm calls read below 1, which
# the pace's median of several stages weighs against the others.
VERIFY_S_PER_NODE = 2e-5

# Of the time left when a stage that may be cut short starts (reading nodes, normalising them), the
# share kept for the greedy's placing, on top of what its indexes and answer need per node: at
# 1,024 nodes x 200 jobs the placer takes 0.13-0.38 s for its 132 jobs (load 1-19).
PLACING_SHARE = 0.3
# And never less than two whole orders: the first, and the first with the jobs it refused placed
# first (best_of_orders). An order cut short is the answer when it is the only one (a 1 s call at
# 4,096 nodes x 500 jobs, cold, answered 49-130 jobs of the first order's 314 in three of six
# runs, its normalising having left the order 0.16 s; session 24); and the second order is the one
# that lifts the top priority where the first order stranded it (seed 3 there: 919 to 1015 GPUs,
# the greedy's best of 10 orders), which a 1 s call left to a normalising it then threw away. One
# order, its plan not measured, takes 60-70 ns a node and job (first fit, 4,096 and 16,384 nodes,
# idle, session 25); half again as much, per order.
ORDERS_KEPT = 2
ORDER_S_PER_NODE_JOB = 1e-7


def answer_s(nodes: int, jobs: int, pace: float | None = None) -> float:
    """What this answer needs after its placer stops, on ``nodes`` nodes and ``jobs`` jobs, at
    ``pace`` (:data:`PACE`'s unless given)."""
    pace = PACE.ratio() if pace is None else pace
    return (ANSWER_S + ANSWER_S_PER_NODE * nodes + ANSWER_S_PER_JOB * jobs) * pace


def needs_s(nodes: int, jobs: int, left_s: float, pace: float | None = None) -> float:
    """What :func:`unsearched` needs, at ``pace`` (:data:`PACE`'s unless given), to place and answer
    on ``nodes`` nodes and ``jobs`` jobs when ``left_s`` are left: its indexes, its answer, and
    :data:`PLACING_SHARE` of the time left for the placing itself, at least :data:`ORDERS_KEPT`
    whole orders."""
    pace = PACE.ratio() if pace is None else pace
    setup = placing_s(nodes, jobs, 0, pace)
    orders = placing_s(nodes, jobs, ORDERS_KEPT, pace) - setup
    return setup + answer_s(nodes, jobs, pace) + max(orders, PLACING_SHARE * max(0.0, left_s))


def placing_s(nodes: int, jobs: int, orders: int, pace: float | None = None) -> float:
    """What the placer's indexes and ``orders`` whole orders cost on ``nodes`` nodes and ``jobs``
    jobs, at ``pace`` (:data:`PACE`'s unless given)."""
    pace = PACE.ratio() if pace is None else pace
    return (PLACER_SETUP_S_PER_NODE * nodes + orders * ORDER_S_PER_NODE_JOB * nodes * jobs) * pace


def normalise_until(nodes: int, jobs: int, deadline: float) -> float:
    """When normalising ``nodes`` nodes must stop for the greedy to answer by ``deadline`` (both
    ``time.perf_counter()``); never for an inventory whose normalising, even cold, is predicted
    under ``SMALL_BUILD_S`` (a small model is built whatever the clock says: solver.compile.cost)."""
    if NORMALISE_S_PER_NODE * nodes * PACE.ratio() <= SMALL_BUILD_S:
        return float("inf")
    return deadline - needs_s(nodes, jobs, deadline - time.perf_counter())


def after_reading_s_per_node(pace: float | None = None) -> tuple[float, float, float]:
    """What each node read costs after its conversion, (per node, per node converted afresh, per
    node of a kind not read before): the greedy's indexes (the cluster measures of every node
    included: ``measures.measure_nodes`` runs in the placer's setup) and answer; for a node never
    seen (``solver.service.wire.Reading``) validating it as a kind validated already and what its
    answer costs more on it (:data:`ANSWER_COLD_S_PER_NODE`); for the first node of its kind, the
    rest of validating it. The rest of the answer is :func:`answer_s` of no nodes."""
    pace = PACE.ratio() if pace is None else pace
    per_miss = VALIDATE_KNOWN_S_PER_NODE + ANSWER_COLD_S_PER_NODE
    per_kind = VALIDATE_S_PER_NODE - VALIDATE_KNOWN_S_PER_NODE
    return (PLACER_SETUP_S_PER_NODE + ANSWER_S_PER_NODE) * pace, per_miss * pace, per_kind * pace


NORMALISE_LATE = (
    "normalising the inventory's nodes (first seen by this process) could not end in time for the model"
)
COMPILE_LATE = (
    "building the model ran slower than predicted and could not end in time for its first plan "
    "(it goes on being built, for the next request on this cluster)"
)


FIRST_FIT = Greedy(
    name="first-fit",
    pick=first_aligned_pick,
    node_score=volcano.node_score,
    domain_key=volcano.free_fraction,
    domains_from_start=True,
    first_fit=True,
)


def unsearched(
    request: SolveRequest,
    clock: Clock,
    deadline: float,
    estimate: Estimate | str,
    model_size: ModelSize | None = None,
    nodes_sent: int | None = None,
    ahead: Forked[tuple[JobResult, ...]] | None = None,
) -> SolveResult:
    """``request`` (validated, policy chains applied) placed by :data:`FIRST_FIT` before
    ``deadline`` (``time.perf_counter()``) less the time its answer needs, verified, timed on
    ``clock``; see the module docstring. ``estimate``: why no model was built (the estimate, or a
    sentence). ``nodes_sent``: the caller sent more nodes than ``request`` holds, and only these
    were read in time (``solver.service.partial``): the plan uses the first nodes only, and its
    ``plan_source`` says how many of how many. ``ahead``: the queue's orders already at work in a
    process of their own (:func:`orders_ahead`, until :func:`ahead_ends`): this process draws
    a second stream of orders meanwhile, and the better plan answers (:func:`_with_ahead`)."""
    why = estimate if isinstance(estimate, str) else estimate.why(deadline - time.perf_counter())
    with clock.stage("fallback"):
        nodes = len(request.inventory.nodes)
        ends = placing_ends(request, deadline)
        if ends - time.perf_counter() < PLACER_SETUP_S_PER_NODE * nodes:
            ends = 0.0  # no time even for the placer's indexes: it hands back every job untried
        measure_nodes(request)  # the answer measures its plan's nodes only
        greedy = best_of_orders(request, ends) if ahead is None else _with_ahead(request, ends, ahead)
        source = f"unsearched:{FIRST_FIT.name}"
        if nodes_sent is not None and nodes_sent > nodes:
            source += f":read-{nodes}-of-{nodes_sent}-nodes"
        jobs = tuple(job if job.placed else _unplaced(job, why) for job in greedy)
        objectives = tiers(request, jobs)
        reported = {ObjectiveTier.PLACED_WORK}
        result = SolveResult(
            request_id=request.request_id,
            status=SolveStatus.FEASIBLE,
            jobs=jobs,
            objectives=objectives,
            gap=1.0
            if any(t not in reported for t in request.policy.objective)
            else max((v.gap for v in objectives), default=0.0),
            model_size=model_size or ModelSize(),
            metrics=cluster_metrics(request, jobs),
            plan_source=source,
        )
    with clock.stage("verify"):
        verify_started = time.perf_counter()
        violations = verify(request, result)
        PACE.observe(VERIFY_S_PER_NODE * nodes, time.perf_counter() - verify_started)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


# The orders the greedy places a batch in, at most: as many as the benchmark gives the Volcano-like
# greedy it compares with (bench.quality's best of 11 tie orders).
MAX_ORDERS = 11
# Shuffles drawn, at most, in search of one not yet tried: a small batch has few orders.
MAX_DRAWS = 4 * MAX_ORDERS
# Exchanges the orders leave time for once they stop raising the work placed: the orders' job is
# the work, level by level, and an exchange's the jobs. With time for one (4,096 nodes x 500 jobs,
# a 2 s call after a 1 s one), the best plan's exchange was cut short at 315 jobs; with time for
# two, the second plan level on work exchanged to 318, the greedy's best of 11 orders (session 24).
EXCHANGES_WHEN_STALLED = 2


class _Kept(NamedTuple):
    key: tuple[float, ...]
    jobs: tuple[JobResult, ...]


def best_of_orders(request: SolveRequest, ends: float, *, stream: int = 0) -> tuple[JobResult, ...]:
    """The best plan :data:`FIRST_FIT` places before ``ends`` (``time.perf_counter()``), over the
    orders :func:`next_order` draws while there is time: the most placed work, level by level as
    the model's tiers, then the most jobs, kept (of equals, the earlier order). An order already
    behind the best on a priority level it has finished is stopped there; one that ``ends`` cuts
    short is dropped: it may lead on the top levels only because the jobs after went untried, and
    105 jobs fewer for a few more top-level GPUs is not a plan an operator would call better (a 2 s
    call at 16,384 nodes, session 16). At 16,384 nodes x 500 jobs an order takes 0.5-1 s. The
    plans that lead are then exchanged (:func:`_exchanged`, ``solver.baselines.exchange``).
    ``stream`` 0 starts from the queue's own order; another, from the first of its own shuffles
    (:func:`shuffled_orders`), for a process drawing orders beside the first."""
    start = Start.of(request.inventory)
    shuffles = islice(shuffled_orders(request, stream), MAX_DRAWS)
    tried: set[tuple[int, ...]] = set()
    plans: list[_Kept] = []  # every order's plan that ran to its end
    # An order is started only when it could end before the orders must stop, if it takes as long
    # as the last: one cut short is dropped, so the time it would take goes to the exchanges instead
    # (16,384 nodes, cold 5 s: the fourth order started with 0.36 s left, took them and was
    # dropped). The last order, not the longest: a first order slowed by a spike would otherwise
    # keep every later order from starting.
    last = 0.0
    # Kept back from the orders for exchanging the best plans at the end (one exchange costs about
    # an order), once the orders stall: EXCHANGES_WHEN_STALLED times the longest order after the
    # first (which runs on cold caches: 0.15-0.19 s at 4,096 nodes against 0.12-0.13 for the next)
    # while the last order placed no more work than the best before it. None while each order
    # raises the work: an order that raises the work raises the first tiers, an exchange the jobs.
    # (At 16,384 nodes, cold 5 s, the third order, the first's lift lifted again, raises the top
    # priority from 1257 to 1289 GPUs, and an exchange's reserve from the second order on cut it
    # short whenever validating ran slow; at 4,096 nodes and 1 s the second order raises seed 3's
    # from 919 to 1015.)
    reserve = longest = 0.0
    work = _work_tiers(request)
    order: list[int] | None = by_priority(request, range(len(request.jobs))) if not stream else next(shuffles)
    while order is not None and len(tried) < MAX_ORDERS:
        stop = ends - reserve
        if plans and (time.perf_counter() + last >= stop or _all_placed(_best(plans).key, request)):
            break
        tried.add(tuple(order))
        judge = None if not plans else _behind(request, _best(plans).key)
        began = time.perf_counter()
        placed = FIRST_FIT.plan(request, stop, start=start, order=order, behind=judge)
        if plans and time.perf_counter() >= stop:
            break  # cut short: the jobs it did not reach were not refused, only not tried
        last = time.perf_counter() - began
        if plans:
            longest = max(longest, last)
        before = _best(plans).key if plans else None
        plans.append(_Kept(ranking(request, placed), placed))
        stalled = before is not None and plans[-1].key[:work] <= before[:work]
        reserve = longest * EXCHANGES_WHEN_STALLED if stalled else 0.0
        order = next_order(request, squeaked(request, order, placed), tried, shuffles)
    return _exchanged(request, start, plans, ends)


@dataclass(frozen=True)
class FloorOrders:
    """This module's orders as one placer of a model's floor (``solver.search.floor.Portfolio``'s
    ``outside``): :func:`best_of_orders` until a deadline, its plan read back into the model's
    variables (``solver.search.previous``). Without it a call given the time to build the model
    could answer worse than a shorter one answered here: at 16,384 nodes x 500 jobs, seed 3, 356 jobs
    at 5 s and 342 at 15 s on the same work at every priority level (session 32). ``request``: the
    request the model was built from (policy chains applied, before pooling)."""

    problem: Normalised
    compiled: Compiled
    floor: Floor
    request: SolveRequest
    # The same orders already running in a process of their own (:func:`orders_ahead`): their plan
    # is waited for instead of drawn here.
    ahead: Forked[tuple[JobResult, ...]] | None = None

    def __call__(self, ends: float) -> Candidate | None:
        """None, at once, when the time to ``ends`` cannot pay for the placer's indexes and one
        order (its indexes are not cut short: at 16,384 nodes they would hold the search's answer
        back by 0.4 s). With the orders ahead, their plan, waited for up to ``ends`` (None when it has
        not come by then); drawn here as without them when their process ended without one. Not
        the two streams of :func:`_with_ahead`: a second stream drawn here while waiting ran to
        ``ends``, and left the closer no time after it (16,384 nodes, 15 s, session 37: no gang
        brought closer in 4 runs, against 3 of 4; seed 3 355 jobs against 356; 8,192 level)."""
        request = self.request
        jobs = None
        if self.ahead is not None:
            jobs = self.ahead.result(ends)
            self.ahead.stop()
            if jobs is None and self.ahead.error is None:
                return None  # still at work when the time was over
        if jobs is None:
            if ends - time.perf_counter() < placing_s(len(request.inventory.nodes), len(request.jobs), 1):
                return None
            jobs = best_of_orders(self.request, ends)
        ids = [job.id for job in self.request.jobs]
        back = from_previous(self.problem, self.compiled, self.floor, jobs, ids)
        return None if back is None else Candidate(f"{FIRST_FIT.name}-orders", back.plan, back.values)


def orders_ahead(
    request: SolveRequest, ends: float, *, rewritten: bool = True
) -> Forked[tuple[JobResult, ...]] | None:
    """:func:`best_of_orders` of ``request`` until ``ends``, started now in a forked process
    (``solver.domain.forked``): for :class:`FloorOrders` to read back once the model is built, or
    for :func:`unsearched` to answer with. On a thread they shared the interpreter with the model's
    build and the search's Python: at 16,384 nodes x 500 jobs, cold, a 15 s call's orders started
    after compile and the floor (5.6 s in) and had 4 s of a shared core; forked after normalising,
    they have a core of their own from 1.5 s. Not ``rewritten``: a request whose policy chains are
    still to be applied (started before it is validated, the child applies them; a request that is
    not valid ends the child without an answer). None where processes cannot be forked."""
    return Forked.start(partial(_queue_orders, request, ends, rewritten))


def _queue_orders(request: SolveRequest, ends: float, rewritten: bool) -> tuple[JobResult, ...]:
    return best_of_orders(request if rewritten else rewrite(request), ends)


# What the plan of the orders ahead costs to come back, kept from their time: pickled, piped and read
# back (500 jobs: 3-6 ms each way at 4,096-16,384 nodes, session 37), the child scheduled again.
AHEAD_RETURN_S = 0.03


def placing_ends(request: SolveRequest, deadline: float) -> float:
    """When :func:`unsearched`'s placer must stop for its answer to leave by ``deadline``."""
    return deadline - answer_s(len(request.inventory.nodes), len(request.jobs))


def ahead_ends(request: SolveRequest, deadline: float) -> float:
    """When the orders ahead that :func:`unsearched` answers with stop: :data:`AHEAD_RETURN_S` before
    its placer (:func:`placing_ends`), so that their plan is back by then."""
    return placing_ends(request, deadline) - AHEAD_RETURN_S


def _with_ahead(
    request: SolveRequest, ends: float, ahead: Forked[tuple[JobResult, ...]]
) -> tuple[JobResult, ...]:
    """The better plan of two processes, the child's on ties: the queue's orders in the child
    (``ahead``: the queue order, its lifts, shuffles), the shuffles of a second stream here while
    an order still fits before ``ends``. Two orders drawn at once where one was: a cold 1 s call at
    4,096 nodes x 500 jobs has time for one order and a half after validating (0.29 s of it), and
    the second stream's first shuffle starts the best order's 318 jobs on seed 1 where the queue's
    orders start 316 (session 37). When the child has died already (a fork under gRPC's own fork
    handlers can), the queue's orders here; when neither has a plan by ``ends``, every job untried."""
    if ahead.result(time.perf_counter()) is None and ahead.error is not None:
        return best_of_orders(request, ends)
    nodes, jobs = len(request.inventory.nodes), len(request.jobs)
    own = None
    if ends - time.perf_counter() >= placing_s(nodes, jobs, 1):
        own = best_of_orders(request, ends, stream=1)
    theirs = ahead.result(ends)
    ahead.stop()
    plans = [plan for plan in (theirs, own) if plan is not None]
    if not plans:
        return FIRST_FIT.plan(request, 0.0)  # past its deadline: every job untried, at once
    return max(plans, key=lambda plan: ranking(request, plan))  # of equals, the first: the child's


def _work_tiers(request: SolveRequest) -> int:
    """How many leading values of :func:`ranking` are work placed (the jobs tier and the jobs'
    count come after; none when the policy asks for no placed work)."""
    return sum(1 for tier in tiers(request, ()) if tier.name != JOBS_TIER)


def _best(plans: list[_Kept]) -> _Kept:
    """The plan that ranks first; of equals, the earlier order's."""
    return max(plans, key=lambda p: p.key)


def _exchanged(request: SolveRequest, start: Start, plans: list[_Kept], ends: float) -> tuple[JobResult, ...]:
    """The best of ``plans`` after :func:`exchange`, tried on the plans level with the best on the
    work placed, best first, while there is time: which plan an exchange lifts most is not the
    one that ranks first (4,096 nodes, seed 1: 315 jobs exchanged to 316, another plan of 315 to
    318). The best plan as placed when there is no time for any."""
    best = _best(plans)
    work = _work_tiers(request)
    # Level on the work only: comparing every value but the last (the jobs counted twice, as a
    # tier and as the count) kept only the plans with the best plan's jobs too.
    lead = [p for p in plans if p.key[:work] == best.key[:work]]
    seen: set[frozenset[str]] = set()
    for plan in sorted(lead, key=lambda p: p.key, reverse=True):
        placed = frozenset(j.job_id for j in plan.jobs if j.placed)
        if time.perf_counter() >= ends or placed in seen:
            continue
        seen.add(placed)
        out = exchange(request, start, plan.jobs, FIRST_FIT, lambda jobs: ranking(request, jobs), ends)
        key = ranking(request, out)
        if key > best.key:
            best = _Kept(key, out)
    return best.jobs


def next_order(
    request: SolveRequest, lifted: list[int], tried: set[tuple[int, ...]], shuffles: Iterator[list[int]]
) -> list[int] | None:
    """The order after ``tried``: ``lifted`` (the last order with the jobs it refused moved to the
    front of their priority, :func:`squeaked`) when it is new, else the next shuffle not tried;
    None when there is none. A squeaky wheel, with random restarts when it turns in place: which
    order places the most top-priority work was luck over shuffles (1193 to 1289 GPUs at 16,384
    nodes over eleven, session 16), and the jobs an order refused are the ones whose room the jobs
    before them took; placing them first reached the shuffles' best of twelve in the second or
    third order on both seeds measured (session 20, bench/RESULTS.md)."""
    if tuple(lifted) not in tried:
        return lifted
    return next((order for order in shuffles if tuple(order) not in tried), None)


def squeaked(request: SolveRequest, order: list[int], results: tuple[JobResult, ...]) -> list[int]:
    """``order`` with the jobs ``results`` refused (unplaced, but tried: not left out for time or
    because the order was stopped) first in their priority (:func:`refused_first`)."""

    def refused(j: int) -> bool:
        reason = results[j].reason
        return not results[j].placed and (reason is None or reason.code != ReasonCode.TIME_LIMIT)

    return refused_first(order, refused, lambda j: request.jobs[j].priority)


def by_priority(request: SolveRequest, rank: Iterable[int]) -> list[int]:
    """Job indexes by priority, highest first, ties in ``rank``'s order (a permutation of them)."""
    at = {j: k for k, j in enumerate(rank)}
    return sorted(at, key=lambda j: (-request.jobs[j].priority, at[j]))


def shuffled_orders(request: SolveRequest, stream: int = 0) -> Iterator[list[int]]:
    """Seeded shuffles of each priority's jobs, as a queue's ties could fall; ``stream``: another
    sequence of them, for orders drawn beside the first (:func:`_with_ahead`)."""
    draw = random.Random(f"{request.policy.seed}/{request.request_id}" + (f"/{stream}" if stream else ""))
    while True:
        rank = list(range(len(request.jobs)))
        draw.shuffle(rank)
        yield by_priority(request, rank)


def ranking(request: SolveRequest, jobs: tuple[JobResult, ...]) -> tuple[float, ...]:
    """What orders are compared by: the placed-work tiers' values, then jobs placed."""
    return (*(v.value for v in tiers(request, jobs)), float(sum(j.placed for j in jobs)))


def _all_placed(key: tuple[float, ...], request: SolveRequest) -> bool:
    return key[-1] >= len(request.jobs)


def _behind(
    request: SolveRequest, best: tuple[float, ...]
) -> Callable[[Mapping[int, JobResult]], bool] | None:
    """Whether a plan in the making is already below ``best`` on the priority levels it has
    finished (STRICT only: weighted, lower levels can still make up for a higher one)."""
    if request.policy.priority_mode == PriorityMode.WEIGHTED:
        return None
    levels = [lv for _, lv in priority_levels(request.jobs, request.policy.priority_mode)]

    def behind(results: Mapping[int, JobResult]) -> bool:
        last = request.jobs[next(reversed(results))].priority  # the level just finished
        settled = sum(1 for lv in levels if lv is not None and min(lv) >= last)
        values = ranking(request, tuple(results.values()))
        return values[:settled] < best[:settled]

    return behind


def _unplaced(job: JobResult, why: str) -> JobResult:
    found = job.reason.message if job.reason is not None else "it did not place it"
    return job.model_copy(
        update={
            "reason": Reason(
                code=ReasonCode.TIME_LIMIT,
                message=f"not placed: {why}, so no model was built and nothing was searched; "
                f"the greedy answer: {found}",
                relaxation="a longer time limit (or deadline) lets the solver build the model",
            )
        }
    )


def tiers(request: SolveRequest, jobs: tuple[JobResult, ...]) -> tuple[TierValue, ...]:
    """The placed-work tiers (:func:`priority_levels`, weighted as the model's) and the jobs tier of
    ``jobs`` on ``request``, each bounded by its largest value; empty unless the policy asks for
    placed work."""
    if ObjectiveTier.PLACED_WORK not in request.policy.objective:
        return ()
    placed = {job.job_id: job for job in jobs if job.placed}
    out = []
    for name, levels in priority_levels(request.jobs, request.policy.priority_mode):
        value = bound = 0
        for job in request.jobs:
            if levels is not None and job.priority not in levels:
                continue
            weight = priority_weight(job.priority) if levels is None else 1
            members = placed[job.id].members if job.id in placed else ()
            for role in job.roles:
                work = weight * member_work(role.member)
                bound += work * role.replicas
                value += work * sum(m.role == role.name for m in members)
        out.append(_tier(name, value, bound))
    if len(request.jobs) > 1:
        out.append(_tier(JOBS_TIER, len(placed), len(request.jobs)))
    return tuple(out)


def _tier(name: str, value: int, bound: int) -> TierValue:
    return TierValue(
        tier=ObjectiveTier.PLACED_WORK,
        name=name,
        value=float(value),
        bound=float(bound),
        optimal=value >= bound,
    )
