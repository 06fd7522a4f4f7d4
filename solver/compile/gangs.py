"""Gangs: a job is placed with every role between its minimum and its replicas, or not at all.

A role that comes in variants (rail sets, ``solver.reduce.rails``) is placed as exactly one of them.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.reduce.normalise import Normalised

Vars = dict[tuple[int, int], cp_model.IntVar]


def add_gangs(
    model: cp_model.CpModel, problem: Normalised, y: Vars
) -> tuple[dict[int, cp_model.IntVar], dict[int, cp_model.IntVar]]:
    """``placed[j]`` per job, and ``variant[r]`` per variant of a role that has several."""
    placed = {j: model.new_bool_var(f"placed[{j}]") for j in range(len(problem.request.jobs))}
    by_role: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for (r, _), var in y.items():
        by_role[r].append(var)
    variant: dict[int, cp_model.IntVar] = {}
    for group, variants in problem.groups().items():
        ref = problem.roles[group]
        if len(variants) == 1:
            choice: dict[int, cp_model.LinearExprT] = {group: placed[ref.job_index]}
        else:
            variant.update({v: model.new_bool_var(f"variant[{v}]") for v in variants})
            model.add(cp_model.LinearExpr.sum([variant[v] for v in variants]) == placed[ref.job_index])
            choice = {v: variant[v] for v in variants}
        for v, chosen in choice.items():
            members = cp_model.LinearExpr.sum(by_role[v])
            model.add(members >= ref.minimum * chosen)
            model.add(members <= ref.role.replicas * chosen)
    return placed, variant
