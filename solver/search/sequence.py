"""A batch placed one job at a time (``BatchOrder.LARGEST_FIRST``): a reduction to one-job solves.

A joint model of a batch optimises the batch's objective, which is not always what serves the
cluster best: on the FGD trace, windows of pods solved jointly for least fragmentation placed 1.3
points fewer GPUs by the end than the same pods placed one by one (bench/RESULTS-replay.md). This
module is the other way a scheduler places a batch — a sorted queue — with the solver placing each
step. (Sorting is no free gain either: on the same trace, windows of 16 sorted largest first are a
little above arrival order and windows of 32 or more below it.)

1. the batch is cut into *steps*: one job each, except that jobs bound by an anti-affinity rule
   between them are one step (a rule held by a job placed earlier is not visible in the inventory
   a later step sees, so such jobs are placed together);
2. steps go highest priority first, then most GPU work (milli-GPU over all members), then in the
   batch's order;
3. each step is a solve of its jobs (validated, searched, decoded) on the inventory as the steps
   before it left it: their placements are held there as allocations, and the nodes of an exclusive
   job are closed to the rest of the batch. A step's answer stage is the batch's: its left-out jobs
   are explained only if its order's plan is the one kept (:meth:`InOrder.explained`, on the
   inventory that step saw), and no step is measured or verified on its own;
4. the steps' results become one result for the whole batch, which the caller measures and
   verifies against the whole request (rules between jobs of different steps meet there).

What the result can say about optimality: the first tier's bound is the work of the whole batch
(it is a bound on any plan), the others are the sums of the steps' own values and bounds, which
hold given the steps before them and are not bounds on the batch, so they are never called optimal.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solver.compile.objective import is_placed_work, member_work, priority_levels, priority_weight
from solver.domain.fragmentation import batch_workload
from solver.domain.model import (
    Allocation,
    BatchOrder,
    Inventory,
    Job,
    JobResult,
    ModelSize,
    ObjectiveTier,
    Reason,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
    TierValue,
)
from solver.reduce.separation import Separation


@dataclass(frozen=True)
class StepPlan:
    """One step's plan. ``result``'s left-out jobs may have no reason yet: ``explain(until)`` gives
    the step's job results with theirs (judged on the inventory the step saw, its searches stopping
    by ``until``, a ``time.perf_counter()`` time); None when ``result`` is explained already."""

    result: SolveResult
    explain: Callable[[float], Sequence[JobResult]] | None = None


# Solves one step's request by the joint pipeline; ``deadline_s`` is what the step may use.
SolveStep = Callable[[SolveRequest, float], StepPlan]


@dataclass(frozen=True)
class InOrder:
    """One order's plan for the batch (:func:`solve_in_order`), unverified. Its left-out jobs are
    explained by :meth:`explained`, which the caller asks of the one plan it keeps: comparing
    orders needs their plans only, and explaining a left-out job searches relaxed copies of it."""

    result: SolveResult
    why: str  # added to the reason of a job a later step left out
    unexplained: tuple[tuple[int, StepPlan], ...] = ()  # (step's place in the order, its plan)

    def explained(self, until: float) -> SolveResult:
        """The plan with every left-out job's reason; explanations stop searching by ``until``."""
        found = {jr.job_id: jr for jr in self.result.jobs}
        for k, step in self.unexplained:
            assert step.explain is not None  # only steps left to explain are kept here
            for jr in step.explain(until):
                if not jr.placed:
                    found[jr.job_id] = jr if not k else _after_earlier_steps(jr, self.why)
        return self.result.model_copy(update={"jobs": tuple(found[jr.job_id] for jr in self.result.jobs)})


def held_allocations(job: Job, result: JobResult) -> dict[str, list[Allocation]]:
    """The placement of a job as the allocations it holds while it runs, by node. A share member's
    placement names its GPU in ``gpus`` too; what it holds is the share, not the GPU."""
    shapes = {r.name: r.member for r in job.roles}
    out: dict[str, list[Allocation]] = defaultdict(list)
    for m in result.members:
        shape = shapes[m.role]
        out[m.node].append(
            Allocation(
                owner=job.id,
                gpus=() if m.gpu_shares else m.gpus,
                nics=m.nics,
                cpu_milli=shape.cpu_milli,
                memory_mib=shape.memory_mib,
                gpu_shares=m.gpu_shares,
                mutex=shape.mutex,
                labels=job.labels,
            )
        )
    return out


def work(job: Job, *, gpu_only: bool = False) -> int:
    """The job's worth in the placed-work tier before priority: every member's ``member_work`` (a
    CPU-only member counts 1); with ``gpu_only``, the milli-GPU it asks for (a CPU-only job: 0)."""
    return sum(
        member_work(role.member) * role.replicas
        for role in job.roles
        if not gpu_only or role.member.gpus or role.member.gpu_share is not None
    )


