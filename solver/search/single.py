"""One pod, placed by enumeration: a step of one job of one member answered without the model.

A replay places its window one pod a step (``solver.search.sequence``), and for such a step
normalising the whole inventory, building a CP-SAT model and searching it cost ~8 ms where the
greedy twin takes well under one (issue 25). For one member the model's choice is a choice of one
(node class, configuration): every node that could host it is tried once, valued on the policy's
tiers with the very functions the model's tiers are built from (node shapes, configurations,
fragmentation deltas, FILL's terms, binpack's touch cost, the configurations that meet the member's
PREFERRED rules, node ranks), and the best kept — placed first, then the tiers in the policy's order,
then the lowest node rank. Devices come from decode's own ``placement``, so the member lands where
the model's plan would put it (of placements equal on every tier, the model may pick another).

The Slurm hook asks one such request a submit — one member, a NIC per GPU and NVLink PREFERRED,
binpack, the default tiers — and the model path cost it 8-12 ms a submit at 1,024 nodes, most of the
hook's 30 ms answer budget (session 30). Only a step whose every rule is one of those is answered
here (:func:`enumerable`); anything else — locality, rails, separation, another tier — goes the
model's way, unchanged, as does a pod no node can take now (its reason is the model path's
explanation).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from solver.compile.objective import (
    cpu_per_gpu_milli_of,
    fill_values,
    fragmentation_deltas,
    member_work,
    priority_levels,
    priority_weight,
    touch_cost,
)
from solver.domain.cancel import checked
from solver.domain.fragmentation import profile
from solver.domain.model import (
    Node,
    ObjectiveTier,
    Packing,
    Policy,
    Requirement,
    SolveRequest,
    TierValue,
)
from solver.reduce.intranode import Configuration, Slot, configurations_for
from solver.reduce.normalise import (
    ConcreteNode,
    NodeShape,
    has_preferences,
    largest_node,
    node_ranks,
    schedulable_shapes,
)
from solver.reduce.policy import chooses_share_gpu, spreads_shares

# The tiers whose value for one pod on one node the enumerator knows (TOPOLOGY: the member's
# PREFERRED rules only; a job or role locality, NVLink domain or rails goes the model's way).
ENUMERABLE_TIERS = frozenset(
    {
        ObjectiveTier.PLACED_WORK,
        ObjectiveTier.TOPOLOGY,
        ObjectiveTier.FRAGMENTATION,
        ObjectiveTier.PACKING,
        ObjectiveTier.NODE_ORDER,
    }
)


def one_pod(request: SolveRequest) -> bool:
    """Whether ``request`` asks for one member of one job: the shape the enumerator can answer.
    Rewriting a request (policy chains, gangs kept close) keeps its jobs and members, so this is
    asked before the rewrite, and a step of several pods is not rewritten twice."""
    return (
        len(request.jobs) == 1 and len(request.jobs[0].roles) == 1 and request.jobs[0].roles[0].replicas == 1
    )


def enumerable(request: SolveRequest) -> bool:
    """Whether ``request`` (rewritten: policy chains applied) is one pod under rules the
    enumerator values exactly: no rule of place (job or role locality, NVLink domain, rails) or of
    separation, and the policy's tiers among :data:`ENUMERABLE_TIERS`. The member's own rules,
    REQUIRED or PREFERRED, are its configurations' (``Configuration.strict``)."""
    if not one_pod(request):
        return False
    job = request.jobs[0]
    role = job.roles[0]
    policy = request.policy
    if not set(policy.objective) <= ENUMERABLE_TIERS:
        return False
    unruled = (Requirement.NONE,)
    return (
        job.locality.mode in unruled
        and role.locality.mode in unruled
        and job.nvlink_domain in unruled
        and job.rail_aligned in unruled
        and not job.role_affinity
        and not job.anti_affinity
        and not job.exclusive_nodes
    )


@dataclass(frozen=True)
class Single:
    """Where the one pod goes: the node, its shape and devices table, the slot of the chosen
    configuration, and the tier values a model answer would carry (proven: every node was valued)."""

    node: Node
    shape: NodeShape
    concrete: ConcreteNode
    slot: Slot
    objectives: tuple[TierValue, ...]
    classes: int  # node classes that could take the pod


def parts(tier: ObjectiveTier, policy: Policy) -> tuple[str, ...]:
    """The parts of a tier other than placed work the enumerator values, as the model names them."""
    if tier == ObjectiveTier.PACKING:
        return {
            Packing.FILL: ("packing.fill_gpus", "packing.cpu_spare"),
            Packing.BINPACK: ("packing.binpack",),
            Packing.SPREAD: ("packing.spread",),
        }[policy.packing]
    return {
        ObjectiveTier.TOPOLOGY: ("topology.preferences",),
        ObjectiveTier.FRAGMENTATION: ("fragmentation",),
        ObjectiveTier.NODE_ORDER: ("node_order",),
    }[tier]


