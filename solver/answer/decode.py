"""Decode: the class-level answer back to concrete nodes, GPUs and NICs (the reductions inverted).

Nodes of a class take the chosen configurations in name order; each configuration's witness slots
are mapped through the node's own canonical-index → device-id table; members of each role fill the
slots of their shape, strict members into strict slots first. Flags in the result (``aligned``,
``numa``) are computed from the devices actually chosen, so they are true whatever the model said.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TypedDict

from solver.compile import Compiled
from solver.compile.locality import NVLINK, Rule, locality_rules
from solver.domain.cancel import checked
from solver.domain.fabric import Fabric
from solver.domain.model import (
    Distance,
    GpuNicPair,
    GpuShare,
    Job,
    JobResult,
    MemberPlacement,
    MemberShape,
    NicMode,
    Node,
    Requirement,
    Role,
)
from solver.reduce.intranode import Slot
from solver.reduce.normalise import ConcreteNode, NodeShape, Normalised, alignment_distance, nic_demand
from solver.search.gang import Seat


def decode(problem: Normalised, compiled: Compiled, solution: dict[str, int] | None) -> tuple[JobResult, ...]:
    """One ``JobResult`` per job in request order; unplaced jobs carry no reason yet (see explain)."""
    members: dict[int, list[MemberPlacement]] = defaultdict(list)  # by role index
    if solution is not None:
        # checked: a cancelled or expired call stops here within one class (solver.domain.cancel);
        # decoding 16,384 nodes' classes takes a good part of a second.
        for cls in checked(problem.classes):
            slots = _class_slots(cls.index, problem, compiled, solution)
            _fill(cls.index, cls.shape, slots, problem, compiled, solution, members)
    results = []
    nodes = {n.name: n for n in problem.request.inventory.nodes}
    fabric = Fabric.of(problem.request.inventory)
    rules = locality_rules(problem)
    for j, job in checked(enumerate(problem.request.jobs)):
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


def one_member(
    job_id: str, role: Role, node: Node, shape: NodeShape, concrete: ConcreteNode, slot: Slot
) -> JobResult:
    """The result of a job of one member placed in ``slot`` of ``node`` (``solver.search.single``):
    one node, so no tier crossed and no rule of place to hold."""
    placed = placement(role, shape, concrete, slot, index=0)
    rails = {nic.rail for nic in node.nics if nic.name in placed.nics and nic.rail is not None}
    return JobResult(
        job_id=job_id,
        placed=True,
        members=(placed,),
        locality_tier=0,
        leaves_spanned=1 if node.leaf else 0,
        nvlink_domains_spanned=1 if node.nvlink_domain else 0,
        rails=tuple(sorted(rails)),
        rules_held=True,
    )


def seated_gang(job: Job, seats: Sequence[Seat], fabric: Fabric) -> JobResult:
    """The result of a gang placed a member a seat (``solver.search.gang``): members in the nodes'
    rank order, its footprint as :func:`where` reports a model's gang; its one rule of place, if
    any, is a PREFERRED job locality, held when the gang's nodes share a switch at its tier."""
    role = job.roles[0]
    members = tuple(placement(role, s.shape, s.concrete, s.slot, index=i) for i, s in enumerate(seats))
    found = footprint(members, {s.node.name: s.node for s in seats}, fabric)
    limit = job.locality.highest_tier if job.locality.mode == Requirement.PREFERRED else 0
    tier = found["locality_tier"]  # distinct nodes: 0 when they share no switch
    held = not limit or 0 < tier <= limit
    return JobResult(job_id=job.id, placed=True, members=members, **found, rules_held=held)


def where(
    problem: Normalised,
    j: int,
    members: Sequence[MemberPlacement],
    nodes: dict[str, Node],
    fabric: Fabric,
    rules: Sequence[Rule],
) -> dict[str, object]:
    """The job's footprint for the result (:func:`footprint`), and whether every PREFERRED locality
    rule held too."""
    if not members:
        return {}
    return {
        **footprint(members, nodes, fabric),
        "rules_held": preferred_rules_held(problem, j, members, nodes, fabric, rules),
    }


class Footprint(TypedDict):
    """A placed job's footprint fields of ``JobResult``."""

    locality_tier: int
    leaves_spanned: int
    nvlink_domains_spanned: int
    rails: tuple[int, ...]


def footprint(members: Sequence[MemberPlacement], nodes: dict[str, Node], fabric: Fabric) -> Footprint:
    """Where a placed job's ``members`` sit: the tier of the lowest switch above all their nodes (0 on
    one node, or when they share none), the leaves and NVLink domains they span, the rails of their
    NICs."""
    used = [nodes[m.node] for m in members]
    names = {n.name for n in used}
    leaves = {n.leaf for n in used if n.leaf}
    tier = 0 if len(names) == 1 else (fabric.common_tier(n.leaf for n in used) or 0)
    rails = {
        nic.rail for m in members for nic in nodes[m.node].nics if nic.name in m.nics and nic.rail is not None
    }
    return Footprint(
        locality_tier=tier,
        leaves_spanned=len(leaves),
        nvlink_domains_spanned=len({n.nvlink_domain for n in used if n.nvlink_domain}),
        rails=tuple(sorted(rails)),
    )


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
    taken = _canonical(c, compiled, solution)
    for k, config in enumerate(compiled.configs[c]):
        for _ in range(taken.get(k, 0)):
            node = next(nodes)
            for slot in config.slots:
                by_shape[slot.shape].append((node, slot))
    for shape in by_shape:
        by_shape[shape].sort(key=lambda ns: not ns[1].strict)  # stable: node order kept
    return by_shape