def steps(request: SolveRequest) -> list[tuple[int, ...]]:
    """The batch's jobs (by index) in the order ``LARGEST_FIRST`` places them, grouped into steps."""
    groups = arrival_steps(request)
    return [groups[k] for k in largest_first([step_size(request, g) for g in groups])]


def step_size(request: SolveRequest, group: Sequence[int]) -> tuple[int, int]:
    """What orders a step among the others: its highest priority, then its GPU work."""
    jobs = request.jobs
    return max(jobs[j].priority for j in group), sum(work(jobs[j], gpu_only=True) for j in group)


def largest_first(sizes: Sequence[tuple[int, ...]]) -> list[int]:
    """Positions by size, largest first; equal sizes in their given order."""
    return sorted(range(len(sizes)), key=lambda k: tuple(-x for x in sizes[k]))


def candidate_orders(
    sizes: Sequence[tuple[int, ...]], left_out: Sequence[int], seed: str, shuffles: int
) -> list[list[int]]:
    """The orders ``BEST_OF_ORDERS`` tries, as positions of the steps, after the given order: largest
    first; the steps the given order ``left_out`` first (largest first), then the rest as given; and
    ``shuffles`` orders shuffled by a generator seeded with ``seed``. Repeats are dropped. A pure
    function of sizes, so that a greedy baseline can try exactly the solver's orders."""
    given = list(range(len(sizes)))
    orders = [largest_first(sizes)]
    if left_out:
        first = [left_out[k] for k in largest_first([sizes[k] for k in left_out])]
        out = set(left_out)
        orders.append(first + [k for k in given if k not in out])
    rng = random.Random(seed)
    for _ in range(shuffles):
        shuffled = list(given)
        rng.shuffle(shuffled)
        orders.append(shuffled)
    seen = {tuple(given)}
    unique = []
    for order in orders:
        if tuple(order) not in seen:
            seen.add(tuple(order))
            unique.append(order)
    return unique


def arrival_steps(request: SolveRequest) -> list[tuple[int, ...]]:
    """The batch's jobs (by index) grouped into steps, in the batch's order (a step by its first job)."""
    jobs = request.jobs
    parent = list(range(len(jobs)))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b, _ in Separation.of(request).job_conflicts:
        parent[root(a)] = root(b)
    groups: dict[int, list[int]] = defaultdict(list)
    for j in range(len(jobs)):
        groups[root(j)].append(j)

    return [tuple(g) for g in sorted(groups.values(), key=lambda g: g[0])]


def solve_in_order(
    request: SolveRequest,
    solve_step: SolveStep,
    budget_s: float,
    order: Sequence[tuple[int, ...]] | None = None,
    why: str = "after the batch's larger jobs were placed first: LARGEST_FIRST",
) -> InOrder:
    """Each step of ``order`` (default: :func:`steps`) solved in turn within ``budget_s`` seconds, on
    the inventory the steps before it left; one unverified plan for the whole batch (the caller
    verifies it), its left-out jobs explained on demand (:meth:`InOrder.explained`). ``why`` is
    added to the reason of a job a later step left out."""
    deadline = time.perf_counter() + budget_s
    # Without a profile of its own, fragmentation is measured against the whole batch's shapes at
    # every step, as a joint solve of the batch would.
    workload = request.policy.workload or batch_workload(r.member for job in request.jobs for r in job.roles)
    policy = request.policy.model_copy(update={"batch_order": BatchOrder.JOINT, "workload": workload})
    nodes = {n.name: n for n in request.inventory.nodes}
    order = steps(request) if order is None else order
    results: dict[str, JobResult] = {}
    outcomes: list[SolveResult] = []
    unexplained: list[tuple[int, StepPlan]] = []
    for k, group in enumerate(order):
        jobs = tuple(request.jobs[j] for j in group)
        step = SolveRequest(
            request_id=f"{request.request_id}#{k}",
            inventory=Inventory.model_construct(
                nodes=tuple(nodes.values()), switches=request.inventory.switches
            ),
            jobs=jobs,
            policy=policy,
        )
        remaining = max(0.01, deadline - time.perf_counter())
        plan = solve_step(step, remaining / (len(order) - k))
        outcome = plan.result
        outcomes.append(outcome)
        if plan.explain is not None and not all(jr.placed for jr in outcome.jobs):
            unexplained.append((k, plan))
        for job, jr in zip(jobs, _by_job(outcome, jobs), strict=True):
            # (a reason left for later gets its ``why`` then: InOrder.explained)
            results[job.id] = jr if jr.placed or not k else _after_earlier_steps(jr, why)
            if not jr.placed:
                continue
            for name, allocations in held_allocations(job, jr).items():
                node = nodes[name]
                update = {"allocations": (*node.allocations, *allocations)}
                if job.exclusive_nodes:
                    update["schedulable"] = False  # closed to the rest of the batch
                nodes[name] = node.model_copy(update=update)
    result = SolveResult(
        request_id=request.request_id,
        status=_status(outcomes),
        jobs=tuple(results[job.id] for job in request.jobs),
        objectives=(objectives := _objectives(request, outcomes)),
        # The placed-work tiers' largest gap: the other tiers' bounds are the steps' own.
        gap=max((v.gap for v in objectives if is_placed_work(v.name)), default=0.0),
        timings=_timings(outcomes),
        model_size=_size(outcomes),
    )
    return InOrder(result=result, why=why, unexplained=tuple(unexplained))