def none_placed(request: SolveRequest) -> tuple[TierValue, ...]:
    """The tier values of an :func:`enumerable` request whose pod no node takes now: every tier 0,
    proven, as the model of no node class proves them."""
    names = [name for name, _ in priority_levels(request.jobs, request.policy.priority_mode)]
    return tuple(
        proven(tier, name, 0)
        for tier in request.policy.objective
        for name in (names if tier == ObjectiveTier.PLACED_WORK else parts(tier, request.policy))
    )


class Valuation:
    """What one member of the request's one role adds to each tier part but placed work, on a node
    in one of its configurations — the model's own terms: the member's PREFERRED rules met (its
    work), the fragmentation delta, binpack's or spread's touch cost, FILL's two parts, the node's
    rank. A gang (``solver.search.gang``) sums them over its nodes."""

    def __init__(self, request: SolveRequest) -> None:
        policy = request.policy
        member = request.jobs[0].roles[0].member
        self.shapes = (member,)
        self.workload = profile(policy.workload, self.shapes)
        self.tiers = tuple(policy.objective)
        self.filling = ObjectiveTier.PACKING in self.tiers and policy.packing == Packing.FILL
        self.touching = ObjectiveTier.PACKING in self.tiers and not self.filling
        self.valued = ObjectiveTier.FRAGMENTATION in self.tiers
        # A member that meets its PREFERRED rules counts its work (the model's topology.preferences).
        self.preferring = member_work(member) if has_preferences(member) else 0
        if self.touching or self.filling:
            self.scale = largest_node(request.inventory.nodes)  # the packing tier's rulers
        if self.touching:
            self.touched = parts(ObjectiveTier.PACKING, policy)[0]  # binpack minimises, spread maximises
            self.sign = 1 if policy.packing == Packing.SPREAD else -1
        if self.filling:
            self.cpu_per_milli = cpu_per_gpu_milli_of(policy, [(1, member)])
            self.uses_gpu = (member.gpus > 0 or member.gpu_share is not None,)

    def per_configuration(self, hosting: Hosting) -> Iterator[tuple[int, dict[str, int]]]:
        """Each configuration of ``hosting`` that places the member, with its part values in the
        policy's tier order (placed work left out: the same wherever the member goes)."""
        shape, total, configs = hosting.shape, hosting.total, hosting.configs
        deltas = fragmentation_deltas(shape, configs, self.shapes, self.workload) if self.valued else ()
        for k in hosting.placing:
            values: dict[str, int] = {}
            for tier in self.tiers:
                if tier == ObjectiveTier.TOPOLOGY:
                    values["topology.preferences"] = self.preferring * configs[k].strict[0]
                elif tier == ObjectiveTier.FRAGMENTATION:
                    values["fragmentation"] = -deltas[k]
                elif tier == ObjectiveTier.PACKING and self.touching:
                    values[self.touched] = self.sign * touch_cost(shape, self.scale)
                elif tier == ObjectiveTier.PACKING:
                    gpu_cost, cpu_spare = fill_values(
                        shape, total, configs[k], self.uses_gpu, self.cpu_per_milli, self.scale[1]
                    )
                    values["packing.fill_gpus"] = -gpu_cost
                    values["packing.cpu_spare"] = cpu_spare
                elif tier == ObjectiveTier.NODE_ORDER:
                    values["node_order"] = -hosting.rank
            yield k, values

    def best(self, hosting: Hosting) -> tuple[int, dict[str, int]]:
        """The configuration of ``hosting`` the member is best valued in (of equals, the first)."""
        found: tuple[tuple[int, ...], int, dict[str, int]] | None = None
        for k, values in self.per_configuration(hosting):
            key = tuple(values.values())
            if found is None or key > found[0]:
                found = (key, k, values)
        assert found is not None  # a hosting node places the member in some configuration
        return found[1], found[2]


def placed_work_values(request: SolveRequest, members: int) -> list[TierValue]:
    """The placed-work parts of the request's one job, ``members`` of its one role placed."""
    job = request.jobs[0]
    work = member_work(job.roles[0].member) * members
    out = []
    for name, levels in priority_levels(request.jobs, request.policy.priority_mode):
        if levels is None:
            out.append(proven(ObjectiveTier.PLACED_WORK, name, priority_weight(job.priority) * work))
        else:
            out.append(proven(ObjectiveTier.PLACED_WORK, name, work if job.priority in levels else 0))
    return out


