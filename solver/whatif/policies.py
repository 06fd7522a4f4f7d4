"""Policies to compare: the solver under a given objective order and packing, or a greedy baseline.

Every policy is one callable ``place(request) -> SolveResult``, the interface the product's baselines
(``solver.baselines``) share with the solver, so the what-if machinery never knows which it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from solver.baselines import PLACERS
from solver.domain.model import DEFAULT_TIERS, Packing, Policy, SolveRequest, SolveResult
from solver.whatif.scenario import PolicySpec

PlaceFn = Callable[[SolveRequest], SolveResult]

DEFAULT_TIME_LIMIT_S = 10.0


def check_policy(spec: PolicySpec) -> list[str]:
    """Why ``spec`` cannot run here (empty when it can)."""
    if spec.solver is not None:
        return []
    if spec.baseline not in PLACERS:
        return [f"unknown baseline {spec.baseline!r}; known: {', '.join(sorted(PLACERS))}"]
    return []


def solver_policy(spec: PolicySpec, seed: int) -> Policy:
    """The solver's ``Policy`` for a spec: deterministic, so equal scenarios give equal answers."""
    s = spec.solver
    if s is None:
        return Policy(seed=seed)
    return Policy(
        objective=s.objective or DEFAULT_TIERS,
        packing=s.packing if s.packing != Packing.UNSPECIFIED else Packing.BINPACK,
        time_limit_s=s.time_limit_s or DEFAULT_TIME_LIMIT_S,
        seed=seed,
        deterministic=True,
        workers=s.workers or 1,
        batch_order=s.batch_order,
        order_shuffles=s.order_shuffles,
        priority_mode=s.priority_mode,
    )


def placer(spec: PolicySpec, seed: int) -> PlaceFn:
    """``place(request)`` running ``spec`` with ``seed``; the request's own policy is replaced."""
    policy = solver_policy(spec, seed)
    if spec.solver is not None:
        from solver.solve import solve

        def place_solver(request: SolveRequest) -> SolveResult:
            return solve(request.model_copy(update={"policy": policy}))

        return place_solver
    assert spec.baseline is not None
    baseline = PLACERS[spec.baseline]

    def place_baseline(request: SolveRequest) -> SolveResult:
        return baseline(request.model_copy(update={"policy": policy}))

    return place_baseline
