"""Decode: the class-level answer back to concrete nodes, GPUs and NICs (the reductions inverted).

Nodes of a class take the chosen configurations in name order; each configuration's witness slots
are mapped through the node's own canonical-index → device-id table; members of each role fill the
slots of their shape, strict members into strict slots first. Flags in the result (``aligned``,
``numa``) are computed from the devices actually chosen, so they are true whatever the model said.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from solver.compile import Compiled
from solver.compile.locality import NVLINK, Rule, locality_rules
from solver.fabric import Fabric
from solver.fragmentation import FreeCapacity, profile
from solver.intranode import Slot
from solver.model import (
    ClusterMetrics,
    GpuShare,
    JobResult,
    MemberPlacement,
    MemberShape,
    NicMode,
    Node,
    Requirement,
    SolveRequest,
)
from solver.nodefold import fold_for
from solver.normalise import ConcreteNode, NodeShape, Normalised, alignment_distance, nic_demand


def decode(problem: Normalised, compiled: Compiled, solution: dict[str, int] | None) -> tuple[JobResult, ...]:
    """One ``JobResult`` per job in request order; unplaced jobs carry no reason yet (see explain)."""
    members: dict[int, list[MemberPlacement]] = defaultdict(list)  # by role index
    if solution is not None:
        for cls in problem.classes:
            slots = _class_slots(cls.index, problem, compiled, solution)
            _fill(cls.index, cls.shape, slots, problem, compiled, solution, members)
    results = []
    nodes = {n.name: n for n in problem.request.inventory.nodes}
    fabric = Fabric.of(problem.request.inventory)
    rules = locality_rules(problem)
    for j, job in enumerate(problem.request.jobs):
        placed = solution is not None and solution.get(compiled.placed[j].name, 0) == 1
        job_members: list[MemberPlacement] = []
        if placed:
            for r, ref in enumerate(problem.roles):
                if ref.job_index == j:
                    job_members.extend(members[r])
        results.append(
            JobResult(
                job_id=job.id,
                placed=placed,
                members=tuple(job_members),
                **where(problem, j, job_members, nodes, fabric, rules),
            )
        )
    return tuple(results)


def where(
    problem: Normalised,
    j: int,
    members: Sequence[MemberPlacement],
    nodes: dict[str, Node],
    fabric: Fabric,
    rules: Sequence[Rule],
) -> dict[str, object]:
    """The job's footprint for the result: tier reached, leaves, NVLink domains, rails, and whether
    every PREFERRED locality rule held too."""
    if not members:
        return {}
    used = [nodes[m.node] for m in members]
    names = {n.name for n in used}
    leaves = {n.leaf for n in used if n.leaf}
    tier = 0 if len(names) == 1 else (fabric.common_tier(n.leaf for n in used) or 0)
    rails = {
        nic.rail for m in members for nic in nodes[m.node].nics if nic.name in m.nics and nic.rail is not None
    }
    return {
        "locality_tier": tier,
        "leaves_spanned": len(leaves),
        "nvlink_domains_spanned": len({n.nvlink_domain for n in used if n.nvlink_domain}),
        "rails": tuple(sorted(rails)),
        "rules_held": preferred_rules_held(problem, j, members, nodes, fabric, rules),
    }


def preferred_rules_held(
    problem: Normalised,
    j: int,
    members: Sequence[MemberPlacement],
    nodes: dict[str, Node],
    fabric: Fabric,
    rules: Sequence[Rule],
) -> bool:
    """Did the job's PREFERRED rules of place hold: locality with a tier, NVLink domains, rails?"""
    if problem.request.jobs[j].rail_aligned == Requirement.PREFERRED and not one_rail_set_per_role(
        members, nodes
    ):
        return False
    for rule in rules:
        if rule.job != j or rule.mode != Requirement.PREFERRED:
            continue
        role_names = {problem.roles[r].role.name for r in rule.roles}
        used = {m.node for m in members if m.role in role_names}
        if rule.partition == NVLINK:
            if len({nodes[n].nvlink_domain for n in used}) > 1 or any(
                not nodes[n].nvlink_domain for n in used
            ):
                return False
        elif rule.highest_tier and len(used) > 1:
            tier = fabric.common_tier(nodes[n].leaf for n in used)
            if tier is None or tier > rule.highest_tier:
                return False
    return True


def _class_slots(
    c: int, problem: Normalised, compiled: Compiled, solution: dict[str, int]
) -> dict[int, list[tuple[ConcreteNode, Slot]]]:
    """Every open slot of class ``c``, by shape: strict slots first, then in node order."""
    cls = problem.classes[c]
    nodes = iter(cls.nodes)
    by_shape: dict[int, list[tuple[ConcreteNode, Slot]]] = defaultdict(list)
    for k, config in enumerate(compiled.configs[c]):
        var = compiled.x.get((c, k))
        for _ in range(solution.get(var.name, 0) if var is not None else 0):
            node = next(nodes)
            for slot in config.slots:
                by_shape[slot.shape].append((node, slot))
    for shape in by_shape:
        by_shape[shape].sort(key=lambda ns: not ns[1].strict)  # stable: node order kept
    return by_shape


