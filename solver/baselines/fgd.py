"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23, "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent"), as its simulator runs it.

For each pod and each node that fits it, FGD tries the placement on the node (for a GPU share: on each
GPU that fits, keeping the best) and scores it by how much the node's fragmentation
(``solver.baselines.fragmentation``) drops: ``int(sigmoid((F_before - F_after) / 1000) * 100)``. The pod goes
to the highest-scoring node (ties: lowest node rank) and, for a share, to the GPU that scored best (ties:
lowest index); whole GPUs are the first idle ones. Greedy descent along the fragmentation gradient, one
pod at a time.

Scores depend only on the node's free resources and the pod's shape, so they are memoised: a node's
score is recomputed only after something lands on it.

Variants for the tie-break study (``bench/RESULTS-replay.md``): ``points`` other than 100 rescales the
integer score (0: the exact drop, no ties at all), and ``tie`` names a key (``TIES``) that ranks nodes
of equal score before the node rank does. The defaults are the published FGD.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from solver.baselines.adapter import place_with
from solver.baselines.fragmentation import Workload, node_fragmentation
from solver.baselines.sharing import MILLI, Choice, ClusterState, PodSpec
from solver.domain.model import SolveRequest, SolveResult


def sigmoid_score(delta: float, points: int = 100) -> float:
    """The simulator's integer score for a fragmentation drop of ``delta`` milli-GPU (``points`` = 100);
    ``points`` = 0 keeps the exact drop."""
    if not points:
        return delta
    return int(1.0 / (1.0 + math.exp(-delta / 1000.0)) * points)


TieKey = Callable[[ClusterState, int, PodSpec], float]


def _used_fraction(state: ClusterState, i: int, pod: PodSpec) -> float:
    """The node whose GPUs are more used: a fuller node closes up, an emptier one stays whole."""
    return round(1.0 - float(state.total_left[i]) / max(1, int(state.gpu_count[i]) * MILLI), 3)


def _least_free(state: ClusterState, i: int, pod: PodSpec) -> float:
    """Best fit: the least free GPU milli, then the least free CPU."""
    return -float(state.total_left[i]) * 1e9 - float(state.cpu_left[i])


def _fill(workload: Workload) -> TieKey:
    """The solver's FILL packing: a GPU pod to the node whose GPUs are most used; a CPU-only pod to
    the node with the most CPU to spare beyond what its free GPUs want at the workload's CPU per GPU."""
    gpu = [p for p in workload if p.milli]
    demand = sum(p.popularity * p.milli * p.gpus for p in gpu)
    per_milli = sum(p.popularity * p.cpu for p in gpu) / demand if demand else 0.0

    def key(state: ClusterState, i: int, pod: PodSpec) -> float:
        if pod.gpus:
            return _used_fraction(state, i, pod)
        return float(state.cpu_left[i]) - per_milli * float(state.total_left[i])

    return key


def _cpu_only(make: Callable[[Workload], TieKey]) -> Callable[[Workload], TieKey]:
    """A tie key for CPU-only pods alone; GPU pods keep FGD's node rank (issue 25's cpu250 study)."""

    def made(workload: Workload) -> TieKey:
        key = make(workload)
        return lambda state, i, pod: 0.0 if pod.gpus else key(state, i, pod)

    return made


def _always(key: TieKey) -> Callable[[Workload], TieKey]:
    return lambda workload: key


# Tie keys by name, each made for a workload; higher wins, then the node rank.
TIES: dict[str, Callable[[Workload], TieKey] | None] = {
    "rank": None,  # the published FGD: the node rank alone
    "fill": _fill,
    "spare": _cpu_only(_fill),  # FILL's rule for CPU-only pods: where CPU is spare beside free GPUs
    "cpu-only-least-cpu": _cpu_only(_always(lambda state, i, pod: -float(state.cpu_left[i]))),
    "cpu-only-most-cpu": _cpu_only(_always(lambda state, i, pod: float(state.cpu_left[i]))),
    "cpu-only-fewest-free-gpus": _cpu_only(_always(lambda state, i, pod: -float(state.total_left[i]))),
    # fewest free GPUs, then the least free CPU (best fit on the CPU that GPU pods can no longer use)
    "cpu-only-bestfit": _cpu_only(
        _always(lambda state, i, pod: -float(state.total_left[i]) * 1e7 - float(state.cpu_left[i]))
    ),
    "used": _always(_used_fraction),
    "bestfit": _always(_least_free),
    "fewer-gpus": _always(lambda state, i, pod: -float(state.gpu_count[i])),
    "more-gpus": _always(lambda state, i, pod: float(state.gpu_count[i])),
    "less-cpu-per-gpu": _always(
        lambda state, i, pod: -float(state.cpu_left[i]) / max(1, int(state.gpu_count[i]))
    ),
    "more-cpu-per-gpu": _always(
        lambda state, i, pod: float(state.cpu_left[i]) / max(1, int(state.gpu_count[i]))
    ),
}


