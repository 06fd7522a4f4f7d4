"""Fragmentation against a workload profile (FGD, Weng et al., USENIX ATC'23), and stranded GPUs.

The workload is a set of typical requests with their popularity. For one node and one typical
request m, the fragment is the free GPU compute m could never use there: if the node can host m,
the free compute on GPUs whose free part is below what m needs of one GPU; if it cannot host m at
all, all of its free compute. A node's fragmentation is the popularity-weighted sum; the cluster's
is the sum over nodes. A GPU is *stranded* when it sits free on a node that can host none of the
typical requests.

All amounts are in milli-GPU. A node is described by the free milli of each of its GPUs (1000 for
an idle GPU); this module knows nothing of the model, so the objective, the metrics and the tests
share one definition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from solver.model import MemberShape, WorkloadShape


@dataclass(frozen=True)
class Typical:
    """A typical request: ``gpus`` whole GPUs, or a share of ``milli`` of one GPU."""

    gpus: int
    milli: int
    popularity: float

    def per_gpu(self) -> int:
        return 1000 if self.gpus else self.milli

    def fits(self, free: Sequence[int]) -> bool:
        if self.gpus:
            return sum(f == 1000 for f in free) >= self.gpus
        return any(f >= self.milli for f in free)


def profile(workload: Sequence[WorkloadShape], members: Iterable[MemberShape]) -> tuple[Typical, ...]:
    """The caller's workload, or else the batch's own member shapes weighted by how many ask."""
    if workload:
        total = sum(w.popularity for w in workload)
        return tuple(Typical(w.gpus, w.milli, w.popularity / total) for w in workload)
    counts = Counter(
        (m.gpus, 0 if m.gpus or m.gpu_share is None else m.gpu_share.milli)
        for m in members
        if m.gpus or (m.gpu_share is not None and m.gpu_share.milli)
    )
    total = sum(counts.values())
    return tuple(Typical(g, milli, n / total) for (g, milli), n in sorted(counts.items()))


def node_fragmentation(free: Sequence[int], workload: Sequence[Typical]) -> float:
    """FGD's fragmentation of one node, in milli-GPU, given each GPU's free milli."""
    total = 0.0
    for m in workload:
        lost = sum(f for f in free if 0 < f < m.per_gpu()) if m.fits(free) else sum(free)
        total += m.popularity * lost
    return total


def stranded(free: Sequence[int], workload: Sequence[Typical]) -> int:
    """Free milli-GPU on a node where no typical request fits (0 where one does)."""
    if not workload or any(m.fits(free) for m in workload):
        return 0
    return sum(free)
