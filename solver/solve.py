"""The pipeline of one Solve: validate → normalise → compile → CP-SAT → decode → verify → explain.

Each stage is a function over immutable values and can be called alone; this module only chains
them, keeps time, and runs the lexicographic objective: one CP-SAT search per tier, each tier's
value then held as a constraint while the next is optimised, each search hinted with the last answer
— or, for a small model, one search of all tiers weighted so that the sum is lexicographic.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.compile import Compiled, Tier, compile_model
from solver.decode import cluster_metrics, decode
from solver.errors import InvalidRequest, Problem, VerificationFailed
from solver.explain import explain
from solver.greedy import complete, greedy_hint, repack
from solver.intranode import hosts_some_member
from solver.model import (
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
from solver.normalise import Normalised, normalise
from solver.policy import apply_policy_chains
from solver.rails import expand_rails
from solver.sequence import arrival_steps, candidate_orders, solve_in_order, step_size
from solver.validate import unfit_jobs, validate
from solver.verify import verify

# How the search time is shared between tiers (by the first part of a tier's name): placed work
# matters most; the topology parts together get as much again; the tie-breakers less.
TIER_WEIGHT = {
    "placed_work": 4.0,
    "placed_work.jobs": 0.5,
    "topology": 1.5,
    "packing": 1.0,
    "fragmentation": 1.0,
}

# Time kept back from the caller's deadline for decode, verify, explain and the reply.
DEADLINE_MARGIN_S = 0.05
# In deterministic mode the limit is CP-SAT's deterministic time (work units, not seconds), so the
# answer does not depend on the machine's load. Roughly one unit per second on this hardware.
DETERMINISTIC_UNITS_PER_SECOND = 1.0
# A model this small is searched once for all its tiers, weighted into one objective
# (:func:`solve_merged`): a lone pod's model is built and searched in a few milliseconds, and one
# search per tier cost more than the rest of its solve. Bigger models keep one search per tier,
# where each tier's own objective guides the search better than a sum with huge weights.
MERGE_MAX_VARIABLES = 2_000
# CP-SAT scales the objective through a double: sums beyond 2^53 would lose units.
EXACT_OBJECTIVE = 2**50


class Stopwatch:
    """Stage timings in milliseconds, in the order the stages ran."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: list[StageTiming] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.stages.append(StageTiming(stage=name, ms=(time.perf_counter() - t0) * 1000))

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


@dataclass(frozen=True)
class TierOutcome:
    value: TierValue
    solution: dict[str, int] | None  # values of every variable, by name


def solve(request: SolveRequest, *, deadline_s: float | None = None) -> SolveResult:
    """Place ``request.jobs`` on ``request.inventory``; verified, explained, timed.

    ``deadline_s`` is the time the caller still waits (e.g. a gRPC deadline): the search stops in
    time to answer before it, whatever the policy's time limit says.
    Raises ``InvalidRequest`` for bad input and ``VerificationFailed`` if the answer is wrong.
    A batch with ``BatchOrder.LARGEST_FIRST`` is placed one job at a time (``solver.sequence``).
    A job with a member no node of the inventory could hold even empty is well formed: it is left
    unplaced with that reason (``NO_NODE_FITS``) and the rest of the batch is placed.
    """
    clock = Stopwatch()
    with clock.stage("validate"):
        problems = validate(request)
        unfit = {} if problems else unfit_jobs(request)
    if problems:
        raise InvalidRequest(problems)
    if unfit:
        return solve_without_unfit(request, unfit, clock, deadline_s)
    return solve_valid(request, clock, deadline_s)


