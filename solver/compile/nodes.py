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
    # Per (class, shape): roles of one shape are many, and a class's configurations are many too.
    most_of = {
        (cls.index, shape): per_node(configs, cls.index, shape)
        for cls in problem.classes
        for shape in {ref.shape for ref in problem.roles}
    }
    for r, ref in enumerate(checked(problem.roles)):  # roles x classes: the model's bulk
        for cls in problem.classes:
            most = most_of[cls.index, ref.shape]
            if most == 0:
                continue
            ub = min(ref.role.replicas, most * cls.count)
            y[r, cls.index] = model.new_int_var(0, ub, f"y[{r},{cls.index}]")
            if has_preferences(ref.role.member):
                s[r, cls.index] = model.new_int_var(0, ub, f"s[{r},{cls.index}]")
                model.add(s[r, cls.index] <= y[r, cls.index])
    return y, s


def add_member_supply(
    model: cp_model.CpModel, problem: Normalised, configs: Configs, x: Vars, y: Vars, s: Vars
) -> None:
    """Members of a shape on a class = the slots of that shape its nodes' configurations open;
    members counted strict ≤ the strict slots."""
    roles_by_shape: dict[int, list[int]] = defaultdict(list)
    for r, ref in enumerate(problem.roles):
        roles_by_shape[ref.shape].append(r)
    for cls in checked(problem.classes):
        c = cls.index
        for shape, roles in roles_by_shape.items():
            demand = [y[r, c] for r in roles if (r, c) in y]
            if not demand:
                continue
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
