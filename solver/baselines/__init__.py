"""In-project greedy baselines, one ``place(request: SolveRequest) -> SolveResult`` per policy.

Topology-aware, whole GPUs (issues 3, 4, 8): ``volcano`` (network-topology-aware + binpack),
``bestfit`` (Slurm-like best fit, first aligned GPUs).
GPU sharing, FGD's evaluation (issues 5, 8): ``random``, ``bestfit-share``, ``gpupacking``, ``fgd``; their
fast path (``choose(state, pod)`` on ``solver.baselines.sharing.ClusterState``) drives ``bench.replay``.
Every result is in the solver's shapes and passes ``solver.answer.verify.verify``.
"""

from __future__ import annotations

from collections.abc import Callable

from solver.baselines import bestfit, fgd, gpupacking, random_fit, sharebestfit, volcano
from solver.domain.model import SolveRequest, SolveResult

PLACERS: dict[str, Callable[[SolveRequest], SolveResult]] = {
    "volcano": volcano.place,
    "bestfit": bestfit.place,
    "random": random_fit.place,
    "bestfit-share": sharebestfit.place,
    "gpupacking": gpupacking.place,
    "fgd": fgd.place,
}


def placer(name: str) -> Callable[[SolveRequest], SolveResult]:
    """A baseline's ``place`` by name."""
    if name not in PLACERS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(PLACERS)}")
    return PLACERS[name]