def solve_valid(request: SolveRequest, clock: Stopwatch, deadline_s: float | None = None) -> SolveResult:
    """:func:`solve` of a validated request in which every member fits some node."""
    if request.policy.batch_order == BatchOrder.LARGEST_FIRST and len(request.jobs) > 1:
        return solve_largest_first(request, clock, deadline_s=deadline_s)
    if request.policy.batch_order == BatchOrder.BEST_OF_ORDERS and len(request.jobs) > 1:
        return solve_best_of_orders(request, clock, deadline_s=deadline_s)
    with clock.stage("normalise"):
        # Policy chains become tiers and member rules; from here on the rewritten request is the
        # request (the verifier checks against it too, so the chains' filters are checked as well).
        request = apply_policy_chains(request)
        problem = expand_rails(normalise(request, hosts_some_member))
    with clock.stage("compile"):
        compiled = compile_model(problem, request.policy)

    budget = request.policy.time_limit_s
    if deadline_s is not None:
        budget = min(budget, deadline_s)
    # Keep back time for decode, verify and explain, which grow with the problem like the stages
    # before the search did.
    budget = max(0.01, budget - clock.elapsed() * 1.5 - DEADLINE_MARGIN_S)

    with clock.stage("solve"):
        outcomes = solve_lexicographic(
            compiled,
            request.policy,
            budget,
            hint=complete(problem, compiled, greedy_hint(problem, compiled)),
            polish=lambda solution: complete(problem, compiled, solution),
            repack_fn=lambda solution: repack(problem, compiled, solution),
        )
    values = [o.value for o in outcomes]
    solution = next((o.solution for o in reversed(outcomes) if o.solution is not None), None)
    status = overall_status(outcomes)

    with clock.stage("decode"):
        jobs = decode(problem, compiled, solution)
    with clock.stage("explain"):
        jobs = explain(problem, compiled, jobs, timed_out=status == SolveStatus.UNKNOWN)
    metrics = cluster_metrics(request, jobs)
    result = SolveResult(
        request_id=request.request_id,
        status=status,
        jobs=jobs,
        objectives=tuple(values),
        # The gap of the highest tier: lower tiers are optimised within it, their own gaps are in
        # ``objectives`` (and ``status`` is OPTIMAL only when every tier is proven).
        gap=values[0].gap if values else 0.0,
        model_size=model_size(problem, compiled),
        metrics=metrics,
    )
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


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
    result = solved.model_copy(update={"jobs": jobs, "metrics": cluster_metrics(request, jobs)})
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


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
    :func:`solver.sequence.candidate_orders`); the plan placing the most work, then leaving the least
    fragmentation, then the earliest order, is kept."""
    return one_job_at_a_time(request, clock, "orders", best_of_orders, deadline_s)


def one_job_at_a_time(
    request: SolveRequest,
    clock: Stopwatch,
    stage: str,
    place: Callable[[SolveRequest, float], SolveResult],
    deadline_s: float | None,
) -> SolveResult:
    """The (validated) batch placed by ``place(request, budget_s)`` as chains of one-job solves
    (each verified), and the plan verified again against the whole request: rules between jobs of
    different steps (shares of one GPU, capacity, metrics) are checked where they meet."""
    request = apply_policy_chains(request)
    budget = (
        request.policy.time_limit_s if deadline_s is None else min(request.policy.time_limit_s, deadline_s)
    )
    with clock.stage(stage):
        result = place(request, budget)
    result = result.model_copy(update={"metrics": cluster_metrics(request, result.jobs)})
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": (*clock.stages, *result.timings)})


def solve_step(step: SolveRequest, seconds: float) -> SolveResult:
    """One step of a batch placed one job at a time: a joint solve within ``seconds``."""
    return solve(step, deadline_s=seconds)


def best_of_orders(request: SolveRequest, budget_s: float) -> SolveResult:
    """Each candidate order's plan in turn, each with an equal part of the time left; the best kept."""
    deadline = time.perf_counter() + budget_s
    groups = arrival_steps(request)
    sizes = [step_size(request, g) for g in groups]
    orders = [list(range(len(groups)))]
    best: tuple[tuple[float, float, int], SolveResult] | None = None
    k = 0
    while k < len(orders):
        # the given, largest first, left-out first and the shuffles
        expected = max(len(orders), 3 + request.policy.order_shuffles)
        left = max(0.01, deadline - time.perf_counter()) / (expected - k)
        why = "placed in the batch's order" if not k else "in the order that placed the most work"
        result = solve_in_order(request, solve_step, left, [groups[i] for i in orders[k]], why)
        metrics = cluster_metrics(request, result.jobs)
        placed = next((v.value for v in result.objectives if v.name == "placed_work"), 0.0)
        key = (placed, -metrics.fragmentation_after, -k)
        if best is None or key > best[0]:
            best = (key, result)
        if not k:  # the other orders, now that the given order says which steps it left out
            unplaced = {jr.job_id for jr in result.jobs if not jr.placed}
            left_out = [i for i, g in enumerate(groups) if any(request.jobs[j].id in unplaced for j in g)]
            seed = f"{request.policy.seed}/{request.request_id}"
            orders += candidate_orders(sizes, left_out, seed, request.policy.order_shuffles)
        k += 1
    assert best is not None  # the given order is always tried
    return best[1]


