"""BestFit for GPU sharing: the best-fit baseline of FGD's evaluation (Weng et al., ATC'23, §6), as its
simulator scores it. A node's score is how little of it the pod leaves free, CPU and GPU weighted equally
and normalised by the largest node (128 cores, 8 GPUs):
``int((1 - ((cpu_free - cpu) / 128000 * 0.5 + (gpu_free - gpu) / 8000 * 0.5)) * 100)``; highest score wins,
ties go to the lowest node rank. GPU choice: a share on the tightest GPU, whole GPUs the first idle ones.
"""

from __future__ import annotations

import numpy as np

from solver.baselines.adapter import place_with
from solver.baselines.sharing import Choice, ClusterState, PodSpec, default_gpus
from solver.domain.model import SolveRequest, SolveResult

MAX_SPEC_CPU = 128_000.0
MAX_SPEC_GPU = 8_000.0


def bestfit_scores(state: ClusterState, pod: PodSpec) -> np.ndarray:
    """Integer best-fit score of every node for ``pod`` (meaningful only where the pod fits)."""
    left = (state.cpu_left - pod.cpu) / MAX_SPEC_CPU * 0.5
    left = left + (state.total_left - pod.total_milli) / MAX_SPEC_GPU * 0.5
    return np.trunc((1.0 - left) * 100).astype(np.int64)


class BestFitShare:
    name = "bestfit"

    def choose(self, state: ClusterState, pod: PodSpec) -> Choice | None:
        node = state.pick_best(state.feasible(pod), bestfit_scores(state, pod))
        return None if node is None else (node, default_gpus(state, node, pod))


def place(request: SolveRequest) -> SolveResult:
    """Sharing best fit over a request, one member at a time, gangs all-or-nothing."""
    return place_with(request, lambda _workload: BestFitShare())
