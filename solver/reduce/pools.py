"""Pools: single-member jobs that nothing tells apart become one job of many members (a reduction).

A batch from a scheduler is mostly pods: one member each, the same few shapes again and again. The
model does not need to tell two of them apart when they ask for the same member, at the same
priority, with no rule that names a job (locality, NVLink domain, rails, role affinity, exclusive
nodes) and no anti-affinity anywhere in the batch that could match their labels: placing either one
is worth the same on every tier. So each such group becomes one job whose one role has a replica per
pod and a minimum of one — the model then has one set of member variables per pool instead of per
pod (at 1,024 nodes and 200 jobs, about eight times fewer). The jobs tier counts a pool's members,
so "jobs placed" keeps its meaning.

The inverse is on the answer's side, with the other inverses (``solver.answer.unpool``, run after
decode and explain): it hands the pool's placed members to its pods in the batch's order and tells
the others why they were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.domain.cancel import checked
from solver.domain.model import (
    Job,
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
