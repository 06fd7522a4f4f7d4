"""Slurm-like best fit for whole-GPU jobs (issue 4's greedy baseline: "best-fit nodes, first aligned GPUs").

Mimics Slurm's ``select/cons_tres`` with ``topology/tree`` as ../shared/reference/slurm.md describes:

- jobs by priority, then submission (request) order; a job runs only with every role's minimum;
- a job with network locality gets the lowest-level switch that can hold it, best fit among those (the
  switch with the fewest free GPUs that still has enough); without locality, the whole cluster;
- each member goes to the node with the fewest free GPUs that can take it (best fit), ties to the smaller
  node name;
- GPUs in index order that have a free NIC within the asked PCIe distance, each with its own NIC (gres
  binding with ``--gres-flags=enforce-binding``-like pairing); with alignment PREFERRED and too few such
  GPUs, the first free GPUs and NICs make up the rest, reported as misaligned.
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.baselines.topology import Free, Greedy, LocalityIndex, Pick, first_aligned_pick
from solver.domain.model import MemberShape, SolveRequest, SolveResult


def fewest_free_after(
    free: Free, shape: MemberShape, pick: Pick, used: Sequence[str], fabric: LocalityIndex
) -> float:
    """Best fit: the fewer GPUs the node keeps free after this member, the better."""
    return -float(len(free.gpus) - len(pick.gpus))


def free_gpus(nodes: Sequence[Free]) -> float:
    """Best-fit switch: the fewest free GPUs that still hold the job."""
    return float(sum(len(f.gpus) for f in nodes))


BESTFIT = Greedy(name="bestfit", pick=first_aligned_pick, node_score=fewest_free_after, domain_key=free_gpus)


def place(request: SolveRequest) -> SolveResult:
    """Slurm-like best-fit placement of the request's jobs (see the module docstring)."""
    return BESTFIT.place(request)
