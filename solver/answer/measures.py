"""Cluster measures of a plan: GPUs used, nodes fully free, stranded GPUs and fragmentation, before
and after — what every answer reports, whoever placed it (the solver or a baseline).

The measures themselves (FGD's expected fragmentation, stranded capacity) are defined in
``solver.domain.fragmentation``; this module applies them to a request and its placements.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from solver.domain.fragmentation import FreeCapacity, Profile, profile
from solver.domain.model import ClusterMetrics, JobResult, MemberPlacement, MemberShape, Node, SolveRequest
from solver.domain.nodefold import NodeMemo, fold_for


def cluster_metrics(request: SolveRequest, jobs: Sequence[JobResult]) -> ClusterMetrics:
    """GPU counts before and after the plan, over the schedulable nodes (cordoned nodes are not
    capacity). GPUs used are GPUs held whole; a node is fully free when none of its GPUs is held
    whole. Fragmentation and stranded GPUs (in GPUs) are measured against the workload profile;
    only the nodes the plan touches change, so only they are measured twice."""
    placed = sum(len(m.gpus) for j in jobs for m in j.members if not m.gpu_shares)  # whole GPUs only
    workload, members_on = measured_against(request, jobs)

    def measured(node: Node) -> tuple[NodeUse, tuple[float, int]] | None:
        if not node.schedulable:
            return None
        use = node_use(node)
        return use, workload.measure(use.free)

    # One pass, every total at once: on a big cluster this loop is a good part of a lone pod's solve.
    total = used = free = free_after = stranded_before = stranded_after = 0
    fragmentation_before = fragmentation_after = 0.0
    for value in fold_for(("metrics", workload.typicals), measured)(request.inventory.nodes):
        if value is None:
            continue
        use, (fragmentation, stranded) = value
        total, used, free = total + use.gpus, used + use.used, free + use.fully_free
        fragmentation_before, stranded_before = (
            fragmentation_before + fragmentation,
            stranded_before + stranded,
        )
        landing = members_on.get(use.node.name)
        if landing:
            fragmentation, stranded = workload.measure(free_capacity(use.node, landing))
        else:
            free_after += use.fully_free
        fragmentation_after, stranded_after = fragmentation_after + fragmentation, stranded_after + stranded
    return ClusterMetrics(
        gpus_total=total,
        gpus_used_before=used,
        gpus_used_after=used + placed,
        nodes_fully_free_before=free,
        nodes_fully_free_after=free_after,
        stranded_gpus_before=stranded_before / 1000,
        stranded_gpus_after=stranded_after / 1000,
        fragmentation_before=round(fragmentation_before / 1000, 3),
        fragmentation_after=round(fragmentation_after / 1000, 3),
    )


def measure_nodes(request: SolveRequest) -> None:
    """Every node of ``request`` measured now and remembered per node object, as
    :func:`cluster_metrics` does, so that measuring a plan of ``request`` later walks only the nodes
    it touches: an answer due by a deadline pays the nodes never measured before (0.1 s at 4,096
    nodes, idle) before it sets its placer's time, not in the time it keeps for answering."""
    cluster_metrics(request, ())


def measured_against(
    request: SolveRequest, jobs: Sequence[JobResult]
) -> tuple[Profile, dict[str, list[tuple[MemberPlacement, MemberShape]]]]:
    """The workload profile a plan is measured against, and the members it puts on each node."""
    workload = profile(request.policy.workload, (r.member for job in request.jobs for r in job.roles))
    shapes = {(job.id, r.name): r.member for job in request.jobs for r in job.roles}
    members_on: dict[str, list[tuple[MemberPlacement, MemberShape]]] = defaultdict(list)
    for j in jobs:
        for m in j.members:
            members_on[m.node].append((m, shapes[j.job_id, m.role]))
    return workload, members_on


def fragmentation_change(request: SolveRequest, jobs: Sequence[JobResult]) -> float:
    """How much the plan adds to fragmentation (in milli-GPU, unrounded), summed over the nodes it
    touches only: what ranks two plans of one request, which differ nowhere else. The reported
    totals are rounded to a milli-GPU over every node, so what the untouched nodes add could flip
    a near-tie between two plans (a replay's window held more or fewer untouched nodes)."""
    workload, members_on = measured_against(request, jobs)
    change = 0.0
    for node in request.inventory.nodes:  # in inventory order, so equal plans sum alike
        landing = members_on.get(node.name)
        if landing and node.schedulable:
            before, _ = workload.measure(node_use(node).free)
            after, _ = workload.measure(free_capacity(node, landing))
            change += after - before
    return change


@dataclass(frozen=True)
class NodeUse:
    """What the metrics need of one node as the inventory has it."""

    node: Node
    gpus: int
    used: int  # GPUs held whole
    fully_free: bool  # no GPU held whole
    free: FreeCapacity


_USE: NodeMemo[NodeUse] = NodeMemo("measures.use")


def node_use(node: Node) -> NodeUse:
    """:class:`NodeUse`, remembered per node object: the wire layer hands back the same Node for an
    unchanged node, so a scheduler's steady inventory is measured once."""
    hit = _USE.get(node)
    if hit is not None:
        return hit
    held = {g for a in node.allocations for g in a.gpus}
    return _USE.put(node, NodeUse(node, len(node.gpus), len(held), not held, free_capacity(node)))


def free_capacity(node: Node, members: Sequence[tuple[MemberPlacement, MemberShape]] = ()) -> FreeCapacity:
    """What is left of ``node`` after its allocations and ``members``: free milli of each healthy GPU
    (a mutex share holds its GPU whole), free CPU and memory where the node tracks them."""
    free = {g.id: 1000 for g in node.gpus if g.healthy}
    taken = [(g, 1000) for a in node.allocations for g in a.gpus]
    taken += [(s.gpu, 1000 if a.mutex else s.milli) for a in node.allocations for s in a.gpu_shares]
    for m, shape in members:
        # A mutex member holds its GPU whole, whatever part of it it asked for.
        taken += [(s.gpu, 1000 if shape.mutex else s.milli) for s in m.gpu_shares] or [
            (g, 1000) for g in m.gpus
        ]
    for gpu, milli in taken:
        if gpu in free:
            free[gpu] = max(0, free[gpu] - milli)
    cpu = memory = None
    if node.cpu_milli:
        cpu = (
            node.cpu_milli - sum(a.cpu_milli for a in node.allocations) - sum(s.cpu_milli for _, s in members)
        )
    if node.memory_mib:
        memory = (
            node.memory_mib
            - sum(a.memory_mib for a in node.allocations)
            - sum(s.memory_mib for _, s in members)
        )
    model = {g.id: g.model for g in node.gpus}
    return FreeCapacity.of(((model[g], f) for g, f in free.items()), cpu, memory)