def solve_lexicographic(
    compiled: Compiled,
    policy: Policy,
    budget_s: float,
    hint: dict[str, int] | None = None,
    polish: Callable[[dict[str, int]], dict[str, int]] | None = None,
    repack_fn: Callable[[dict[str, int]], dict[str, int] | None] | None = None,
) -> list[TierOutcome]:
    """Optimise each tier in turn, holding the tiers above at the values reached; each search
    starts from the previous answer (the first from ``hint``, e.g. a greedy placement), improved
    by ``polish`` where a cheap rule can do better than the tier above cared to. A small model is
    first searched once for all tiers (:func:`solve_merged`); only if that is not proven optimal in
    the first tier's share of the time do the tiers go one by one."""
    outcomes: list[TierOutcome] = []
    model = compiled.model
    deadline = time.perf_counter() + budget_s
    weights = [
        TIER_WEIGHT.get(tier.name, TIER_WEIGHT.get(tier.name.split(".")[0], 1.0)) for tier in compiled.tiers
    ]
    if compiled.tiers and len(model.proto.variables) <= MERGE_MAX_VARIABLES:
        share = budget_s * weights[0] / sum(weights)
        merged, found = solve_merged(
            compiled, policy, share, policy.time_limit_s * weights[0] / sum(weights), hint
        )
        if merged is not None:
            return merged
        hint = found or hint  # not proven in its share of the time: tier by tier, from what it found
    tried_repack = False
    for i, tier in enumerate(compiled.tiers):
        remaining = deadline - time.perf_counter()
        # Each tier gets its weight's part of what is left; time a tier does not use flows down.
        part = weights[i] / sum(weights[i:])
        # At least enough for CP-SAT's presolve to hand back the hint on a big model.
        share = max(remaining * part, min(remaining, 0.5 + 0.05 * budget_s))
        if i > 0 and remaining <= 0:
            outcomes.append(unsolved(tier, hint))  # out of time: the answer above still stands
            continue
        model.maximize(tier.expr)
        if tier.tier == ObjectiveTier.TOPOLOGY and hint is not None and repack_fn and not tried_repack:
            # Once, before the first topology part: the same jobs placed again, locality first.
            tried_repack = True
            repacked = repack_fn(hint)
            if repacked is not None and all(
                t.value_of(repacked) >= t.value_of(hint) for t in compiled.tiers[:i]
            ):
                hint = repacked if tier.value_of(repacked) > tier.value_of(hint) else hint
        apply_hint(model, hint)
        started = time.perf_counter()
        # Deterministic mode: the search effort of a tier is a fixed share of the policy's limit,
        # never of the wall time left, so the answer does not depend on the machine's load.
        effort = policy.time_limit_s * weights[i] / sum(weights)
        outcome = run_tier(model, tier, policy, max(0.01, share), effort)
        if outcome.solution is None and hint is not None:
            # Nothing found in time: the answer in hand (the tier above's, or the completed greedy
            # plan for the first tier) stands; the verifier checks it like any other.
            outcome = unsolved(tier, hint, keep=i == 0)
        ms = (time.perf_counter() - started) * 1000
        outcome = TierOutcome(outcome.value.model_copy(update={"ms": ms}), outcome.solution)
        outcomes.append(outcome)
        if outcome.solution is not None:
            hint = polish(outcome.solution) if polish else outcome.solution
        # Hold the tier at what the standing answer reaches, found or not, before the next one.
        model.add(tier.expr >= round(outcome.value.value))
    return outcomes


def merged_weights(model: cp_model.CpModel, tiers: Sequence[Tier]) -> list[int] | None:
    """Weights under which the sum of weight x tier is lexicographic: each tier's weight is one more
    than the most all the tiers below it can move the sum (their spans, from the variables'
    domains), so a unit on a tier outweighs any change below it. None when the weighted sum would
    leave the range CP-SAT's double-precision objective holds exactly."""
    variables = model.proto.variables
    spans = []
    for tier in tiers:
        low = high = 0
        for c, v in tier.terms:
            domain = variables[v.index].domain
            # Indexed from the front: this protobuf's repeated fields read domain[-1] as 0.
            a, b = c * domain[0], c * domain[len(domain) - 1]
            low, high = low + min(a, b), high + max(a, b)
        spans.append(high - low)
    weights = [0] * len(tiers)
    below = 0
    for i in reversed(range(len(tiers))):
        weights[i] = below + 1
        below += weights[i] * spans[i]
        if below >= EXACT_OBJECTIVE:
            return None
    return weights


