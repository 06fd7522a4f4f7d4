"""Answers built by hand for the verifier's tests: members, placed and unplaced jobs, and a result
whose metrics and footprints are counted the test's own way (nothing shared with the solver).
"""

from __future__ import annotations

from collections.abc import Iterable

from solver.domain.fragmentation import FreeCapacity, profile
from solver.domain.model import (
    ClusterMetrics,
    JobResult,
    MemberPlacement,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
)


def member(
    role_name: str,
    index: int,
    node: str,
    gpus: Iterable[str] = (),
    nics: Iterable[str] = (),
    numa: int | None = None,
    aligned: bool = True,
) -> MemberPlacement:
    return MemberPlacement(
        role=role_name, index=index, node=node, gpus=tuple(gpus), nics=tuple(nics), numa=numa, aligned=aligned
    )


def placed(job_id: str, *members: MemberPlacement) -> JobResult:
    return JobResult(job_id=job_id, placed=True, members=members)


def unplaced(job_id: str, reason: Reason | None = None) -> JobResult:
    default = Reason(code=ReasonCode.INSUFFICIENT_CAPACITY, message="the gang does not fit")
    return JobResult(job_id=job_id, placed=False, reason=reason or default)


def metrics_for(req: SolveRequest, jobs: Iterable[JobResult]) -> ClusterMetrics:
    """The metrics the verifier expects, counted the test's own way: schedulable nodes only; a node
    is fully free when no allocation holds one of its GPUs, and stays so if no member lands on it."""
    jobs = list(jobs)
    members = [m for jr in jobs if jr.placed for m in jr.members]
    total = before = free_before = free_after = 0
    for node in req.inventory.nodes:
        if not node.schedulable:
            continue
        ids = {g.id for g in node.gpus}
        held: set[str] = set()
        for alloc in node.allocations:
            held |= set(alloc.gpus) & ids
        total += len(node.gpus)
        before += len(held)
        if not any(alloc.gpus for alloc in node.allocations):
            free_before += 1
            free_after += all(m.node != node.name for m in members)
    frag, stranded = _fragmentation_for(req, jobs)
    return ClusterMetrics(
        gpus_total=total,
        gpus_used_before=before,
        gpus_used_after=before + sum(len(set(m.gpus)) for m in members),
        nodes_fully_free_before=free_before,
        nodes_fully_free_after=free_after,
        fragmentation_before=round(frag[0] / 1000, 3),
        fragmentation_after=round(frag[1] / 1000, 3),
        stranded_gpus_before=stranded[0] / 1000,
        stranded_gpus_after=stranded[1] / 1000,
    )


def _fragmentation_for(req: SolveRequest, jobs: list[JobResult]) -> tuple[list[float], list[int]]:
    """FGD's measure before and after, over the test's own count of each node's free milli-GPU,
    CPU and memory."""
    shapes = {(job.id, r.name): r.member for job in req.jobs for r in job.roles}
    workload = profile(req.policy.workload, shapes.values())
    frag, stranded = [0.0, 0.0], [0, 0]
    for node in req.inventory.nodes:
        if not node.schedulable:
            continue
        free = {g.id: 1000 for g in node.gpus if g.healthy}
        cpu, memory = node.cpu_milli, node.memory_mib
        for alloc in node.allocations:
            cpu, memory = cpu - alloc.cpu_milli, memory - alloc.memory_mib
            for g in alloc.gpus:
                free[g] = 0
            for share in alloc.gpu_shares:
                free[share.gpu] = 0 if alloc.mutex else free.get(share.gpu, 0) - share.milli
        for after in (False, True):
            if after:
                for jr in jobs:
                    for m in jr.members if jr.placed else ():
                        if m.node != node.name:
                            continue
                        shape = shapes.get((jr.job_id, m.role))  # None: an unknown role
                        if shape is not None:
                            cpu, memory = cpu - shape.cpu_milli, memory - shape.memory_mib
                        for g in () if m.gpu_shares else m.gpus:
                            free[g] = 0
                        for share in m.gpu_shares:
                            mutex = shape is not None and shape.mutex
                            free[share.gpu] = 0 if mutex else free.get(share.gpu, 0) - share.milli
            models = {g.id: g.model for g in node.gpus}
            state = FreeCapacity.of(
                ((models[g], max(0, f)) for g, f in free.items() if g in models),
                cpu if node.cpu_milli else None,
                memory if node.memory_mib else None,
            )
            f, s = workload.measure(state)
            frag[after] += f
            stranded[after] += s
    return frag, stranded


def with_footprint(req: SolveRequest, jr: JobResult) -> JobResult:
    """The job's reported footprint, counted the test's own way: leaves, NVLink domains, rails of
    the NICs used, and the tier of the lowest switch above every node (0 for one node)."""
    if not jr.placed:
        return jr
    nodes = {n.name: n for n in req.inventory.nodes}
    used = [nodes[m.node] for m in jr.members if m.node in nodes]
    parents = {s.id: (s.parent, s.tier) for s in req.inventory.switches}

    def above(leaf: str) -> dict[str, int]:
        out = {}
        while leaf in parents and leaf not in out:
            out[leaf] = parents[leaf][1]
            leaf = parents[leaf][0]
        return out

    tier = 0
    if len({n.name for n in used}) > 1:
        shared = set.intersection(*(set(above(n.leaf).items()) for n in used))
        tier = min((t for _, t in shared), default=0)
    rails = sorted(
        {
            nic.rail
            for m in jr.members
            if m.node in nodes
            for nic in nodes[m.node].nics
            if nic.name in m.nics and nic.rail is not None
        }
    )
    return jr.model_copy(
        update={
            "locality_tier": tier,
            "leaves_spanned": len({n.leaf for n in used if n.leaf}),
            "nvlink_domains_spanned": len({n.nvlink_domain for n in used if n.nvlink_domain}),
            "rails": tuple(rails),
        }
    )


def result(req: SolveRequest, *jobs: JobResult) -> SolveResult:
    """A result with the given job answers, and metrics and footprints consistent with them."""
    jobs = tuple(with_footprint(req, jr) for jr in jobs)
    return SolveResult(status=SolveStatus.OPTIMAL, jobs=jobs, metrics=metrics_for(req, jobs))
