"""Compile: normalised problem → one CP-SAT model, built by small functions, one per rule family.

Variables (all integers over node classes, never over individual GPUs):

* ``x[c, k]`` — how many nodes of class ``c`` take configuration ``k`` (``solver.intranode``);
* ``y[r, c]`` — how many members of role ``r`` sit on nodes of class ``c``;
* ``s[r, c]`` — of those, how many meet every PREFERRED rule (only for shapes that have any);
* ``placed[j]`` — job ``j`` is placed (all its roles at least at their minimum) or not at all.

The objective is a list of tiers (``Tier``) that ``solver.solve`` optimises lexicographically.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.intranode import Configuration, configurations_for
from solver.model import ObjectiveTier, Packing, Policy
from solver.normalise import Normalised, has_preferences


@dataclass(frozen=True)
class Tier:
    """One objective tier: maximise ``expr`` (minimising tiers are negated here, once)."""

    tier: ObjectiveTier
    expr: cp_model.LinearExprT
    upper: int  # a trivial bound, for reporting when the solver found none


@dataclass(frozen=True)
class Compiled:
    model: cp_model.CpModel
    configs: dict[int, tuple[Configuration, ...]]  # per class index
    x: dict[tuple[int, int], cp_model.IntVar]
    y: dict[tuple[int, int], cp_model.IntVar]
    s: dict[tuple[int, int], cp_model.IntVar]
    placed: dict[int, cp_model.IntVar]
    tiers: tuple[Tier, ...]


def member_work(gpus: int) -> int:
    """What placing one member is worth before priority: its GPUs (1 for a GPU-less member)."""
    return gpus if gpus > 0 else 1


def priority_weight(priority: int) -> int:
    return priority + 1


def compile_model(problem: Normalised, policy: Policy) -> Compiled:
    model = cp_model.CpModel()
    shapes_json = tuple(s.model_dump_json() for s in problem.shapes)
    configs = {c.index: configurations_for(c.shape, shapes_json) for c in problem.classes}

    x = add_configuration_choice(model, problem, configs)
    y, s = add_member_variables(model, problem, configs)
    add_member_supply(model, problem, configs, x, y, s)
    placed = add_gangs(model, problem, y)

    tiers = tuple(
        tier
        for name in policy.objective
        if (tier := objective_tier(name, problem, policy, configs, x, y, s, placed)) is not None
    )
    return Compiled(model=model, configs=configs, x=x, y=y, s=s, placed=placed, tiers=tiers)


# --------------------------------------------------------------------------- constraint families


def add_configuration_choice(
    model: cp_model.CpModel, problem: Normalised, configs: dict[int, tuple[Configuration, ...]]
) -> dict[tuple[int, int], cp_model.IntVar]:
    """Each node of a class takes one configuration; the empty one is implicit (the remainder)."""
    x = {}
    for cls in problem.classes:
        chosen = []
        for k, config in enumerate(configs[cls.index]):
            if config.empty:
                continue
            x[cls.index, k] = model.new_int_var(0, cls.count, f"x[{cls.index},{k}]")
            chosen.append(x[cls.index, k])
        if chosen:
            model.add(sum(chosen) <= cls.count)
    return x


def add_member_variables(
    model: cp_model.CpModel, problem: Normalised, configs: dict[int, tuple[Configuration, ...]]
) -> tuple[dict[tuple[int, int], cp_model.IntVar], dict[tuple[int, int], cp_model.IntVar]]:
    """Members per role and class, only where a node of the class can host the role's shape
    (candidate pruning: a role gets no variable on a class that can never take it)."""
    y, s = {}, {}
    for r, ref in enumerate(problem.roles):
        for cls in problem.classes:
            per_node = max((k.counts[ref.shape] for k in configs[cls.index]), default=0)
            if per_node == 0:
                continue
            ub = min(ref.role.replicas, per_node * cls.count)
            y[r, cls.index] = model.new_int_var(0, ub, f"y[{r},{cls.index}]")
            if has_preferences(ref.role.member):
                s[r, cls.index] = model.new_int_var(0, ub, f"s[{r},{cls.index}]")
                model.add(s[r, cls.index] <= y[r, cls.index])
    return y, s


def add_member_supply(
    model: cp_model.CpModel,
    problem: Normalised,
    configs: dict[int, tuple[Configuration, ...]],
    x: dict[tuple[int, int], cp_model.IntVar],
    y: dict[tuple[int, int], cp_model.IntVar],
    s: dict[tuple[int, int], cp_model.IntVar],
) -> None:
    """Members of a shape on a class = the slots of that shape its nodes' configurations open;
    members counted strict ≤ the strict slots."""
    roles_by_shape: dict[int, list[int]] = defaultdict(list)
    for r, ref in enumerate(problem.roles):
        roles_by_shape[ref.shape].append(r)
    for cls in problem.classes:
        for shape, roles in roles_by_shape.items():
            demand = [y[r, cls.index] for r in roles if (r, cls.index) in y]
            if not demand:
                continue
            slots = [
                config.counts[shape] * x[cls.index, k]
                for k, config in enumerate(configs[cls.index])
                if config.counts[shape] and (cls.index, k) in x
            ]
            model.add(sum(demand) == sum(slots))
            strict_demand = [s[r, cls.index] for r in roles if (r, cls.index) in s]
            if strict_demand:
                strict_slots = [
                    config.strict[shape] * x[cls.index, k]
                    for k, config in enumerate(configs[cls.index])
                    if config.strict[shape] and (cls.index, k) in x
                ]
                model.add(sum(strict_demand) <= sum(strict_slots))


def add_gangs(
    model: cp_model.CpModel, problem: Normalised, y: dict[tuple[int, int], cp_model.IntVar]
) -> dict[int, cp_model.IntVar]:
    """All or nothing: a placed job has every role between its minimum and its replicas; an
    unplaced job has no member anywhere."""
    placed = {j: model.new_bool_var(f"placed[{j}]") for j in range(len(problem.request.jobs))}
    for r, ref in enumerate(problem.roles):
        members = sum(v for (rr, _), v in y.items() if rr == r)
        model.add(members >= ref.minimum * placed[ref.job_index])
        model.add(members <= ref.role.replicas * placed[ref.job_index])
    return placed


# --------------------------------------------------------------------------- objective tiers


def objective_tier(
    name: ObjectiveTier,
    problem: Normalised,
    policy: Policy,
    configs: dict[int, tuple[Configuration, ...]],
    x: dict[tuple[int, int], cp_model.IntVar],
    y: dict[tuple[int, int], cp_model.IntVar],
    s: dict[tuple[int, int], cp_model.IntVar],
    placed: dict[int, cp_model.IntVar],
) -> Tier | None:
    """The tier's expression to maximise; None for tiers this version does not model yet."""
    if name == ObjectiveTier.PLACED_WORK:
        return placed_work(problem, y)
    if name == ObjectiveTier.TOPOLOGY:
        return topology_quality(problem, s)
    if name == ObjectiveTier.PACKING:
        return packing(problem, policy, configs, x)
    return None