def solve_merged(
    compiled: Compiled, policy: Policy, seconds: float, effort: float, hint: dict[str, int] | None
) -> tuple[list[TierOutcome] | None, dict[str, int] | None]:
    """Every tier in one search, weighted (:func:`merged_weights`). Proven optimal, its answer is the
    lexicographic optimum and each tier's value its proven best; the search's time is the first
    tier's. Otherwise (no exact weights, or not proven in time) no outcomes, and what it found."""
    weights = merged_weights(compiled.model, compiled.tiers)
    if weights is None:
        return None, None
    model = compiled.model
    terms = [(w * c, v) for w, tier in zip(weights, compiled.tiers, strict=True) for c, v in tier.terms]
    model.maximize(cp_model.LinearExpr.weighted_sum([v for _, v in terms], [c for c, _ in terms]))
    apply_hint(model, hint)
    started = time.perf_counter()
    merged = Tier(
        compiled.tiers[0].tier,
        "merged",
        tuple(terms),
        sum(w * t.upper for w, t in zip(weights, compiled.tiers, strict=True)),
    )
    outcome = run_tier(model, merged, policy, max(0.01, seconds), effort)
    ms = (time.perf_counter() - started) * 1000
    if outcome.solution is None or not outcome.value.optimal:
        return None, outcome.solution
    solution = outcome.solution
    outcomes = []
    for i, tier in enumerate(compiled.tiers):
        value = float(tier.value_of(solution))
        outcomes.append(
            TierOutcome(
                TierValue(
                    tier=tier.tier,
                    name=tier.name,
                    value=value,
                    bound=value,
                    optimal=True,
                    ms=0.0 if i else ms,
                ),
                solution,
            )
        )
        # Held, as the tier-by-tier search holds them: a caller may go on to use the model.
        model.add(tier.expr >= round(value))
    return outcomes, solution


def unsolved(tier: Tier, solution: dict[str, int] | None, *, keep: bool = False) -> TierOutcome:
    """A tier left unsearched or unsolved: what the standing answer scores on it, not optimal.
    With ``keep`` the standing answer becomes this tier's answer (the first tier's fallback)."""
    value = float(tier.value_of(solution)) if solution else 0.0
    return TierOutcome(
        TierValue(tier=tier.tier, name=tier.name, value=value, bound=float(tier.upper), optimal=False),
        solution if keep else None,
    )


def apply_hint(model: cp_model.CpModel, hint: dict[str, int] | None) -> None:
    model.clear_hints()
    if not hint:
        return
    # Straight into the proto: one call per variable through the Python wrapper costs more than
    # the search of a lone pod's model.
    names = [v.name for v in model.proto.variables]
    known = [i for i, name in enumerate(names) if name in hint]
    model.proto.solution_hint.vars.extend(known)
    model.proto.solution_hint.values.extend(hint[names[i]] for i in known)


def run_tier(
    model: cp_model.CpModel, tier: Tier, policy: Policy, seconds: float, effort: float | None = None
) -> TierOutcome:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = policy.seed
    params.max_time_in_seconds = seconds
    # The model is small and its structure is known; probing and symmetry detection cost more
    # presolve time than they save search (measured: bench/RESULTS.md, "presolve settings").
    params.cp_model_probing_level = 0
    params.symmetry_level = 0
    if policy.deterministic:
        # One worker, or interleaved workers, search the same way on every run; the deterministic
        # time limit makes the stopping point independent of how loaded the machine is. Wall time
        # stays as the safety net for the caller's deadline. One worker is the fastest on 2 cores.
        params.num_workers = policy.workers or 1
        params.interleave_search = params.num_workers > 1
        params.max_deterministic_time = (
            effort if effort is not None else seconds
        ) * DETERMINISTIC_UNITS_PER_SECOND
    else:
        params.num_workers = policy.workers or max(1, os.cpu_count() or 1)
    code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return TierOutcome(TierValue(tier=tier.tier, value=0.0, bound=float(tier.upper), optimal=False), None)
    solution = dict(zip((v.name for v in model.proto.variables), solver.response_proto.solution, strict=True))
    return TierOutcome(
        TierValue(
            tier=tier.tier,
            name=tier.name,
            # Every tier is an integer expression; CP-SAT reports it through a float scaling.
            value=float(round(solver.objective_value)),
            bound=float(round(solver.best_objective_bound)),
            optimal=code == cp_model.OPTIMAL,
        ),
        solution,
    )


def overall_status(outcomes: list[TierOutcome]) -> SolveStatus:
    if not outcomes:
        return SolveStatus.OPTIMAL  # nothing to optimise: an empty batch
    if outcomes[0].solution is None:
        return SolveStatus.UNKNOWN
    if all(o.value.optimal for o in outcomes) and all(o.solution is not None for o in outcomes):
        return SolveStatus.OPTIMAL
    return SolveStatus.FEASIBLE


def model_size(problem: Normalised, compiled: Compiled) -> ModelSize:
    proto = compiled.model.proto
    return ModelSize(
        variables=len(proto.variables),
        constraints=len(proto.constraints),
        node_classes=len(problem.classes),
        configurations=sum(len(c) for c in compiled.configs.values()),
        candidate_nodes=problem.candidate_nodes,
    )
