"""One gang on distinct nodes, placed by enumeration: what the Slurm hook asks for ``sbatch -N k``.

The hook asks one request a submit; for a gang — ``k`` members of one role, one per node (its
anti-affinity on its own label), kept close (a PREFERRED job locality) — the model path cost 15-30
ms at 1,024 nodes, the whole of the hook's 30 ms answer budget, so under load most gangs were
answered by the fast placer (session 31). Such a gang's best plan can be found exactly without a
model, because every tier but the gang's locality is a sum over its nodes:

* each node that can host a member is valued once, in its best configuration, on the per-node
  parts (:class:`solver.search.single.Valuation`: the member's PREFERRED rules, packing,
  fragmentation, node rank);
* the locality parts depend on the set: ``topology.locality`` counts, weighted by the gang's GPUs,
  the fabric tiers under one switch of which all its nodes sit; ``topology.leaves_spanned`` the
  leaves it touches. So for each switch (each domain of each tier, and the whole inventory) and
  each number of leaves, the best nodes inside it are found by a small dynamic programme over its
  leaves (per leaf, its best nodes first: with lexicographic tiers a sum of vectors is best when
  each leaf gives its best); the best of these by every tier, in the policy's order, is the plan.

The set the programme finds for a switch and a leaf count is at least as good, tier by tier, as any
set with that lowest common switch and leaf count, so the best of them is the model's optimum
(the differential test ``tests/test_gang_step.py`` holds it to the model's values). Anything else —
a job of several roles, members that may share a node, a REQUIRED or role locality, NVLink
domains, rails, another tier, placed work not first — goes the model's way, as does a gang that
does not fit now (its reason is the model path's explanation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.domain.fabric import Fabric
from solver.domain.model import (
    Node,
    ObjectiveTier,
    Requirement,
    Scope,
    SolveRequest,
    TierValue,
)
from solver.reduce.intranode import Slot
from solver.reduce.normalise import ConcreteNode, NodeShape
from solver.reduce.separation import matches, scope_of
from solver.search.single import (
    ENUMERABLE_TIERS,
    Hosting,
    Valuation,
    hosting_nodes,
    parts,
    placed_work_values,
    proven,
)

MAX_MEMBERS = 64  # larger gangs go the model's way: the programme grows with members squared
Vector = tuple[int, ...]


def one_gang(request: SolveRequest) -> bool:
    """Whether ``request`` asks for one job of one role with several members, all or none (an
    elastic gang's minimum is the model's to weigh), on distinct nodes — an anti-affinity at node
    scope on labels of its own, and no other separation rule: the shape this enumerator may
    answer. Asked before the request is rewritten, as ``single.one_pod``: rewriting keeps a job's
    roles and separation rules, and a request of another shape is not rewritten twice."""
    roles = request.jobs[0].roles if len(request.jobs) == 1 else ()
    if len(roles) != 1 or not 2 <= roles[0].replicas <= MAX_MEMBERS or roles[0].minimum != roles[0].replicas:
        return False
    job = request.jobs[0]
    return bool(job.anti_affinity) and all(
        scope_of(rule) == Scope.NODE and matches(job.labels, rule.labels) for rule in job.anti_affinity
    )


def enumerable(request: SolveRequest) -> bool:
    """Whether ``request`` (rewritten: policy chains applied, gangs kept close) is one gang this
    enumerator values exactly: :func:`one_gang`, at most a PREFERRED job locality, no other rule of
    place, the policy's tiers among ``single.ENUMERABLE_TIERS`` with placed work first."""
    if not one_gang(request):
        return False
    job = request.jobs[0]
    role = job.roles[0]
    objective = tuple(request.policy.objective)
    unruled = (Requirement.NONE, Requirement.UNSPECIFIED)
    return (
        bool(objective)
        and objective[0] == ObjectiveTier.PLACED_WORK
        and set(objective) <= ENUMERABLE_TIERS
        and job.locality.mode in (*unruled, Requirement.PREFERRED)
        and role.locality.mode in unruled
        and job.nvlink_domain in unruled
        and job.rail_aligned in unruled
        and not job.role_affinity
        and not job.exclusive_nodes
    )


