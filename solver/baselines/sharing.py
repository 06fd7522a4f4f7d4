"""Fast cluster state for the GPU-sharing baselines (Random, BestFit, GpuPacking, FGD).

Why a second representation: the openb replay places ~11,000 pods one at a time on 1,213 nodes, ten seeds
per policy. Re-validating pydantic inventories per pod would take hours; these numpy arrays are updated in
place per bound pod. The ``place(request)`` interface (``solver.baselines.adapter``) builds this state
from a ``SolveRequest`` and turns the choices back into domain results, so both paths run the same code.

A node here is what the FGD simulator sees: free milli-CPU, free memory, one GPU model, and the free
milli-GPU of each GPU (1000 = idle). A GPU that may take no more work (unhealthy, or held by a mutex
allocation) simply has 0 free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MILLI = 1000
UNTRACKED = 1 << 50  # CPU or memory a node does not track: never the binding constraint


@dataclass(frozen=True, slots=True)
class PodSpec:
    """One pod: CPU and memory, and either ``gpus`` whole GPUs (milli 1000) or one GPU share (gpus 1,
    milli < 1000), optionally restricted to GPU models. ``gpu_memory`` (MiB per GPU) is checked only
    where the inventory gives GPU memory."""

    cpu: int
    memory: int
    gpus: int = 0
    milli: int = 0
    models: tuple[str, ...] = ()
    gpu_memory: int = 0
    exclusive: bool = False  # mutex: idle GPUs only, and nothing shares them afterwards
    name: str = ""

    @property
    def is_share(self) -> bool:
        return self.gpus == 1 and 0 < self.milli < MILLI

    @property
    def total_milli(self) -> int:
        return self.gpus * self.milli

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """What a score depends on besides the node (FGD's "pod resource"; memory is not part of it)."""
        return (self.cpu, self.milli, self.gpus, self.models)


Choice = tuple[int, tuple[int, ...]]  # (node index, GPU indices on it)


class PodPlacer(Protocol):
    """A greedy placer: the node and GPUs for one pod, or None if it fits nowhere."""

    name: str

    def choose(self, state: ClusterState, pod: PodSpec) -> Choice | None: ...


class ClusterState:
    """Mutable per-node resources; ``rank`` breaks score ties (lowest wins)."""

    def __init__(
        self,
        names: Sequence[str],
        cpu: Sequence[int],
        memory: Sequence[int],
        gpu_free: Sequence[Sequence[int]],
        models: Sequence[str],
        *,
        ranks: Sequence[int] | None = None,
        gpu_memory_free: Sequence[Sequence[int]] | None = None,
    ) -> None:
        n = len(names)
        width = max((len(g) for g in gpu_free), default=0) or 1
        self.names = list(names)
        self.models = list(models)
        self.gpu_count = np.array([len(g) for g in gpu_free], dtype=np.int64)
        self.gpu_left = np.zeros((n, width), dtype=np.int64)
        for i, free in enumerate(gpu_free):
            self.gpu_left[i, : len(free)] = free
        self.tracks_gpu_memory = gpu_memory_free is not None
        self.gpu_mem_left = np.full((n, width), UNTRACKED, dtype=np.int64)
        if gpu_memory_free is not None:
            for i, free in enumerate(gpu_memory_free):
                self.gpu_mem_left[i, : len(free)] = free
        self.cpu_left = np.array(cpu, dtype=np.int64)
        self.mem_left = np.array(memory, dtype=np.int64)
        self.rank = np.array(ranks if ranks is not None else range(n), dtype=np.int64)
        self.full = (self.gpu_left == MILLI).sum(axis=1)
        self.total_left = self.gpu_left.sum(axis=1)
        self.capacity_milli = int(self.gpu_count.sum()) * MILLI
        self.allocated_milli = 0
        self._keys: list[tuple | None] = [None] * n
        self._model_masks: dict[tuple[str, ...], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.names)

    # ------------------------------------------------------------------ queries

    def model_mask(self, models: tuple[str, ...]) -> np.ndarray:
        if models not in self._model_masks:
            self._model_masks[models] = np.array([not models or m in models for m in self.models])
        return self._model_masks[models]

    def gpu_fits(self, pod: PodSpec) -> np.ndarray:
        """Per node and GPU: can this GPU take (its part of) the pod?"""
        if pod.exclusive or not pod.is_share:
            ok = self.gpu_left == MILLI
        else:
            ok = self.gpu_left >= max(pod.milli, 1)
        if pod.gpu_memory and self.tracks_gpu_memory:
            ok &= self.gpu_mem_left >= pod.gpu_memory
        return ok

    def feasible(self, pod: PodSpec) -> np.ndarray:
        """Nodes that pass the simulator's filter: CPU, memory, GPU model, and GPUs for the request."""
        ok = (self.cpu_left >= pod.cpu) & (self.mem_left >= pod.memory)
        if pod.gpus:
            ok &= self.model_mask(pod.models)
            if pod.is_share or pod.exclusive or (pod.gpu_memory and self.tracks_gpu_memory):
                ok &= self.gpu_fits(pod).sum(axis=1) >= pod.gpus
            else:
                ok &= self.full >= pod.gpus
        return ok

    def free_of(self, i: int) -> list[int]:
        """Free milli of node ``i``'s GPUs, in index order."""
        return self.gpu_left[i, : self.gpu_count[i]].tolist()

    def key(self, i: int) -> tuple:
        """Everything a score of node ``i`` depends on (for memoising): free CPU, model, per-GPU free."""
        key = self._keys[i]
        if key is None:
            gpu = tuple(self.free_of(i))
            mem = tuple(self.gpu_mem_left[i, : self.gpu_count[i]].tolist()) if self.tracks_gpu_memory else ()
            key = (int(self.cpu_left[i]), self.models[i], gpu, mem)
            self._keys[i] = key
        return key

    def pick_best(self, mask: np.ndarray, score: np.ndarray) -> int | None:
        """The feasible node with the highest score; ties go to the lowest rank."""
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return None
        values = score[candidates]
        top = candidates[values == values.max()]
        return int(top[np.argmin(self.rank[top])])

    # ------------------------------------------------------------------ updates

    def bind(self, i: int, pod: PodSpec, gpus: Sequence[int]) -> None:
        self._apply(i, pod, gpus, sign=1)

    def unbind(self, i: int, pod: PodSpec, gpus: Sequence[int]) -> None:
        self._apply(i, pod, gpus, sign=-1)

    def _apply(self, i: int, pod: PodSpec, gpus: Sequence[int], *, sign: int) -> None:
        self.cpu_left[i] -= sign * pod.cpu
        self.mem_left[i] -= sign * pod.memory
        take = MILLI if pod.exclusive else pod.milli  # a mutex share closes its GPU to others
        for g in gpus:
            self.gpu_left[i, g] -= sign * take
            if pod.gpu_memory and self.tracks_gpu_memory:
                self.gpu_mem_left[i, g] -= sign * pod.gpu_memory
        row = self.gpu_left[i]
        self.full[i] = int((row == MILLI).sum())
        self.total_left[i] = int(row.sum())
        self.allocated_milli += sign * pod.total_milli
        self._keys[i] = None


# ---------------------------------------------------------------------- GPU choice inside a node


def first_free(free: Sequence[int], count: int) -> tuple[int, ...]:
    """The first ``count`` idle GPUs in index order (how the simulator hands out whole GPUs)."""
    return tuple([g for g, f in enumerate(free) if f == MILLI][:count])


def tightest(free: Sequence[int], milli: int, usable: Sequence[bool] | None = None) -> int:
    """The GPU with the least free milli that still fits ``milli``; lowest index on ties (best fit)."""
    best = -1
    for g, f in enumerate(free):
        if f >= milli and (usable is None or usable[g]) and (best < 0 or f < free[best]):
            best = g
    return best


def default_gpus(state: ClusterState, i: int, pod: PodSpec) -> tuple[int, ...]:
    """Best-fit GPU choice: a share on the tightest GPU, whole GPUs the first idle ones."""
    if not pod.gpus:
        return ()
    usable = state.gpu_fits(pod)[i, : state.gpu_count[i]].tolist()
    if pod.is_share and not pod.exclusive:
        return (tightest(state.free_of(i), pod.milli, usable),)
    return tuple([g for g, ok in enumerate(usable) if ok][: pod.gpus])
