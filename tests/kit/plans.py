"""A plan in the model's variables as the answer the verifier checks: decoded, handed back pod by
pod, measured, and every job it leaves out given a reason (as the pipeline's explanations do)."""

from __future__ import annotations

from solver.answer.decode import decode
from solver.answer.measures import cluster_metrics
from solver.answer.unpool import unpool
from solver.compile import Compiled
from solver.domain.model import Reason, ReasonCode, SolveRequest, SolveResult, SolveStatus
from solver.reduce.normalise import Normalised
from solver.reduce.pools import Pools


def plan_answer(
    problem: Normalised, compiled: Compiled, request: SolveRequest, plan: dict[str, int]
) -> SolveResult:
    """``plan`` (every variable's value, by name) as an answer to ``request`` (policy chains applied)."""
    decoded = unpool(Pools(problem.pooled_from), request, decode(problem, compiled, plan))
    why = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message="not placed by this plan")
    jobs = tuple(j if j.placed or j.reason else j.model_copy(update={"reason": why}) for j in decoded)
    return SolveResult(
        request_id=request.request_id,
        status=SolveStatus.FEASIBLE,
        jobs=jobs,
        metrics=cluster_metrics(request, jobs),
    )