def placed_work(problem: Normalised, y: dict[tuple[int, int], cp_model.IntVar]) -> Tier:
    """Priority-weighted GPUs placed. Gangs are all-or-nothing through ``add_gangs``."""
    terms, upper = [], 0
    for (r, _), var in y.items():
        ref = problem.roles[r]
        weight = priority_weight(problem.request.jobs[ref.job_index].priority)
        terms.append(weight * member_work(ref.role.member.gpus) * var)
    for ref in problem.roles:
        weight = priority_weight(problem.request.jobs[ref.job_index].priority)
        upper += weight * member_work(ref.role.member.gpus) * ref.role.replicas
    return Tier(ObjectiveTier.PLACED_WORK, sum(terms), upper)


def topology_quality(problem: Normalised, s: dict[tuple[int, int], cp_model.IntVar]) -> Tier:
    """GPUs of members that meet their PREFERRED alignment, NUMA and NVLink rules."""
    terms = [member_work(problem.roles[r].role.member.gpus) * v for (r, _), v in s.items()]
    upper = sum(
        member_work(ref.role.member.gpus) * ref.role.replicas
        for ref in problem.roles
        if has_preferences(ref.role.member)
    )
    return Tier(ObjectiveTier.TOPOLOGY, sum(terms), upper)


def packing(
    problem: Normalised,
    policy: Policy,
    configs: dict[int, tuple[Configuration, ...]],
    x: dict[tuple[int, int], cp_model.IntVar],
) -> Tier:
    """Binpack: touch as little free capacity as possible — a node costs its free GPUs + 1, so
    partly used nodes fill first and whole nodes stay whole. Spread: the opposite."""
    terms, upper = [], 0
    for cls in problem.classes:
        cost = len(cls.shape.gpus) + 1
        touched = [x[cls.index, k] for k, c in enumerate(configs[cls.index]) if (cls.index, k) in x]
        terms.extend(cost * v for v in touched)
        upper += cost * cls.count
    if policy.packing == Packing.SPREAD:
        return Tier(ObjectiveTier.PACKING, sum(terms), upper)
    return Tier(ObjectiveTier.PACKING, -sum(terms), 0)
