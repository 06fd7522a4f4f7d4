"""Policies to compare: the solver under a given objective order and packing, or a greedy baseline.

Every policy is one callable ``place(request) -> SolveResult``, the interface the in-project baselines
(``bench/baselines``) share with the solver, so the what-if machinery never knows which it runs.
Baselines live in the repository's ``bench`` package, which is not part of the installed library: they
are imported on first use, and a scenario naming one where ``bench`` is not importable is refused with
that reason rather than failing halfway through a run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from solver.model import DEFAULT_TIERS, Packing, Policy, SolveRequest, SolveResult
from solver.whatif.scenario import PolicySpec

PlaceFn = Callable[[SolveRequest], SolveResult]

BASELINES_MODULE = "bench.baselines"
DEFAULT_TIME_LIMIT_S = 10.0


def baselines() -> dict[str, PlaceFn] | None:
    """The in-project baselines by name, or None where ``bench`` cannot be imported."""
    try:
        module = importlib.import_module(BASELINES_MODULE)
    except ImportError:
        return None
    return dict(module.PLACERS)


def check_policy(spec: PolicySpec) -> list[str]:
    """Why ``spec`` cannot run here (empty when it can)."""
    if spec.solver is not None:
        return []
    known = baselines()
    if known is None:
        return [
            f"baseline {spec.baseline!r}: the baselines live in the repository's bench package, which is "
            "not importable here; run from the repository root or put it on PYTHONPATH"
        ]
    if spec.baseline not in known:
        return [f"unknown baseline {spec.baseline!r}; known: {', '.join(sorted(known))}"]
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
    )


def placer(spec: PolicySpec, seed: int) -> PlaceFn:
    """``place(request)`` running ``spec`` with ``seed``; the request's own policy is replaced."""
    policy = solver_policy(spec, seed)
    if spec.solver is not None:
        from solver.solve import solve

        def place_solver(request: SolveRequest) -> SolveResult:
            return solve(request.model_copy(update={"policy": policy}))

        return place_solver
    known = baselines() or {}
    assert spec.baseline is not None
    baseline = known[spec.baseline]

    def place_baseline(request: SolveRequest) -> SolveResult:
        return baseline(request.model_copy(update={"policy": policy}))

    return place_baseline