def _by_job(outcome: SolveResult, jobs: Sequence[Job]) -> list[JobResult]:
    found = {jr.job_id: jr for jr in outcome.jobs}
    return [found[job.id] for job in jobs]


def _after_earlier_steps(jr: JobResult, why: str) -> JobResult:
    """A job left out by its step was judged on what the earlier steps left: say so."""
    if jr.reason is None:
        return jr
    message = f"{jr.reason.message} ({why})"
    return jr.model_copy(
        update={"reason": Reason(code=jr.reason.code, message=message, relaxation=jr.reason.relaxation)}
    )


def _status(outcomes: Sequence[SolveResult]) -> SolveStatus:
    if outcomes and all(o.status == SolveStatus.UNKNOWN for o in outcomes):
        return SolveStatus.UNKNOWN
    return SolveStatus.FEASIBLE if outcomes else SolveStatus.OPTIMAL


def _objectives(request: SolveRequest, outcomes: Sequence[SolveResult]) -> tuple[TierValue, ...]:
    """Each tier summed over the steps (tiers are sums over jobs and nodes), in the steps' order;
    the placed-work tiers are the batch's own (:func:`placed_work_values`: a step's priority levels
    are not the batch's). The other tiers' bounds are the steps' own and say nothing of the batch,
    so no tier but a fully placed placed-work one is optimal."""
    totals: dict[tuple[ObjectiveTier, str], list[float]] = {}
    for outcome in outcomes:
        for v in outcome.objectives:
            # Every placed-work tier of a step stands for the batch's placed-work tiers, put there.
            key = (v.tier, "placed_work") if is_placed_work(v.name) else (v.tier, v.name)
            total = totals.setdefault(key, [0.0, 0.0, 0.0])
            total[0] += v.value
            total[1] += v.bound
            total[2] += v.ms
    out: list[TierValue] = []
    for (tier, name), (value, bound, ms) in totals.items():
        if name == "placed_work":
            levels = placed_work_values(request, outcomes)
            out += [levels[0].model_copy(update={"ms": ms}), *levels[1:]]
        else:
            out.append(TierValue(tier=tier, name=name, ms=ms, value=value, bound=bound, optimal=False))
    return tuple(out)


def placed_work_values(request: SolveRequest, outcomes: Sequence[SolveResult]) -> list[TierValue]:
    """The batch's placed-work tiers (:func:`priority_levels`), valued from the members the steps
    placed and bounded by the work the batch asks, which no plan exceeds."""
    placed = {jr.job_id: jr for outcome in outcomes for jr in outcome.jobs if jr.placed}
    values = []
    for name, levels in priority_levels(request.jobs, request.policy.priority_mode):
        value = asked = 0.0
        for job in request.jobs:
            weight = priority_weight(job.priority) if levels is None else int(job.priority in levels)
            asked += weight * work(job)
            if job.id in placed:
                members = placed[job.id].members
                value += weight * sum(
                    member_work(role.member) * sum(1 for m in members if m.role == role.name)
                    for role in job.roles
                )
        values.append(
            TierValue(
                tier=ObjectiveTier.PLACED_WORK, name=name, value=value, bound=asked, optimal=value >= asked
            )
        )
    return values


def _timings(outcomes: Sequence[SolveResult]) -> tuple[StageTiming, ...]:
    """Each stage's time summed over the steps, as ``step.<stage>``."""
    ms: dict[str, float] = {}
    for outcome in outcomes:
        for t in outcome.timings:
            ms[f"step.{t.stage}"] = ms.get(f"step.{t.stage}", 0.0) + t.ms
    return tuple(StageTiming(stage=stage, ms=v) for stage, v in ms.items())


def _size(outcomes: Sequence[SolveResult]) -> ModelSize:
    """The largest step's model: the steps are solved one after another, never held together."""
    sizes = [o.model_size for o in outcomes]
    return max(sizes, key=lambda s: (s.variables, s.constraints), default=ModelSize())
