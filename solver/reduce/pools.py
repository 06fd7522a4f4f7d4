"""Pools: single-member jobs that nothing tells apart become one job of many members (a reduction).

A batch from a scheduler is mostly pods: one member each, the same few shapes again and again. The
model does not need to tell two of them apart when they ask for the same member, at the same
priority, with no rule that names a job (locality, NVLink domain, rails, role affinity, exclusive
nodes) and no anti-affinity anywhere in the batch that could match their labels: placing either one
is worth the same on every tier. So each such group becomes one job whose one role has a replica per
pod and a minimum of one — the model then has one set of member variables per pool instead of per
pod (at 1,024 nodes and 200 jobs, about eight times fewer). The jobs tier counts a pool's members,
so "jobs placed" keeps its meaning.

The inverse (:func:`unpool`, run on the answer after decode and explain) hands the pool's placed
members to its pods in the batch's order and tells the others why they were left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.domain.cancel import checked
from solver.domain.model import (
    Job,
    JobResult,
    MemberPlacement,
    Node,
    Reason,
    ReasonCode,
    Requirement,
    Role,
    SolveRequest,
)


@dataclass(frozen=True)
class Pools:
    """The inverse data: for each job of the pooled request, the indexes of the batch jobs it stands
    for (one for a job left as it was), in the batch's order."""

    members_of: tuple[tuple[int, ...], ...]

    def pooled(self, j: int) -> bool:
        """Does job ``j`` of the pooled request stand for a pool (rather than one batch job)?"""
        return len(self.members_of[j]) > 1


def poolable(job: Job) -> bool:
    """A pod nothing but its shape and priority tells apart from others."""
    if len(job.roles) != 1 or job.roles[0].replicas != 1:
        return False
    role = job.roles[0]
    return (
        role.locality.mode == Requirement.NONE
        and job.locality.mode == Requirement.NONE
        and job.nvlink_domain == Requirement.NONE
        and job.rail_aligned == Requirement.NONE
        and not job.role_affinity
        and not job.anti_affinity
        and not job.exclusive_nodes
    )


def pool(request: SolveRequest) -> tuple[SolveRequest, Pools]:
    """The request with its interchangeable pods pooled, and the data to invert it. A batch with
    anti-affinity rules is left as it is: a rule may match some pods' labels and not others'."""
    jobs = request.jobs
    identity = Pools(tuple((j,) for j in range(len(jobs))))
    if any(job.anti_affinity for job in jobs):
        return request, identity
    groups: dict[tuple[int, str], list[int]] = {}
    for j, job in enumerate(checked(jobs)):  # a JSON dump per pod: seconds for 10,000 (cancel.checked)
        if poolable(job):
            key = (job.priority, job.roles[0].member.model_dump_json())
            groups.setdefault(key, []).append(j)
    if all(len(g) < 2 for g in groups.values()):
        return request, identity
    first = {g[0]: g for g in groups.values() if len(g) > 1}
    pooled_away = {j for g in first.values() for j in g[1:]}
    out_jobs: list[Job] = []
    members_of: list[tuple[int, ...]] = []
    for j, job in enumerate(checked(jobs)):
        if j in pooled_away:
            continue
        if j in first:
            group = first[j]
            role = job.roles[0]
            out_jobs.append(
                Job(
                    id=f"{job.id} (pool of {len(group)})",
                    priority=job.priority,
                    roles=(Role(name=role.name, replicas=len(group), min_replicas=1, member=role.member),),
                )
            )
            members_of.append(tuple(group))
        else:
            out_jobs.append(job)
            members_of.append((j,))
    return request.model_copy(update={"jobs": tuple(out_jobs)}), Pools(tuple(members_of))


def unpool(pools: Pools, request: SolveRequest, jobs: Sequence[JobResult]) -> tuple[JobResult, ...]:
    """The pooling inverted: results per job of ``request`` (the batch before pooling), in its
    order. A pool's placed members go to its pods in the batch's order, one each; the pods left over
    are told how many of their kind were placed; a pool placed not at all passes its reason to each."""
    if all(len(m) == 1 for m in pools.members_of):
        return tuple(jobs)
    nodes = {n.name: n for n in request.inventory.nodes}
    out: dict[int, JobResult] = {}
    for result, batch in zip(jobs, pools.members_of, strict=True):
        if len(batch) == 1:
            out[batch[0]] = result
            continue
        members = sorted(result.members, key=lambda m: m.index) if result.placed else []
        for k, b in enumerate(batch):
            job = request.jobs[b]
            if k < len(members):
                member = members[k].model_copy(update={"role": job.roles[0].name, "index": 0})
                out[b] = _pod_placed(job, member, nodes[member.node])
            elif result.placed:
                message = (
                    f"{len(members)} of the batch's {len(batch)} pods of this shape and priority "
                    f"({job.roles[0].member.gpus} GPU(s)) were placed; the room left holds no more"
                )
                reason = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message=message)
                out[b] = JobResult(job_id=job.id, placed=False, reason=reason)
            else:
                out[b] = JobResult(job_id=job.id, placed=False, reason=result.reason)
    return tuple(out[b] for b in range(len(request.jobs)))


def _pod_placed(job: Job, member: MemberPlacement, node: Node) -> JobResult:
    """A pod's result: one member on one node, so its footprint is that node's (no rule of place
    can name a pooled pod)."""
    rails = sorted({n.rail for n in node.nics if n.name in member.nics and n.rail is not None})
    return JobResult(
        job_id=job.id,
        placed=True,
        members=(member,),
        locality_tier=0,
        leaves_spanned=1 if node.leaf else 0,
        nvlink_domains_spanned=1 if node.nvlink_domain else 0,
        rails=tuple(rails),
    )
