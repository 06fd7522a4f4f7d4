"""The plan comment ``job_submit.lua`` appends to a job, written and read (standard library only).

The TaskProlog's helper reads it on compute nodes with ``python3 -I -S``, so nothing here may import
the solver. Format (space-separated tokens, version first)::

    topoplace/v1 id=<plan id> <hostlist>:gpu=<GPU indices>:nic=<NIC names> [<hostlist>:…]

The plan only steers: what a job uses is what Slurm allocated (:mod:`adapters.slurm.job_devices`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from adapters.slurm.hostlist import HostlistError, compress, expand

PLAN_TAG = "topoplace/v1"


class PlannedNode(Protocol):
    node: str
    gpus: tuple[str, ...]  # GPU ids (GPU4 …)
    nics: tuple[str, ...]


def _gpu_numbers(gpus: tuple[str, ...]) -> str:
    return ",".join(g.removeprefix("GPU") for g in gpus)


def plan_comment(plan_id: str, nodes: Iterable[PlannedNode]) -> str:
    """Nodes with the same devices share one hostlist entry."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for plan in nodes:
        groups.setdefault((plan.gpus, plan.nics), []).append(plan.node)
    entries = [
        f"{compress(names, sort=True)}:gpu={_gpu_numbers(gpus)}:nic={','.join(nics)}"
        for (gpus, nics), names in groups.items()
    ]
    return " ".join([PLAN_TAG, f"id={plan_id}", *entries])


@dataclass(frozen=True)
class ParsedPlan:
    plan_id: str
    nodes: dict[str, tuple[tuple[int, ...], tuple[str, ...]]]  # node → (GPU indices, NIC names)


def parse_plan_comment(comment: str) -> ParsedPlan | None:
    """The plan in a job's comment (the last ``topoplace/v1`` in it: its id and the entries right after
    it), or None when there is none or it is malformed (a user may write anything in a comment: never
    trust it to be ours)."""
    if PLAN_TAG not in comment:
        return None
    tokens = comment[comment.rindex(PLAN_TAG) :].split()[1:]
    if not tokens or not tokens[0].startswith("id="):
        return None
    nodes: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {}
    for token in tokens[1:]:
        parts = token.split(":")
        if len(parts) != 3 or not parts[1].startswith("gpu=") or not parts[2].startswith("nic="):
            break  # the plan's entries end here (e.g. the next field of ``scontrol show job``)
        try:
            hosts = expand(parts[0])
            gpus = tuple(int(g) for g in parts[1][4:].split(",") if g)
        except (HostlistError, ValueError):
            return None
        nics = tuple(n for n in parts[2][4:].split(",") if n)
        nodes.update(dict.fromkeys(hosts, (gpus, nics)))
    return ParsedPlan(plan_id=tokens[0][3:], nodes=nodes)
