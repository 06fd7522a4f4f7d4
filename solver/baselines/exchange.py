"""One placed job given up for several unplaced jobs of its priority: a repair move on a greedy plan.

A greedy order that reaches a large gang early gives it room that several smaller jobs of the same
priority would have filled: as many GPUs at that priority, fewer jobs. At 4,096 nodes x 500 jobs
(seed 1, session 22) the fallback's best order placed a 256-GPU gang where the greedy's best of 11
orders placed a 192-, a 32-, a 24- and an 8-GPU job of that priority instead: 857 GPUs at the top
level either way, 315 jobs against 318. Finding such an order is a lottery over orders, each a full
pass over the batch; undoing one job and placing the unplaced jobs of its priority in its room (and
whatever else is free) costs a pass over a few jobs.

:func:`exchange` tries that for the placed jobs, largest first, and keeps a try only when the whole
plan ranks higher by the caller's ``rank`` (the placed-work tiers level by level, then jobs). Every
other job stays where it is, so no level above or below loses anything. The result is a plan of the
same placer, verified by the caller like any other.

:class:`FloorExchange` brings the move to the model's floor (``solver.search.floor.Portfolio``): a
floor plan decoded to nodes, exchanged, and read back as a floor plan (``solver.search.previous``,
which also places greedily what the exchange left out). At 4,096 nodes x 500 jobs and 5 s the
floor's best shuffle started 317 jobs where the greedy's best order started 318; its first plan
(``largest-first``, 302 jobs at the same GPUs on every priority level) exchanged started 318.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from solver.answer.decode import decode
from solver.answer.unpool import unpool
from solver.baselines.topology import Free, Greedy, Pick, Start, take
from solver.compile import Compiled
from solver.domain.model import (
    Job,
    JobResult,
    MemberPlacement,
    Reason,
    ReasonCode,
    SolveRequest,
)
from solver.reduce.normalise import Normalised
from solver.reduce.pools import Pools
from solver.search.floor import Candidate, Floor
from solver.search.previous import from_previous

Rank = Callable[[tuple[JobResult, ...]], tuple[float, ...]]


def exchange(
    request: SolveRequest,
    start: Start,
    plan: tuple[JobResult, ...],
    placer: Greedy,
    rank: Rank,
    ends: float,
) -> tuple[JobResult, ...]:
    """``plan`` (``placer``'s job results, from ``start``) with placed jobs exchanged, as the module
    docstring says, until no exchange is left or ``ends`` (``time.perf_counter()``) passes; ``plan``
    itself when nothing was exchanged. Not measured (``Greedy.plan``)."""
    jobs = list(plan)
    best = rank(tuple(jobs))
    free = _held(dict(start.free), request, enumerate(jobs))
    gpus = [sum(r.minimum * r.member.gpus for r in job.roles) for job in request.jobs]
    largest_first = lambda k: (-request.jobs[k].priority, -gpus[k], k)  # noqa: E731
    unplaced = sorted((k for k, r in enumerate(jobs) if not r.placed), key=largest_first)
    changed = False
    for j in sorted((j for j, r in enumerate(jobs) if r.placed), key=largest_first):
        if time.perf_counter() >= ends:
            break
        job = request.jobs[j]
        # Its priority's unplaced jobs that its room alone could hold, largest first (to fill it).
        waiting = [k for k in unplaced if request.jobs[k].priority == job.priority and gpus[k] <= gpus[j]]
        if len(waiting) < 2 or sum(gpus[k] for k in waiting) < gpus[j]:
            continue  # nothing it could be exchanged for that would rank higher
        room = {name: f for name, f in free.items() if f.gpus}
        for member in jobs[j].members:  # two members on one node give back both
            room[member.node] = _given_back(room.get(member.node, free[member.node]), job, member)
        # Only the nodes with a GPU free are offered (and measured): a try then costs its few jobs,
        # not the cluster (every node offered, a pass over the placed jobs took 11 s at 4,096 nodes).
        offered = [node for node in request.inventory.nodes if node.name in room]
        others = request.model_copy(
            update={
                "jobs": tuple(request.jobs[k] for k in waiting),
                "inventory": request.inventory.model_copy(update={"nodes": offered}),
            }
        )
        tried = placer.plan(others, ends, start=Start(fabric=start.fabric, free=room))
        moved_in = [(k, r) for k, r in zip(waiting, tried, strict=True) if r.placed]
        if not moved_in:
            continue
        after = list(jobs)
        after[j] = _given_up(jobs[j], placer, len(moved_in))
        for k, result in moved_in:
            after[k] = result
        if (ranked := rank(tuple(after))) > best:
            for member in jobs[j].members:
                free[member.node] = room[member.node]
            free = _held(free, request, moved_in)
            jobs, best, changed = after, ranked, True
            unplaced = sorted((k for k, r in enumerate(jobs) if not r.placed), key=largest_first)
    return tuple(jobs) if changed else plan


def _held(
    free: dict[str, Free], request: SolveRequest, placed: Iterable[tuple[int, JobResult]]
) -> dict[str, Free]:
    """``free`` less what the ``placed`` jobs (index, result) hold: the nodes they use replaced by
    copies without it."""
    for j, result in placed:
        shapes = {role.name: role.member for role in request.jobs[j].roles}
        for member in result.members:
            node = free[member.node].copy()
            gpus = tuple(g for g in node.node.gpus if g.id in member.gpus)
            nics = tuple(n for n in node.node.nics if n.name in member.nics)
            take(node, shapes[member.role], Pick(gpus=gpus, nics=nics, aligned=member.aligned))
            free[member.node] = node
    return free


def _given_back(free: Free, job: Job, member: MemberPlacement) -> Free:
    """A copy of ``free`` with what ``member`` of ``job`` held on it free again, in the node's order."""
    shape = next(role.member for role in job.roles if role.name == member.role)
    back_gpus, back_nics = set(member.gpus), set(member.nics)
    node = free.copy()
    node.gpus = sorted([*node.gpus, *(g for g in free.node.gpus if g.id in back_gpus)], key=lambda g: g.index)
    order = {n.name: k for k, n in enumerate(free.node.nics)}
    back = (n for n in free.node.nics if n.name in back_nics)
    node.nics = sorted([*node.nics, *back], key=lambda n: order[n.name])
    if node.cpu is not None:
        node.cpu += shape.cpu_milli
    if node.memory is not None:
        node.memory += shape.memory_mib
    return node


def _given_up(result: JobResult, placer: Greedy, moved_in: int) -> JobResult:
    return JobResult(
        job_id=result.job_id,
        placed=False,
        reason=Reason(
            code=ReasonCode.OUTPRIORITISED,
            message=f"the {placer.name} baseline gave its room to {moved_in} jobs of its priority",
        ),
    )


@dataclass
class FloorExchange:
    """:func:`exchange` on the plans of one model's floor (module docstring): called with a floor
    plan and a deadline, the plan exchanged and read back into the model's variables, or None when
    the exchange changed nothing before the deadline. ``request``: the request the model was built
    from (policy chains applied, before pooling), on which the exchange places and ranks."""

    problem: Normalised
    compiled: Compiled
    floor: Floor
    request: SolveRequest
    placer: Greedy
    rank: Rank
    _start: Start | None = field(default=None, init=False)

    def __call__(self, candidate: Candidate, ends: float) -> Candidate | None:
        problem, request = self.problem, self.request
        jobs = unpool(Pools(problem.pooled_from), request, decode(problem, self.compiled, candidate.plan))
        if self._start is None:  # the placer's indexes, built once for every plan exchanged
            self._start = Start.of(request.inventory)
        out = exchange(request, self._start, jobs, self.placer, self.rank, ends)
        if out is jobs:
            return None
        ids = [job.id for job in request.jobs]
        back = from_previous(problem, self.compiled, self.floor, out, ids)
        return None if back is None else Candidate(f"{candidate.placer}+exchange", back.plan, back.values)
