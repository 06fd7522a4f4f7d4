"""Node order: among placements equal on every earlier tier, use the nodes the policy ranks first.

This is first fit over a fixed order, the tie-break Slurm's node weights give and the one FGD's
simulator uses (a seeded node permutation). A fixed order keeps landing work on the same nodes, so
the others stay whole for the large requests that need them; breaking ties by a best fit instead
loses 0.2 point of allocation on the Alibaba trace (bench/RESULTS-replay.md).

Nodes of a class are interchangeable to the model, and decode hands them out lowest rank first, so
using ``u`` nodes of a class costs the sum of its ``u`` lowest ranks. That sum is convex in ``u``;
one Boolean per node that could be used (``b[c, j]``: the class's ``j``-th node in rank order is
used) with ``sum_j b[c, j] == u`` makes it exact, since the cheapest Booleans are taken first.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from solver.reduce.intranode import Configuration
from solver.reduce.normalise import Normalised

Configs = dict[int, tuple[Configuration, ...]]
Vars = dict[tuple[int, int], cp_model.IntVar]
OrderVars = dict[int, tuple[cp_model.IntVar, ...]]  # per class: b[c, 0], b[c, 1], ...


def add_node_order(model: cp_model.CpModel, problem: Normalised, configs: Configs, x: Vars) -> OrderVars:
    """Per class, the Booleans ``b[c, j]``: the class's ``j``-th node in rank order is touched."""
    members = sum(problem.supply())  # no plan touches more nodes than it places members
    out: OrderVars = {}
    for cls in problem.classes:
        touched = [x[cls.index, k] for k in range(len(configs[cls.index])) if (cls.index, k) in x]
        ranks = cls.ranks[: min(cls.count, members)]
        if not touched or not any(ranks):
            continue
        used = tuple(model.new_bool_var(f"order[{cls.index},{j}]") for j in range(len(ranks)))
        model.add(cp_model.LinearExpr.sum(used) == cp_model.LinearExpr.sum(touched))
        for j in range(1, len(used)):
            model.add_implication(used[j], used[j - 1])  # lowest ranks first, as decode hands them out
        out[cls.index] = used
    return out


def order_terms(problem: Normalised, order: OrderVars) -> list[tuple[int, cp_model.IntVar]]:
    """(rank, b) terms whose sum is the rank cost of the nodes the plan touches."""
    return [(problem.classes[c].ranks[j], b) for c, used in order.items() for j, b in enumerate(used)]


def order_values(order: OrderVars, touched: dict[int, int]) -> dict[str, int]:
    """The Booleans a placement makes true, from the number of nodes it touches per class."""
    return {b.name: int(j < touched.get(c, 0)) for c, used in order.items() for j, b in enumerate(used)}
