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

import time
from contextlib import AbstractContextManager
from typing import Protocol

from solver.answer.verify import verify
from solver.baselines import volcano
from solver.baselines.topology import Greedy, first_aligned_pick
from solver.compile.cost import Estimate
from solver.compile.objective import member_work, priority_levels, priority_weight
from solver.domain.errors import VerificationFailed
from solver.domain.model import (
    JobResult,
    ModelSize,
    ObjectiveTier,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
    TierValue,
)


class Clock(Protocol):
    """How the pipeline times its stages (``solver.solve.Stopwatch``)."""

    stages: list[StageTiming]

    def stage(self, name: str) -> AbstractContextManager[None]: ...


# The placer's indexes of free devices and of the fabric, built before it places anything: 0.08 s
# at 4,096 nodes (the development machine of solver.compile.cost, idle, caches warm).
PLACER_SETUP_S_PER_NODE = 2e-5
# What this answer needs after the placer's deadline: the job in hand when it passes (the placer
# looks at the clock per member and per domain, but a job's domains are summed over every node),
# the placer's measures, the tiers and the verifier: 0.03 s at 1,024 nodes; at 16,384 the verifier
# alone took 0.1-0.18 s and the whole 0.35 s (same machine). Not solver.compile.cost's answer
# estimate: there is no decode, explain or model here, and at 16,384 nodes that estimate (1.3 s)
# left a 5 s call's greedy a quarter of its time unused; 1.2e-5 s a node (0.2 s) answered 0.1 s late.
ANSWER_S, ANSWER_S_PER_NODE = 0.05, 4e-5

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
    estimate: Estimate,
    model_size: ModelSize | None = None,
) -> SolveResult:
    """``request`` (validated, policy chains applied) placed by :data:`FIRST_FIT` before
    ``deadline`` (``time.perf_counter()``) less the time its answer needs, verified, timed on
    ``clock``; see the module docstring."""
    why = estimate.why(deadline - time.perf_counter())
    with clock.stage("fallback"):
        nodes = len(request.inventory.nodes)
        ends = deadline - max(ANSWER_S, ANSWER_S_PER_NODE * nodes)
        if ends - time.perf_counter() < PLACER_SETUP_S_PER_NODE * nodes:
            ends = 0.0  # no time even for the placer's indexes: it hands back every job untried
        greedy = FIRST_FIT.place(request, ends)
        jobs = tuple(job if job.placed else _unplaced(job, why) for job in greedy.jobs)
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
            metrics=greedy.metrics,
            plan_source=f"unsearched:{FIRST_FIT.name}",
        )
    with clock.stage("verify"):
        violations = verify(request, result)
    if violations:
        raise VerificationFailed(violations)
    return result.model_copy(update={"timings": tuple(clock.stages)})


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
        out.append(_tier("placed_work.jobs", len(placed), len(request.jobs)))
    return tuple(out)


def _tier(name: str, value: int, bound: int) -> TierValue:
    return TierValue(
        tier=ObjectiveTier.PLACED_WORK,
        name=name,
        value=float(value),
        bound=float(bound),
        optimal=value >= bound,
    )
