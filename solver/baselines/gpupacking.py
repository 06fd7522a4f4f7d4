"""GpuPacking: the packing baseline of FGD's evaluation (Weng et al., ATC'23, §6), as its simulator
scores it. Prefer, in this order: a share on an already shared GPU (the fuller the GPU, the better), then
idle GPUs on a node that is already in use (the fewer taken, the better), then a node whose GPUs are all
idle (the fewer GPUs it has, the better) — keeping whole nodes free for multi-GPU pods. Pods asking no GPU
score the same everywhere (ties go to the lowest node rank). GPU choice: best fit.
"""

from __future__ import annotations

import numpy as np

from solver.baselines.adapter import place_with
from solver.baselines.sharing import MILLI, Choice, ClusterState, PodSpec, default_gpus
from solver.domain.model import SolveRequest, SolveResult

MAX_SCORE = 100


def packing_scores(state: ClusterState, pod: PodSpec) -> np.ndarray:
    """Integer packing score of every node for ``pod`` (meaningful only where the pod fits)."""
    n = len(state)
    if pod.total_milli <= 0:
        return np.zeros(n, dtype=np.int64)
    all_idle = state.full == state.gpu_count
    idle_node = np.maximum(MAX_SCORE // 3 - state.full, state.full)
    if pod.is_share and not pod.exclusive:
        fits = state.gpu_fits(pod)
        tight = np.where(fits, state.gpu_left, MILLI + 1).min(axis=1)  # best-fit GPU's free milli
        shared = np.maximum(MAX_SCORE - (tight * 100 // MILLI) // 10, MAX_SCORE // 2)
        on_idle_gpu = np.full(n, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3))
        used_node = np.where(tight >= MILLI, on_idle_gpu, shared)
    else:
        used_node = np.full(n, max(MAX_SCORE // 2 - pod.gpus, MAX_SCORE // 3))
    return np.where(all_idle, idle_node, used_node)


class GpuPacking:
    name = "gpupacking"

    def choose(self, state: ClusterState, pod: PodSpec) -> Choice | None:
        node = state.pick_best(state.feasible(pod), packing_scores(state, pod))
        return None if node is None else (node, default_gpus(state, node, pod))


def place(request: SolveRequest) -> SolveResult:
    """GpuPacking over a request, one member at a time, gangs all-or-nothing."""
    return place_with(request, lambda _workload: GpuPacking())