def choose(request: SolveRequest) -> Single | None:
    """The best placement of an :func:`enumerable` request's one pod; None when no node can take
    it now (:func:`none_placed`; the model path explains why)."""
    valuation = Valuation(request)
    # (tier values as the key, by name, the class, the configuration index)
    best: tuple[tuple[int, ...], dict[str, int], Hosting, int] | None = None
    classes = 0
    for hosting in hosting_nodes(request, valuation.filling, per_class=True):
        classes += 1
        for k, values in valuation.per_configuration(hosting):
            key = tuple(values.values())
            if best is None or key > best[0]:  # of equals, the first in rank order
                best = (key, values, hosting, k)
    if best is None:
        return None
    _, values, chosen, k = best
    (slot,) = chosen.configs[k].slots
    objectives = []
    for tier in valuation.tiers:
        if tier == ObjectiveTier.PLACED_WORK:
            objectives.extend(placed_work_values(request, 1))
        else:
            objectives.extend(proven(tier, name, values[name]) for name in parts(tier, request.policy))
    return Single(chosen.node, chosen.shape, chosen.concrete, slot, tuple(objectives), classes)


def fits_now(request: SolveRequest) -> bool:
    """Whether some node takes an :func:`enumerable` request's one pod now: the first node class
    that does answers, nothing valued (explanations ask it of every pod a window leaves out)."""
    return next(hosting_nodes(request, False, per_class=True), None) is not None


class Hosting(NamedTuple):
    """A node class that can take the one pod, by its first node in rank order."""

    rank: int
    node: Node
    shape: NodeShape
    concrete: ConcreteNode
    total: int  # healthy GPUs, when FILL packing counts them (else 0: one class whatever they are)
    configs: tuple[Configuration, ...]
    placing: list[int]  # the configurations that place the pod


def hosting_nodes(request: SolveRequest, filling: bool, *, per_class: bool) -> Iterator[Hosting]:
    """Each node that can take the one pod, in node rank order; ``per_class``: only the first of
    each node class. A class's nodes are interchangeable to the model, and decode hands out its
    lowest-ranked node first: the first node of a class in rank order stands for it."""
    policy = request.policy
    member = request.jobs[0].roles[0].member
    shapes_json = (member.model_dump_json(),)
    spread, choice = spreads_shares(policy), chooses_share_gpu(policy)
    # The shapes normalise would give (``cached_node_shape``; no separation rule: enumerable), through
    # the fold normalise keeps: a step binds one node, and a lookup per node was a third of the
    # enumerator in a profile. The walk below is per node of ~1,500 every step: kept to lookups.
    nodes = request.inventory.nodes
    shapes = schedulable_shapes(request, frozenset(member.node_selector), False)
    # Node classes tried, by the shape's identity (shapes are interned), and the healthy GPUs when FILL.
    seen: set[object] = set()
    known = _of_pod(shapes_json, spread, choice)
    # checked: a cancelled call stops here (solver.domain.cancel); cold shapes cost ~1 ms a node.
    for rank, i in checked(node_ranks(request)):
        found = shapes[i]
        if found is None:  # not schedulable
            continue
        shape = found[0]
        total = sum(1 for g in nodes[i].gpus if g.healthy) if filling else 0
        if per_class:
            key = (id(shape), total) if filling else id(shape)
            if key in seen:
                continue
            seen.add(key)
        hit = known.get(id(shape))
        if hit is None or hit[0] is not shape:
            configs = configurations_for(shape, shapes_json, spread, (), (), (1,), choice)
            hit = known[id(shape)] = (shape, configs, [k for k, c in enumerate(configs) if c.counts[0] == 1])
        if hit[2]:
            yield Hosting(rank, nodes[i], shape, found[1], total, hit[1], hit[2])


# Per pod (its member's JSON and the share rules), each node shape's configurations and those that
# place the pod, by the shape's identity (the shape is kept, so its id stays its own): a window asks
# its pods of the same few hundred shapes in every order it tries, and most take none.
_PODS: dict[tuple, dict[int, tuple[NodeShape, tuple[Configuration, ...], list[int]]]] = {}


def _of_pod(shapes_json: tuple[str, ...], spread: bool, choice: bool) -> dict:
    key = (shapes_json, spread, choice)
    found = _PODS.get(key)
    if found is None:
        if len(_PODS) >= 256:
            _PODS.clear()
        found = _PODS[key] = {}
    return found


def proven(tier: ObjectiveTier, name: str, value: int) -> TierValue:
    """A tier value proven by enumeration: every placement was valued, so the bound is the value."""
    return TierValue(tier=tier, name=name, value=float(value), bound=float(value), optimal=True)