def _canonical(c: int, compiled: Compiled, solution: dict[str, int]) -> dict[int, int]:
    """Nodes of class ``c`` per configuration, each node that took a lone share's other GPU
    (``Configuration.elsewhere``) moved to the first configuration of its count that every tier
    values alike: of GPUs the objective cannot tell apart, the fullest, as the enumerator
    (``solver.search.single``) and every best-fit placer choose. The model's own pick among equals
    is the search's accident; the plan should not depend on it."""
    configs = compiled.configs[c]
    taken = {k: solution.get(compiled.x[c, k].name, 0) for k in range(len(configs)) if (c, k) in compiled.x}
    moved = [k for k, n in taken.items() if n and configs[k].elsewhere]
    if not moved:
        return taken
    weights = [dict(zip(*tier.flat[:2], strict=True)) for tier in compiled.tiers]

    def valued(k: int) -> tuple[int, ...]:
        index = compiled.x[c, k].index
        return tuple(w.get(index, 0) for w in weights)

    for k in moved:
        first = k
        while configs[first].elsewhere:  # a witness stands right before its alternatives
            first -= 1
        alike = next(j for j in range(first, k + 1) if (c, j) in compiled.x and valued(j) == valued(k))
        taken[alike] += taken.pop(k) if alike != k else 0
    return taken


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
    return placement(problem.roles[r].role, shape, node, slot, index=index)


def placement(role: Role, shape: NodeShape, node: ConcreteNode, slot: Slot, *, index: int) -> MemberPlacement:
    """The member of ``role`` in ``slot`` of ``node``: its devices by id, in the node's own order."""
    member = role.member
    numas = {node.gpu_numa[g] for g in slot.gpus} | {node.nic_numa[n] for n in slot.nics}
    return MemberPlacement(
        role=role.name,
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
        pairs=tuple(
            sorted(
                (
                    GpuNicPair(
                        gpu=node.gpu_ids[g],
                        nic=node.nic_names[n],
                        distance=Distance(shape.nic_distance(g, n)),
                    )
                    for g, n in gpu_nic_pairs(shape, member, slot.gpus, slot.nics)
                ),
                key=lambda pair: (node.rank[pair.gpu], node.rank[pair.nic]),  # the node's own order
            )
        ),
    )


def gpu_nic_pairs(
    shape: NodeShape, member: MemberShape, gpus: Sequence[int], nics: Sequence[int]
) -> list[tuple[int, int]]:
    """Which NIC serves which GPU, in GPU order. A NIC per GPU: the one-to-one matching whose farthest
    pair is nearest (the asked distance when the member is aligned); NICs per member: each NIC with
    its nearest GPU."""
    if not gpus or not nics:
        return []
    if member.nics.mode != NicMode.PER_GPU or len(gpus) != len(nics):
        nearest = [(min(gpus, key=lambda g, n=n: (shape.nic_distance(g, n), g)), n) for n in nics]
        return sorted(nearest)
    for limit in sorted({shape.nic_distance(g, n) for g in gpus for n in nics}):
        owner: dict[int, int] = {}  # NIC → GPU

        def claim(g: int, seen: set[int], limit: int = limit, owner: dict[int, int] = owner) -> bool:
            # Nearest NICs first, and a free one before taking another GPU's: ties keep the plain
            # order (GPU k with the k-th NIC of its switch) rather than a swapped one.
            near = [n for n in sorted(nics, key=lambda n: (shape.nic_distance(g, n), n)) if n not in seen]
            near = [n for n in near if shape.nic_distance(g, n) <= limit]
            for n in near:
                if n not in owner:
                    seen.add(n)
                    owner[n] = g
                    return True
            for n in near:
                if n in seen:
                    continue
                seen.add(n)
                if claim(owner[n], seen):
                    owner[n] = g
                    return True
            return False

        if all(claim(g, set()) for g in gpus):
            return sorted((g, n) for n, g in owner.items())
    return []  # unreachable: at the largest distance every pair is allowed


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


def one_rail_set_per_role(members: Sequence[MemberPlacement], nodes: dict[str, Node]) -> bool:
    """Do all members of each role use NICs on the same rails?"""
    seen: dict[str, frozenset] = {}
    for m in members:
        rails = frozenset(nic.rail for nic in nodes[m.node].nics if nic.name in m.nics)
        if seen.setdefault(m.role, rails) != rails:
            return False
    return True