@dataclass(frozen=True)
class Seat:
    """One member's place: the node, its shape and devices table, the configuration's slot."""

    node: Node
    shape: NodeShape
    concrete: ConcreteNode
    slot: Slot


@dataclass(frozen=True)
class Gang:
    """Where the gang goes, a member a node, and the tier values a model answer would carry
    (proven: every node and every switch was valued)."""

    seats: tuple[Seat, ...]
    objectives: tuple[TierValue, ...]
    classes: int  # node classes that could take a member (the model size it reports)


@dataclass(frozen=True)
class _Candidate:
    """A node that can host a member, valued in its best configuration."""

    hosting: Hosting
    k: int  # the configuration
    values: Vector  # the per-node parts, in the policy's order


def choose(request: SolveRequest) -> Gang | None:
    """The best placement of an :func:`enumerable` request's gang; None when fewer nodes than
    members can take one now (the model path explains why)."""
    job = request.jobs[0]
    members = job.roles[0].replicas
    valuation = Valuation(request)
    # A node's values are its class's (its shape, and its healthy GPUs under FILL) but for its rank:
    # valued once a class, as the one-pod enumerator does, not once a node.
    by_class: dict[tuple[int, int], tuple[int, dict[str, int]]] = {}
    candidates = []
    for hosting in hosting_nodes(request, valuation.filling, per_class=False):
        if _kept_away(hosting.node, request):
            continue
        cls = (id(hosting.shape), hosting.total)
        if cls not in by_class:
            by_class[cls] = valuation.best(hosting)
        k, values = by_class[cls]
        if "node_order" in values:
            values = {**values, "node_order": -hosting.rank}
        candidates.append(_Candidate(hosting, k, tuple(values.values())))
    if len(candidates) < members:
        return None
    fabric = Fabric.of(request.inventory)
    ruled = job.locality.mode == Requirement.PREFERRED
    levels = fabric.tiers if ruled else ()
    names = _names(request, valuation, levels, ruled)
    weight = max(job.roles[0].member.gpus, 1) * members
    best: tuple[Vector, tuple[_Candidate, ...]] | None = None
    for chosen in _best_sets(candidates, members, fabric, levels if ruled else None):
        valued = _key(names, chosen, fabric, levels, weight)
        if best is None or valued > best[0]:
            best = (valued, chosen)
    assert best is not None  # the inventory as a whole holds a set: len(candidates) >= members
    values_of_best, chosen = best
    objectives = [*placed_work_values(request, members)]
    objectives.extend(
        proven(tier, name, value) for (tier, name), value in zip(names, values_of_best, strict=True)
    )
    seats = tuple(
        Seat(c.hosting.node, c.hosting.shape, c.hosting.concrete, c.hosting.configs[c.k].slots[0])
        for c in sorted(chosen, key=lambda c: c.hosting.rank)
    )
    return Gang(seats, tuple(objectives), len(by_class))


LOCALITY, LEAVES = "topology.locality", "topology.leaves_spanned"


def _names(
    request: SolveRequest, valuation: Valuation, levels: Sequence[int], ruled: bool
) -> list[tuple[ObjectiveTier, str]]:
    """The tier parts after placed work, in the policy's order, as the model names them: the
    topology tier opens with the gang's locality parts (when its job locality is a rule; the tier
    count when the fabric has tiers) before its members' preferences."""
    names = []
    for tier in valuation.tiers[1:]:  # placed work is first (enumerable)
        if tier == ObjectiveTier.TOPOLOGY and ruled:
            names += [(tier, LOCALITY)] * bool(levels) + [(tier, LEAVES)]
        names += [(tier, name) for name in parts(tier, request.policy)]
    return names


