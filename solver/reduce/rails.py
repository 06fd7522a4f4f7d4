"""Rail alignment as a reduction: a rail-aligned role becomes one variant per rail set it could use.

In a rail-optimised fabric NIC k of every node is cabled to rail switch k, so two members talk
without changing rail only if their NICs sit on the same rails. A rail-aligned role therefore picks
one rail set R for all its members; each variant of the role is the role restricted to NICs on
exactly R (``solver.reduce.intranode`` enforces it per node), and the model places at most one variant
(``solver.compile.gangs``). A PREFERRED rule keeps an unrestricted variant too, which the topology
objective scores below the aligned ones.

Candidate rail sets are read off the inventory: for each node shape of the cluster and each set of
GPUs a member could take, the rails of the NICs it would get. Only the most common few are kept:
on a uniform fabric they are all there are.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from solver.domain.model import Requirement
from solver.reduce.intranode import Rules, choose_nics, gpu_sets
from solver.reduce.normalise import Normalised, RoleRef, nic_demand

MAX_RAIL_SETS = 8  # variants per role: more would grow the model for little gain


def candidate_rail_sets(problem: Normalised, ref: RoleRef) -> list[frozenset[int]]:
    """The rail sets a member of ``ref`` gets somewhere in the cluster, most common first."""
    rules = Rules.of(ref.role.member, strict=True)
    seen: Counter[frozenset[int]] = Counter()
    for cls in problem.classes:
        node = cls.shape
        here: set[frozenset[int]] = set()
        for gpus in gpu_sets(node, rules):
            nics = choose_nics(node, rules, gpus, range(len(node.nics)))
            if nics is None:
                continue
            rails = frozenset(node.nics[n].rail for n in nics)
            if None not in rails and len(rails) == len(nics):
                here.add(rails)
        for rails in here:  # a set counts once per node that offers it, however many ways
            seen[rails] += cls.count
    return [rails for rails, _ in sorted(seen.items(), key=lambda kv: (-kv[1], sorted(kv[0])))][
        :MAX_RAIL_SETS
    ]


def expand_rails(problem: Normalised) -> Normalised:
    """``problem`` with every rail-aligned role split into its rail-set variants."""
    ruled = [
        r
        for r, ref in enumerate(problem.roles)
        if problem.request.jobs[ref.job_index].rail_aligned in (Requirement.REQUIRED, Requirement.PREFERRED)
        and nic_demand(ref.role.member) > 0
    ]
    if not ruled:
        return problem
    shapes = list(problem.shapes)
    rails: list[frozenset[int] | None] = [None] * len(shapes)
    roles: list[RoleRef] = []
    for r, ref in enumerate(problem.roles):
        if r not in ruled:
            roles.append(replace(ref, group=-1))
            continue
        first = len(roles)
        preferred = problem.request.jobs[ref.job_index].rail_aligned == Requirement.PREFERRED
        for rail_set in candidate_rail_sets(problem, ref):
            shapes.append(ref.role.member)
            rails.append(rail_set)
            roles.append(replace(ref, shape=len(shapes) - 1, group=first, rails=rail_set))
        if preferred or len(roles) == first:
            # PREFERRED keeps the unrestricted role; REQUIRED with no candidate keeps a variant on
            # no rails at all, so the role is simply unplaceable and explained as such.
            roles.append(replace(ref, group=first, rails=None if preferred else frozenset()))
    # Groups were numbered as list positions before the shift of later roles: renumber them.
    fixed = [replace(ref, group=-1 if ref.group == i else ref.group) for i, ref in enumerate(roles)]
    return replace(problem, roles=tuple(fixed), shapes=tuple(shapes), shape_rails=tuple(rails))
