"""One member on its own: an existing, schedulable node matching its selector; exactly the GPUs it
asked for (healthy, free, of an asked model, of no avoided one) and the RDMA NICs it asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Iterator

from solver.answer.verify.alignment import alignment
from solver.answer.verify.numa import numa
from solver.answer.verify.nvlink import nvlink
from solver.answer.verify.shares import share_record
from solver.answer.verify.view import NodeView, Placed
from solver.domain.model import (
    NicMode,
    Role,
)


def member(nodes: dict[str, NodeView], p: Placed) -> Iterator[str]:
    """The rules one member obeys on its own: its node, its devices, its topology."""
    role, view = p.role, nodes.get(p.member.node)
    if role is None:
        return  # reported by gang
    if view is None:
        yield f"{p.who}: node {p.member.node} does not exist"
        return
    yield from node_choice(view, role, p)
    gpus_ok = yield from gpus(view, role, p)
    nics_ok = yield from nics(view, role, p)
    if gpus_ok and nics_ok:  # topology of devices that do not exist would only repeat the above
        yield from alignment(view, role, p)
        yield from numa(view, role, p)
        yield from nvlink(view, role, p)


def node_choice(view: NodeView, role: Role, p: Placed) -> Iterator[str]:
    if not view.node.schedulable:
        yield f"{p.who}: node {view.node.name} is not schedulable"
    for key, want in role.member.node_selector.items():
        have = view.node.labels.get(key)
        if have != want:
            shown = "no such label" if have is None else f"{key}={have}"
            yield f"{p.who}: node selector {key}={want} does not match the node ({shown})"


def gpus(view: NodeView, role: Role, p: Placed) -> Generator[str, None, bool]:
    """The member's GPUs: the asked count, distinct, existing, healthy, free, of an asked model.
    Returns (as the generator's value) whether every GPU exists, so topology can be checked."""
    shape, ids = role.member, p.member.gpus
    wanted = shape.gpus if shape.gpu_share is None else 1  # a share sits on exactly one GPU
    if len(ids) != wanted:
        yield f"{p.who}: has {len(ids)} GPUs but the role asks for {wanted}"
    yield from share_record(role, p)
    for gpu_id, times in Counter(ids).items():
        if times > 1:
            yield f"{p.who}: GPU {gpu_id} is listed {times} times"
    all_exist = True
    for gpu_id in dict.fromkeys(ids):
        gpu = view.gpus.get(gpu_id)
        if gpu is None:
            all_exist = False
            yield f"{p.who}: GPU {gpu_id} does not exist on the node"
            continue
        if not gpu.healthy:
            yield f"{p.who}: GPU {gpu_id} is unhealthy"
        if ("GPU", gpu_id) in view.held_by:
            yield f"{p.who}: GPU {gpu_id} is already allocated to {view.held_by['GPU', gpu_id]}"
        elif gpu_id in view.shares and (shape.gpu_share is None or shape.mutex):
            yield f"{p.who}: GPU {gpu_id} already runs shares; a whole-GPU or mutex member needs it idle"
        if shape.gpu_models and gpu.model not in shape.gpu_models:
            yield (
                f"{p.who}: GPU {gpu_id} is a {gpu.model or 'model-less GPU'}, "
                f"not one of {', '.join(shape.gpu_models)}"
            )
        if gpu.model in shape.avoid_gpu_models:
            yield f"{p.who}: GPU {gpu_id} is a {gpu.model}, a model the role avoids"
    return all_exist


def nics_wanted(role: Role) -> int:
    shape = role.member
    if shape.nics.mode == NicMode.PER_GPU:
        return shape.gpus
    if shape.nics.mode == NicMode.PER_MEMBER:
        return shape.nics.count
    return 0


def nics(view: NodeView, role: Role, p: Placed) -> Generator[str, None, bool]:
    """The member's NICs: the asked count, distinct, existing RDMA, healthy, free. Returns whether
    every NIC exists."""
    ids, wanted = p.member.nics, nics_wanted(role)
    if len(ids) != wanted:
        yield f"{p.who}: has {len(ids)} NICs but the role asks for {wanted} ({role.member.nics.mode.name})"
    for name, times in Counter(ids).items():
        if times > 1:
            yield f"{p.who}: NIC {name} is listed {times} times"
    all_exist = True
    for name in dict.fromkeys(ids):
        nic = view.nics.get(name)
        if nic is None:
            all_exist = False
            yield f"{p.who}: NIC {name} does not exist on the node"
            continue
        if not nic.rdma:
            yield f"{p.who}: NIC {name} is not an RDMA NIC"
        if not nic.healthy:
            yield f"{p.who}: NIC {name} is unhealthy"
        if ("NIC", name) in view.held_by:
            yield f"{p.who}: NIC {name} is already allocated to {view.held_by['NIC', name]}"
    return all_exist
