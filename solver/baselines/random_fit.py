"""Random: the random-fit baseline of FGD's evaluation (Weng et al., ATC'23, §6). Each pod goes to a node
drawn uniformly from those that fit it; a GPU share goes to a GPU drawn uniformly (reservoir sampling)
from the GPUs that fit; whole GPUs are the first idle ones.

Draws come from a Go ``math/rand`` stream (``solver.baselines.gorand``), as in the simulator: a lone
feasible node is taken without a draw. The simulator's candidate order comes from a parallel filter, so
its exact draws cannot be replayed; only the distribution is the same.
"""

from __future__ import annotations

import numpy as np

from solver.baselines.adapter import place_with
from solver.baselines.gorand import GoRand
from solver.baselines.sharing import Choice, ClusterState, PodSpec, default_gpus
from solver.domain.model import SolveRequest, SolveResult


class RandomFit:
    name = "random"

    def __init__(self, rng: GoRand) -> None:
        self.rng = rng

    def choose(self, state: ClusterState, pod: PodSpec) -> Choice | None:
        nodes = np.flatnonzero(state.feasible(pod))
        if nodes.size == 0:
            return None
        node = int(nodes[self.rng.intn(nodes.size)]) if nodes.size > 1 else int(nodes[0])
        if not (pod.is_share and not pod.exclusive):
            return node, default_gpus(state, node, pod)
        usable = state.gpu_fits(pod)[node, : state.gpu_count[node]].tolist()
        chosen, seen = -1, 0
        for g, ok in enumerate(usable):
            if ok:
                seen += 1
                if self.rng.intn(seen) == 0:
                    chosen = g
        return node, (chosen,)


def place(request: SolveRequest, seed: int | None = None) -> SolveResult:
    """Random fit over a request; the draws are seeded by ``seed`` or the request's ``policy.seed``."""
    rng = GoRand(request.policy.seed if seed is None else seed)
    return place_with(request, lambda _workload: RandomFit(rng))
