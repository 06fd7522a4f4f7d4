"""FGD's fragmentation measure (Weng et al., USENIX ATC'23, "Beware of Fragmentation"), written from
the paper and the reference note ../shared/reference/device-schedulers.md.

The workload is a set of *typical pods* (request shapes) with their popularity p_m. For one node and one
shape m, the idle GPU milli that m could never use is that shape's fragment:

- m asks for no GPU (CPU-only): every idle GPU milli of the node is a fragment for it, whether or not the
  node has CPU for it (a CPU-only task can use no GPU at all);
- the node is not of a GPU model m accepts, or m does not fit (fewer than ``gpus`` GPUs with at least m's
  per-GPU milli free, or too little CPU): all idle GPU milli is a fragment;
- m fits: only the idle milli of GPUs whose free share is below m's per-GPU request is a fragment.

Node fragmentation F_n = sum_m p_m * frag_m(n); cluster fragmentation = sum_n F_n. FGD places a pod where
F grows least. This module is the benchmark's own copy: the solver has its own implementation, and the
benchmark must not grade the solver with the solver's code.

Arithmetic order follows the published simulator (per-category float sums, then their total), so integer
scores derived from it tie and break the same way as the published runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MILLI = 1000

# Categories of (node, shape) pairs, in the simulator's order; SATISFIED is the one whose idle milli is
# (apart from too-small GPUs) usable. Index positions matter only for the float summation order.
LACK_BOTH, LACK_GPU, SATISFIED, LACK_CPU, CPU_ONLY_FITS, CPU_ONLY_LACKS, NO_ACCESS = range(7)


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """One request shape of the workload and how often it comes (popularity sums to 1)."""

    cpu: int
    milli: int  # per GPU, 0 for CPU-only, 1000 for whole GPUs
    gpus: int
    models: tuple[str, ...] = ()  # accepted GPU models; empty = any
    popularity: float = 1.0


Workload = tuple[TypicalPod, ...]


def typical_pods(
    shapes: Iterable[tuple[int, int, int, tuple[str, ...]]], *, coverage: float = 0.95, cpu_only: bool = True
) -> Workload:
    """The most common shapes ``(cpu, milli, gpus, models)`` covering ``coverage`` of the pods, with
    popularity = count / total renormalised over the kept shapes (FGD's workload model: the paper keeps
    the shapes that make up most of the trace; on openb that is 35 shapes). Ties in count are ordered by
    the shape itself, largest first, so the result does not depend on input order."""
    counts = Counter(s for s in shapes if cpu_only or s[2] > 0)
    total = float(sum(counts.values()))
    if total == 0:
        return ()
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    wanted = coverage * total
    kept: list[tuple[tuple[int, int, int, tuple[str, ...]], float]] = []
    cumulative = 0.0
    for shape, count in ranked:
        if cumulative >= wanted:
            break
        cumulative += count
        kept.append((shape, count / total))
    scale = cumulative / total
    return tuple(
        TypicalPod(cpu=s[0], milli=s[1], gpus=s[2], models=s[3], popularity=p / scale) for s, p in kept
    )


def accessible(node_model: str, models: Sequence[str]) -> bool:
    """A shape that names GPU models accepts only nodes of those models."""
    return not models or node_model in models


def fragment_of(
    free_milli_per_gpu: Sequence[int], cpu_free: int, shape: TypicalPod, model: str = ""
) -> tuple[int, int]:
    """(category, fragment milli) of one node for one shape; see the module docstring."""
    total = sum(free_milli_per_gpu)
    if shape.milli == 0:
        return (CPU_ONLY_FITS if cpu_free >= shape.cpu else CPU_ONLY_LACKS), total
    if not accessible(model, shape.models):
        return NO_ACCESS, total
    enough = sum(1 for f in free_milli_per_gpu if f >= shape.milli) >= shape.gpus
    if not enough:
        return (LACK_GPU if cpu_free >= shape.cpu else LACK_BOTH), total
    if cpu_free < shape.cpu:
        return LACK_CPU, total
    return SATISFIED, sum(f for f in free_milli_per_gpu if f < shape.milli)


def node_fragmentation(
    free_milli_per_gpu: Sequence[int], cpu_free: int, workload: Workload, model: str = ""
) -> float:
    """F_n: the popularity-weighted idle GPU milli of one node that the workload's shapes cannot use."""
    buckets = [0.0] * 7
    for shape in workload:
        category, milli = fragment_of(free_milli_per_gpu, cpu_free, shape, model)
        # a SATISFIED shape's fragment is the too-small GPUs, which the simulator files under LACK_GPU
        buckets[LACK_GPU if category == SATISFIED else category] += shape.popularity * float(milli)
    out = 0.0
    for i, value in enumerate(buckets):
        if i != SATISFIED:
            out += value
    return out


def cluster_fragmentation(nodes: Iterable[tuple[Sequence[int], int, str]], workload: Workload) -> float:
    """Sum of node fragmentation over ``(free_milli_per_gpu, cpu_free, model)`` triples."""
    return sum(node_fragmentation(free, cpu, workload, model) for free, cpu, model in nodes)