def _kept_away(node: Node, request: SolveRequest) -> bool:
    """Whether running work on ``node`` matches the job's anti-affinity (node scope: the whole
    node is off limits to it, as ``separation.taboo`` rules)."""
    rules = request.jobs[0].anti_affinity
    return any(matches(a.labels, rule.labels) for a in node.allocations for rule in rules)


def _key(
    names: list[tuple[ObjectiveTier, str]],
    chosen: tuple[_Candidate, ...],
    fabric: Fabric,
    levels: Sequence[int],
    weight: int,
) -> Vector:
    """The set's part values, in ``names``' order (greatest best): the per-node parts summed, the
    locality parts of the set — the fabric tiers under one switch of which all its nodes sit,
    weighted by the gang's GPUs, and the leaves it spans (negated: fewest best), counted as the
    model's topology tier counts them (a node outside the fabric is under no switch)."""
    sums = iter(sum(column) for column in zip(*(c.values for c in chosen), strict=True))
    leaves = [c.hosting.node.leaf for c in chosen]
    key = []
    for _, name in names:
        if name == LOCALITY:
            within = 0
            for level in levels:
                domains = {fabric.domain(leaf, level) if leaf else None for leaf in leaves}
                within += len(domains) == 1 and None not in domains
            key.append(weight * within)
        elif name == LEAVES:
            key.append(-len(set(leaves)))
        else:
            key.append(next(sums))
    return tuple(key)


def _best_sets(
    candidates: list[_Candidate], members: int, fabric: Fabric, levels: Sequence[int] | None
) -> list[tuple[_Candidate, ...]]:
    """Sets of ``members`` candidates one of which is the best: for no locality rule (``levels``
    None), the best nodes anywhere; else, for each switch of each level and for the whole
    inventory, the best set inside it for each number of leaves it spans."""
    ordered = sorted(candidates, key=lambda c: c.values, reverse=True)  # stable: rank order kept
    if levels is None:
        return [tuple(ordered[:members])]
    by_leaf: dict[str, list[_Candidate]] = {}
    for c in ordered:
        by_leaf.setdefault(c.hosting.node.leaf, []).append(c)
    domains: list[list[str]] = [sorted(by_leaf)]  # the whole inventory
    for level in levels:
        inside: dict[str, list[str]] = {}
        for leaf in by_leaf:
            domain = fabric.domain(leaf, level) if leaf else None
            if domain is not None:
                inside.setdefault(domain, []).append(leaf)
        domains.extend(sorted(leaves) for leaves in inside.values())
    sets = []
    for leaves in domains:
        groups = [by_leaf[leaf][:members] for leaf in leaves]
        if sum(len(g) for g in groups) >= members:
            sets.extend(_per_leaf_count(groups, members))
    return sets


def _per_leaf_count(groups: list[list[_Candidate]], members: int) -> list[tuple[_Candidate, ...]]:
    """For each number of leaves, the ``members`` candidates from ``groups`` (each a leaf's, best
    first) with the greatest summed values that use exactly that many leaves: a dynamic programme
    over the leaves, (members taken, leaves used) → (best sum, takes per leaf)."""
    width = len(groups[0][0].values)
    table: dict[tuple[int, int], tuple[Vector, tuple[tuple[int, int], ...]]] = {(0, 0): ((0,) * width, ())}
    for g, group in enumerate(groups):
        prefix = [(0,) * width]
        for c in group:
            prefix.append(tuple(a + b for a, b in zip(prefix[-1], c.values, strict=True)))
        step = dict(table)
        for (taken, used), (total, takes) in table.items():
            for n in range(1, min(members - taken, len(group)) + 1):
                value = tuple(a + b for a, b in zip(total, prefix[n], strict=True))
                here = (taken + n, used + 1)
                if here not in step or value > step[here][0]:
                    step[here] = (value, (*takes, (g, n)))
        table = step
    return [
        tuple(c for g, n in takes for c in groups[g][:n])
        for (taken, _), (_, takes) in sorted(table.items())
        if taken == members
    ]
