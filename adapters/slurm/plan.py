"""A verified placement in Slurm's terms, and the plan comment people and the TaskProlog read.

Slurm enforces a plan only through what it allocates itself, so the plan becomes
``req_nodes`` (the chosen nodes), ``min_nodes = max_nodes`` and ``tres_per_node`` as GRES counts per
switch group (``gres:gpu:sw2:2,gres:nic:sw2:2``). Two consequences shape this module:

* ``tres_per_node`` is one request for every node of the job, so every node must use the same
  *signature* (GRES type → count). When the solver's nodes differ, a signature every planned node
  can satisfy with free devices is chosen instead (same counts per group, so the same alignment);
  when there is none the plan cannot be enforced and is not used.
* Inside a group Slurm takes the lowest free IDX of the type. The plan is rewritten to those
  devices, so the comment names exactly what ``scontrol show job -d`` will show. Devices of one
  group are interchangeable for GPU↔NIC alignment (all are PXB or closer to each other).

Comment format (appended to the user's comment, space-separated tokens, version first)::

    topoplace/v1 id=<plan id> <hostlist>:gpu=<GPU indices>:nic=<NIC names> [<hostlist>:…]

e.g. ``topoplace/v1 id=3f2a n[01-02]:gpu=4,5:nic=mlx5_8,mlx5_9``: on n01 and n02 the job's GPUs are
nvidia-smi indices 4 and 5, paired in order with mlx5_8 and mlx5_9 (GPU k of the list with NIC k).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from adapters.slurm.hostlist import compress
from adapters.slurm.inventory import DeviceMap, SlurmInventory
from adapters.slurm.jobdesc import JobSpec
from adapters.slurm.plancomment import PLAN_TAG, ParsedPlan, parse_plan_comment, plan_comment
from solver.domain.model import JobResult, Node

Signature = tuple[tuple[str, str, int], ...]  # ((gres name, type, count), …) sorted


@dataclass(frozen=True)
class NodePlan:
    node: str
    gpus: tuple[str, ...]  # GPU ids (GPU4 …)
    nics: tuple[str, ...]


@dataclass(frozen=True)
class SlurmPlan:
    plan_id: str
    nodes: tuple[NodePlan, ...]
    signature: Signature
    tres_per_node: str
    req_nodes: str
    rewritten: bool  # devices differ from the solver's own choice (same groups or signature)

    def comment(self) -> str:
        return plan_comment(self.plan_id, self.nodes)


class NotEnforceable(ValueError):
    """A verified placement Slurm cannot be made to follow (e.g. nodes needing different GRES)."""


# --------------------------------------------------------------------------- signatures


def _signature(gpus: tuple[str, ...], nics: tuple[str, ...], device_map: DeviceMap) -> Signature:
    counts = Counter(("gpu", device_map.type_of[g]) for g in gpus)
    counts.update(("nic", device_map.type_of[n]) for n in nics)
    return tuple(sorted((name, gtype, count) for (name, gtype), count in counts.items()))


def _free(node: Node) -> tuple[set[str], set[str]]:
    used_gpus = {g for a in node.allocations for g in a.gpus}
    used_nics = {n for a in node.allocations for n in a.nics}
    return {g.id for g in node.gpus if g.healthy} - used_gpus, {
        n.name for n in node.nics if n.healthy
    } - used_nics


def _devices_for(
    signature: Signature, device_map: DeviceMap, free: tuple[set[str], set[str]]
) -> NodePlan | None:
    """Slurm's own choice for ``signature``: per type, the lowest free IDX. None if it does not fit."""
    gpus: list[str] = []
    nics: list[str] = []
    for name, gtype, count in signature:
        table, pool, out = (
            (device_map.gpu_by_idx, free[0], gpus)
            if name == "gpu"
            else (device_map.nic_by_idx, free[1], nics)
        )
        chosen = [d for d in table if d in pool and device_map.type_of.get(d) == gtype][:count]
        if len(chosen) < count:
            return None
        out.extend(chosen)
    order_g = {g: i for i, g in enumerate(device_map.gpu_by_idx)}
    order_n = {n: i for i, n in enumerate(device_map.nic_by_idx)}
    return NodePlan(
        "", tuple(sorted(gpus, key=order_g.__getitem__)), tuple(sorted(nics, key=order_n.__getitem__))
    )


def _pair_order(plan: NodePlan, device_map: DeviceMap) -> NodePlan:
    """List NICs so that NIC k sits in GPU k's group where possible (the comment pairs by position)."""
    remaining = list(plan.nics)
    ordered: list[str] = []
    for gpu in plan.gpus:
        match = next((n for n in remaining if device_map.type_of.get(n) == device_map.type_of.get(gpu)), None)
        if match is not None:
            ordered.append(match)
            remaining.remove(match)
    return NodePlan(plan.node, plan.gpus, tuple(ordered + remaining))


def to_slurm_plan(result: JobResult, spec: JobSpec, inventory: SlurmInventory) -> SlurmPlan:
    """The enforceable form of a placed job; raises NotEnforceable when there is none."""
    nodes = {n.name: n for n in inventory.inventory.nodes}
    members = sorted(result.members, key=lambda m: m.index)
    if len({m.node for m in members}) != len(members):
        raise NotEnforceable("the solver put two members on one node; Slurm's -N needs distinct nodes")
    own = {m.node: _signature(m.gpus, m.nics, inventory.device_maps[m.node]) for m in members}
    candidates = Counter(own.values()).most_common()
    for signature, _ in candidates:
        plans = []
        for member in members:
            device_map = inventory.device_maps[member.node]
            chosen = _devices_for(signature, device_map, _free(nodes[member.node]))
            if chosen is None:
                break
            plans.append(_pair_order(NodePlan(member.node, chosen.gpus, chosen.nics), device_map))
        else:
            rewritten = any(
                set(p.gpus) != set(m.gpus) or set(p.nics) != set(m.nics)
                for p, m in zip(plans, members, strict=True)
            )
            return SlurmPlan(
                plan_id=spec.job.id,
                nodes=tuple(plans),
                signature=signature,
                tres_per_node=tres_per_node(signature, spec),
                req_nodes=compress([p.node for p in plans], sort=True),
                rewritten=rewritten,
            )
    raise NotEnforceable(
        "the planned nodes need different GRES per node and no single --gres fits them all: "
        + "; ".join(f"{n}: {format_signature(s)}" for n, s in own.items())
    )


def format_signature(signature: Signature) -> str:
    return ",".join(f"{name}:{gtype}:{count}" for name, gtype, count in signature)


def tres_per_node(signature: Signature, spec: JobSpec) -> str:
    items = [f"{spec.gres_prefix}{name}:{gtype}:{count}" for name, gtype, count in signature]
    items += [f"{spec.gres_prefix}{other}" for other in spec.other_tres_per_node]
    return ",".join(items)


__all__ = [
    "PLAN_TAG",
    "NodePlan",
    "NotEnforceable",
    "ParsedPlan",
    "SlurmPlan",
    "parse_plan_comment",
    "plan_comment",
    "to_slurm_plan",
]