class FGD:
    """FGD against a fixed workload of typical pods."""

    name = "fgd"

    def __init__(
        self,
        workload: Workload,
        *,
        points: int = 100,
        tie: str = "rank",
        tight_gpu: bool = False,
        strand: float = 0.0,
    ) -> None:
        self.workload = workload
        # ``strand`` > 0 adds to a node's fragmentation the free milli-GPU its free CPU cannot feed at
        # the workload's CPU per milli-GPU, times ``strand`` (FGD counts a GPU lost to CPU only where
        # a typical pod no longer fits at all, so CPU drained a little at a time goes unseen).
        gpu = [p for p in workload if p.milli]
        demand = sum(p.popularity * p.milli * p.gpus for p in gpu)
        self.cpu_per_milli = sum(p.popularity * p.cpu for p in gpu) / demand if demand else 0.0
        self.strand = strand
        self.points = points
        # A share goes to the first of the node's best-scored GPUs; with ``tight_gpu``, to the one
        # with the least free (best fit inside the node), which is what the solver's decode does.
        self.tight_gpu = tight_gpu
        make = TIES[tie]
        self.tie = make(workload) if make is not None else None
        self._frag: dict[tuple, float] = {}
        self._score: dict[tuple, tuple[float, tuple[int, ...]]] = {}

    def fragmentation(self, cpu_free: int, free: Sequence[int], model: str) -> float:
        key = (cpu_free, model, tuple(sorted(free)))
        value = self._frag.get(key)
        if value is None:
            value = node_fragmentation(free, cpu_free, self.workload, model)
            if self.strand and self.cpu_per_milli:
                value += self.strand * max(0.0, sum(free) - cpu_free / self.cpu_per_milli)
            self._frag[key] = value
        return value

    def score(self, state: ClusterState, i: int, pod: PodSpec) -> tuple[float, tuple[int, ...]]:
        """(score, GPUs) of placing ``pod`` on node ``i``, memoised on the node's state."""
        key = (state.key(i), pod.shape, pod.gpu_memory, pod.exclusive)
        hit = self._score.get(key)
        if hit is None:
            hit = self._evaluate(state, i, pod)
            self._score[key] = hit
        return hit

    def _evaluate(self, state: ClusterState, i: int, pod: PodSpec) -> tuple[float, tuple[int, ...]]:
        cpu, model, free = int(state.cpu_left[i]), state.models[i], state.free_of(i)
        before = self.fragmentation(cpu, free, model)
        if pod.is_share and not pod.exclusive:
            usable = state.gpu_fits(pod)[i, : len(free)].tolist()
            best, best_gpu, seen = (-math.inf, 0), -1, set()
            for g, f in enumerate(free):
                if not usable[g] or f in seen:  # equal free milli leaves the same node: same score
                    continue
                seen.add(f)
                after = list(free)
                after[g] -= pod.milli
                s = sigmoid_score(before - self.fragmentation(cpu - pod.cpu, after, model), self.points)
                key = (s, -f if self.tight_gpu else 0)
                if key > best:
                    best, best_gpu = key, g
            return best[0], (best_gpu,)
        usable = state.gpu_fits(pod)[i, : len(free)].tolist() if pod.gpus else []
        gpus = tuple([g for g, ok in enumerate(usable) if ok][: pod.gpus])
        after = list(free)
        for g in gpus:
            after[g] = 0 if pod.exclusive else after[g] - MILLI
        return sigmoid_score(before - self.fragmentation(cpu - pod.cpu, after, model), self.points), gpus

    def choose(self, state: ClusterState, pod: PodSpec) -> Choice | None:
        mask = state.feasible(pod)
        nodes = np.flatnonzero(mask)
        if nodes.size == 0:
            return None
        rank, tie = state.rank, self.tie
        if tie is not None:
            keyed = [(self.score(state, i, pod), i) for i in nodes.tolist()]
            (_, gpus), i = max(keyed, key=lambda k: (k[0][0], tie(state, k[1], pod), -rank[k[1]]))
            return i, gpus
        best_node, best_score, best_rank, best_gpus = -1, -math.inf, 0, ()
        for i in nodes.tolist():
            s, gpus = self.score(state, i, pod)
            if s > best_score or (s == best_score and rank[i] < best_rank):
                best_node, best_score, best_rank, best_gpus = i, s, rank[i], gpus
        return best_node, best_gpus


def place(request: SolveRequest, workload: Workload | None = None) -> SolveResult:
    """FGD over a request, one member at a time, gangs all-or-nothing; the workload defaults to the
    request's ``policy.workload`` or, if empty, the shapes of the batch itself."""
    return place_with(request, lambda wl: FGD(workload if workload is not None else wl))