def _fill(
    c: int,
    shape: NodeShape,
    slots: dict[int, list[tuple[ConcreteNode, Slot]]],
    problem: Normalised,
    compiled: Compiled,
    solution: dict[str, int],
    members: dict[int, list[MemberPlacement]],
) -> None:
    """Hand the class's slots to the roles: each role's strict members take strict slots first."""
    for shape_index, open_slots in slots.items():
        roles = [
            r for r, ref in enumerate(problem.roles) if ref.shape == shape_index and (r, c) in compiled.y
        ]
        wants = {r: solution[compiled.y[r, c].name] for r in roles}
        strict = {r: solution[compiled.s[r, c].name] if (r, c) in compiled.s else 0 for r in roles}
        strict_slots = [ns for ns in open_slots if ns[1].strict]
        other_slots = [ns for ns in open_slots if not ns[1].strict]
        for r in roles:
            take = strict_slots[: strict[r]]
            del strict_slots[: strict[r]]
            for ns in take:
                members[r].append(_placement(problem, r, shape, *ns, index=len(members[r])))
        rest = other_slots + strict_slots
        for r in roles:
            n = wants[r] - strict[r]
            take = rest[:n]
            del rest[:n]
            for ns in take:
                members[r].append(_placement(problem, r, shape, *ns, index=len(members[r])))


def _placement(
    problem: Normalised, r: int, shape: NodeShape, node: ConcreteNode, slot: Slot, *, index: int
) -> MemberPlacement:
    member = problem.roles[r].role.member
    numas = {node.gpu_numa[g] for g in slot.gpus} | {node.nic_numa[n] for n in slot.nics}
    return MemberPlacement(
        role=problem.roles[r].role.name,
        index=index,
        node=node.name,
        gpus=tuple(sorted((node.gpu_ids[g] for g in slot.gpus), key=node.rank.__getitem__)),
        nics=tuple(sorted((node.nic_names[n] for n in slot.nics), key=node.rank.__getitem__)),
        numa=next(iter(numas)) if len(numas) == 1 and None not in numas else None,
        aligned=is_aligned(shape, member, slot.gpus, slot.nics),
        gpu_shares=tuple(
            GpuShare(gpu=node.gpu_ids[g], milli=slot.share[0], memory_mib=slot.share[1])
            for g in slot.gpus
            if slot.share is not None
        ),
    )


def is_aligned(shape: NodeShape, member: MemberShape, gpus: Sequence[int], nics: Sequence[int]) -> bool:
    """Is every GPU↔NIC pair of the member at its asked distance or closer?"""
    if nic_demand(member) == 0 or not gpus:
        return True
    limit = int(alignment_distance(member))
    if member.nics.mode == NicMode.PER_MEMBER:
        return all(min(shape.nic_distance(g, n) for g in gpus) <= limit for n in nics)
    owner: dict[int, int] = {}

    def augment(g: int, seen: set[int]) -> bool:
        for n in nics:
            if n in seen or shape.nic_distance(g, n) > limit:
                continue
            seen.add(n)
            if n not in owner or augment(owner[n], seen):
                owner[n] = g
                return True
        return False

    return all(augment(g, set()) for g in gpus)


def cluster_metrics(request: SolveRequest, jobs: Sequence[JobResult]) -> ClusterMetrics:
    """GPU counts before and after the plan, over the schedulable nodes (cordoned nodes are not
    capacity). GPUs used are GPUs held whole; a node is fully free when none of its GPUs is held
    whole. Fragmentation and stranded GPUs (in GPUs) are measured against the workload profile;
    only the nodes the plan touches change, so only they are measured twice."""
    placed = sum(len(m.gpus) for j in jobs for m in j.members if not m.gpu_shares)  # whole GPUs only
    workload = profile(request.policy.workload, (r.member for job in request.jobs for r in job.roles))
    shapes = {(job.id, r.name): r.member for job in request.jobs for r in job.roles}
    members_on: dict[str, list[tuple[MemberPlacement, MemberShape]]] = defaultdict(list)
    for j in jobs:
        for m in j.members:
            members_on[m.node].append((m, shapes[j.job_id, m.role]))

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


@dataclass(frozen=True)
class NodeUse:
    """What the metrics need of one node as the inventory has it."""

    node: Node
    gpus: int
    used: int  # GPUs held whole
    fully_free: bool  # no GPU held whole
    free: FreeCapacity


_USE: dict[int, NodeUse] = {}


def node_use(node: Node) -> NodeUse:
    """:class:`NodeUse`, remembered per node object: the wire layer hands back the same Node for an
    unchanged node, so a scheduler's steady inventory is measured once."""
    hit = _USE.get(id(node))
    if hit is not None and hit.node is node:
        return hit
    held = {g for a in node.allocations for g in a.gpus}
    use = NodeUse(node, len(node.gpus), len(held), not held, free_capacity(node))
    if len(_USE) >= 65_536:
        _USE.clear()
    _USE[id(node)] = use
    return use


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


def one_rail_set_per_role(members: Sequence[MemberPlacement], nodes: dict[str, Node]) -> bool:
    """Do all members of each role use NICs on the same rails?"""
    seen: dict[str, frozenset] = {}
    for m in members:
        rails = frozenset(nic.rail for nic in nodes[m.node].nics if nic.name in m.nics)
        if seen.setdefault(m.role, rails) != rails:
            return False
    return True
