"""Compile: normalised problem → one CP-SAT model, built by small functions, one per rule family.

Variables (all integers over node classes, never over individual GPUs):

* ``x[c, k]`` — how many nodes of class ``c`` take configuration ``k`` (``solver.reduce.intranode``);
* ``y[r, c]`` — how many members of role ``r`` sit on nodes of class ``c``;
* ``s[r, c]`` — of those, how many meet every PREFERRED rule (only for shapes that have any);
* ``placed[j]`` — job ``j`` is placed (all its roles at least at their minimum) or not at all;
* locality: which fabric or NVLink domain holds a gang (``solver.compile.locality``).

Where each rule lives:

=====================  =================================================
nodes.py               configurations per class; members ↔ slots supply
gangs.py               all-or-nothing, per-role minimums
locality.py            switch tiers, NVLink domains, roles kept close
order.py               the policy's node order (first fit)
objective.py           the tiers: placed work, topology, packing, fragmentation, node order
=====================  =================================================

``solver.solve`` optimises the tiers lexicographically.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ortools.sat.python import cp_model

from solver.compile.gangs import add_gangs
from solver.compile.locality import Locality, add_locality
from solver.compile.nodes import add_configuration_choice, add_member_supply, add_member_variables
from solver.compile.objective import Tier, objective_tiers
from solver.compile.order import OrderVars, add_node_order
from solver.domain.cancel import check, checked
from solver.domain.fabric import Fabric
from solver.domain.model import ObjectiveTier, Policy
from solver.reduce.intranode import Configuration, configurations_for
from solver.reduce.normalise import Normalised
from solver.reduce.policy import chooses_share_gpu, spreads_shares

__all__ = ["Compiled", "Tier", "compile_model"]


@dataclass(frozen=True)
class Compiled:
    model: cp_model.CpModel
    configs: dict[int, tuple[Configuration, ...]]  # per class index
    x: dict[tuple[int, int], cp_model.IntVar]
    y: dict[tuple[int, int], cp_model.IntVar]
    s: dict[tuple[int, int], cp_model.IntVar]
    placed: dict[int, cp_model.IntVar]
    variant: dict[int, cp_model.IntVar]  # per role variant, where a role has several (rail sets)
    locality: Locality
    order: OrderVars  # per class, for the NODE_ORDER tier (empty without it)
    tiers: tuple[Tier, ...]
    # How many constraints the rules made: a search adds only its tier holds after them
    # (objective.hold), which is what lets solver.compile.shelf reuse the model.
    constraints: int = 0

    @cached_property
    def hosted(self) -> frozenset[int]:
        """The role variants some class can host (a member variable exists): what an explanation
        asks of every unplaced job, computed once."""
        return frozenset(r for r, _ in self.y)


class Model(cp_model.CpModel):
    """A CP-SAT model without the camelCase aliases OR-Tools adds to every new model for code
    written before PEP 8 names: adding them walks the class's methods and costs about 0.7 ms a model,
    a twentieth of a lone pod's whole solve. Nothing here uses the old names."""

    def _add_pre_pep8_methods(self) -> None:
        pass


def compile_model(problem: Normalised, policy: Policy) -> Compiled:
    model = Model()
    spread, choice = spreads_shares(policy), chooses_share_gpu(policy)
    supply = problem.supply()
    configs = {
        c.index: configurations_for(
            c.shape, problem.shapes_json, spread, problem.conflicts, problem.shape_rails, supply, choice
        )
        for c in checked(problem.classes)  # a class's configurations may take a while to enumerate
    }
    fabric = Fabric.of(problem.request.inventory)

    # A caller gone (solver.domain.cancel) stops the build between the rule families, and inside
    # the ones that walk every role or rule (members, locality).
    x = add_configuration_choice(model, problem, configs)
    y, s = add_member_variables(model, problem, configs)
    check()
    add_member_supply(model, problem, configs, x, y, s)
    check()
    placed, variant = add_gangs(model, problem, y)
    check()
    locality = add_locality(model, problem, fabric, y, placed)
    check()
    order = add_node_order(model, problem, configs, x) if ObjectiveTier.NODE_ORDER in policy.objective else {}
    tiers = objective_tiers(problem, policy, configs, x, y, s, locality, placed, variant, order)
    return Compiled(
        model=model,
        configs=configs,
        x=x,
        y=y,
        s=s,
        placed=placed,
        variant=variant,
        locality=locality,
        order=order,
        tiers=tiers,
        constraints=len(model.proto.constraints),
    )
