"""Node capacity: each node of a class takes one configuration, and the members placed on a class
are exactly the slots its configurations open."""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.domain.cancel import checked
from solver.reduce.intranode import Configuration
from solver.reduce.normalise import Normalised, has_preferences

Configs = dict[int, tuple[Configuration, ...]]
Vars = dict[tuple[int, int], cp_model.IntVar]


def add_configuration_choice(model: cp_model.CpModel, problem: Normalised, configs: Configs) -> Vars:
    """``x[c, k]`` nodes of class ``c`` take configuration ``k``; the empty one is the remainder."""
    x = {}
    for cls in problem.classes:
        chosen = []
        for k, config in enumerate(configs[cls.index]):
            if config.empty:
                continue
            x[cls.index, k] = model.new_int_var(0, cls.count, f"x[{cls.index},{k}]")
            chosen.append(x[cls.index, k])
        if chosen:
            model.add(cp_model.LinearExpr.sum(chosen) <= cls.count)
    return x


def per_node(configs: Configs, c: int, shape: int) -> int:
    """Most members of ``shape`` one node of class ``c`` can take."""
    return max((k.counts[shape] for k in configs[c]), default=0)


def add_member_variables(model: cp_model.CpModel, problem: Normalised, configs: Configs) -> tuple[Vars, Vars]:
    """Members per role and class, only where a node of the class can host the role's shape
    (candidate pruning: a role gets no variable on a class that can never take it)."""
    y, s = {}, {}
    # Per shape, the classes some node of which can take one member, with how many one node can:
    # a role is looked up only there, not on every class (4,557 classes x 167 roles at 16,384 nodes).
    hosts: dict[int, list[tuple[int, int, int]]] = {}
    for shape in sorted({ref.shape for ref in problem.roles}):
        most_of = ((cls.index, cls.count, per_node(configs, cls.index, shape)) for cls in problem.classes)
        hosts[shape] = [(c, count, most) for c, count, most in most_of if most]
    for r, ref in enumerate(checked(problem.roles)):  # roles x classes: the model's bulk
        replicas, strict = ref.role.replicas, has_preferences(ref.role.member)
        for c, count, most in hosts[ref.shape]:
            ub = min(replicas, most * count)
            y[r, c] = model.new_int_var(0, ub, f"y[{r},{c}]")
            if strict:
                s[r, c] = model.new_int_var(0, ub, f"s[{r},{c}]")
                model.add(s[r, c] <= y[r, c])
    return y, s


def add_member_supply(
    model: cp_model.CpModel, problem: Normalised, configs: Configs, x: Vars, y: Vars, s: Vars
) -> None:
    """Members of a shape on a class = the slots of that shape its nodes' configurations open;
    members counted strict ≤ the strict slots."""
    # Each class's member variables by shape, gathered once from y (not every role tried on every
    # class), in role order as the constraints always listed them.
    demand_of: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r, c in y:
        demand_of[c][problem.roles[r].shape].append(r)
    for cls in checked(problem.classes):
        c = cls.index
        for shape, roles in sorted(demand_of[c].items()):
            demand = [y[r, c] for r in roles]
            slots = [
                (k.counts[shape], x[c, i])
                for i, k in enumerate(configs[c])
                if k.counts[shape] and (c, i) in x
            ]
            model.add(cp_model.LinearExpr.sum(demand) == weighted(slots))
            strict_demand = [s[r, c] for r in roles if (r, c) in s]
            if strict_demand:
                strict_slots = [
                    (k.strict[shape], x[c, i])
                    for i, k in enumerate(configs[c])
                    if k.strict[shape] and (c, i) in x
                ]
                model.add(cp_model.LinearExpr.sum(strict_demand) <= weighted(strict_slots))


def weighted(terms: list[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExprT:
    return cp_model.LinearExpr.weighted_sum([v for _, v in terms], [c for c, _ in terms])
