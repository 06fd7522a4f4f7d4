"""Gangs: a job is placed with every role between its minimum and its replicas, or not at all."""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from solver.normalise import Normalised


def add_gangs(
    model: cp_model.CpModel, problem: Normalised, y: dict[tuple[int, int], cp_model.IntVar]
) -> dict[int, cp_model.IntVar]:
    placed = {j: model.new_bool_var(f"placed[{j}]") for j in range(len(problem.request.jobs))}
    by_role: dict[int, list[cp_model.IntVar]] = defaultdict(list)
    for (r, _), var in y.items():
        by_role[r].append(var)
    for r, ref in enumerate(problem.roles):
        members = cp_model.LinearExpr.sum(by_role[r])
        model.add(members >= ref.minimum * placed[ref.job_index])
        model.add(members <= ref.role.replicas * placed[ref.job_index])
    return placed
