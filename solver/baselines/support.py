"""What a baseline family can express, and the answer for a job it cannot: ``UNSUPPORTED``, never a
false ``NO_NODE_FITS`` and never a plan that breaks a rule the baseline does not know; and a
baseline's plan as the answer it gives (:func:`answered`).

A what-if comparison is only fair on the jobs both sides tried: a job a baseline could not express
is reported "unsupported by this policy" and left out of "only the solver placed it"
(``solver.whatif.run``).
"""

from __future__ import annotations

import time

from solver.answer.measures import cluster_metrics
from solver.domain.model import (
    Job,
    JobResult,
    NicMode,
    Reason,
    ReasonCode,
    Requirement,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
)


def answered(request: SolveRequest, jobs: tuple[JobResult, ...], started: float) -> SolveResult:
    """A baseline's plan of ``request`` as its answer: feasible, timed from ``started``
    (``time.perf_counter()``) and measured as every answer is (``cluster_metrics``)."""
    return SolveResult(
        request_id=request.request_id,
        status=SolveStatus.FEASIBLE,
        jobs=jobs,
        timings=(StageTiming(stage="place", ms=(time.perf_counter() - started) * 1000),),
        metrics=cluster_metrics(request, jobs),
    )


def _required(rule: Requirement) -> bool:
    return rule in (Requirement.REQUIRED,)


def job_rules(job: Job) -> list[str]:
    """The job-level rules in words (what neither greedy family checks while it places)."""
    found = []
    if job.anti_affinity:
        found.append("anti-affinity")
    if job.exclusive_nodes:
        found.append("exclusive nodes")
    return found


def sharing_unsupported(job: Job) -> str:
    """Why the GPU-sharing family (FGD's simulator: CPU, memory, GPU models, milli-GPU) cannot place
    ``job``, or ""."""
    found = job_rules(job)
    if _required(job.locality.mode) or any(_required(r.locality.mode) for r in job.roles):
        found.append("a REQUIRED locality rule")
    if _required(job.nvlink_domain):
        found.append("a REQUIRED NVLink domain")
    if _required(job.rail_aligned):
        found.append("rail alignment")
    if any(a.mode in (Requirement.REQUIRED, Requirement.UNSPECIFIED) for a in job.role_affinity):
        found.append("role affinity")
    for role in job.roles:
        shape = role.member
        if shape.nics.mode not in (NicMode.NONE, NicMode.UNSPECIFIED):
            found.append(f"NICs (role {role.name})")
        if _required(shape.numa):
            found.append(f"a REQUIRED NUMA rule (role {role.name})")
        if _required(shape.nvlink) and shape.gpus > 1:
            found.append(f"a REQUIRED NVLink rule (role {role.name})")
        if shape.node_selector:
            found.append(f"a node selector (role {role.name})")
        if shape.gpu_share is not None and not shape.gpu_share.milli:
            found.append(f"a GPU share of memory only (role {role.name})")
    return ", ".join(dict.fromkeys(found))


def topology_unsupported(job: Job) -> str:
    """Why the whole-GPU topology family (Volcano-like, best fit) cannot place ``job``, or ""."""
    found = job_rules(job)
    found += [f"a GPU share (role {r.name})" for r in job.roles if r.member.gpu_share is not None]
    return ", ".join(found)


def unsupported_result(job: Job, policy: str, what: str, why: str) -> JobResult:
    return JobResult(
        job_id=job.id,
        placed=False,
        reason=Reason(
            code=ReasonCode.UNSUPPORTED,
            message=f"unsupported by this policy: the {policy} baseline places {what}; "
            f"the job asks for {why}",
            relaxation="compare it with a policy that knows these rules (the solver does)",
        ),
    )
