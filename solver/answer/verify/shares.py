"""Shares of one GPU: a share member holds one GPU and reports its part; shares on a GPU fit 1000
milli and its memory; whole-GPU and mutex members get idle GPUs nobody else lands on; no device
is used by two members but plain shares of one GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import NodeView, Placed
from solver.domain.model import (
    Role,
)


def share_record(role: Role, p: Placed) -> Iterator[str]:
    """A share member reports exactly the part it asked for, on its GPU; others report none."""
    share = role.member.gpu_share
    got = [(sh.gpu, sh.milli, sh.memory_mib) for sh in p.member.gpu_shares]
    want = [] if share is None else [(g, share.milli, share.memory_mib) for g in p.member.gpus[:1]]
    if got != want:
        yield f"{p.who}: reports GPU shares {got} but the role asks for {want or 'whole GPUs'}"


def is_plain_share(p: Placed) -> bool:
    """A member that holds part of a GPU and lets others share it (not mutex, not whole)."""
    for role in p.job.roles:
        if role.name == p.member.role:
            return role.member.gpu_share is not None and not role.member.mutex
    return False


def gpu_shares(nodes: dict[str, NodeView], placed: list[Placed]) -> Iterator[str]:
    """Shares on one GPU, old and new, add up to at most 1000 milli and the GPU's memory."""
    load: dict[tuple[str, str], list[int]] = {}
    for p in placed:
        view = nodes.get(p.member.node)
        if view is None or not is_plain_share(p):
            continue
        for sh in p.member.gpu_shares:
            key = (p.member.node, sh.gpu)
            if key not in load:
                load[key] = list(view.shares.get(sh.gpu, (0, 0)))
            load[key][0] += sh.milli
            load[key][1] += sh.memory_mib
    for (node, gpu), (milli, mib) in sorted(load.items()):
        capacity = nodes[node].gpus[gpu].memory_mib if gpu in nodes[node].gpus else 0
        if milli > 1000:
            yield f"node {node}: shares on GPU {gpu} add up to {milli} milli, past 1000"
        if capacity and mib > capacity:
            yield f"node {node}: shares on GPU {gpu} hold {mib} MiB, past its {capacity}"


def shared_devices(placed: list[Placed]) -> Iterator[str]:
    """No GPU or NIC is given to two members, except a GPU shared by plain (non-mutex) shares."""
    first: dict[tuple[str, str, str], Placed] = {}
    for p in placed:
        devices = [("GPU", g) for g in dict.fromkeys(p.member.gpus)]
        devices += [("NIC", n) for n in dict.fromkeys(p.member.nics)]
        for kind, name in devices:
            key = (p.member.node, kind, name)
            if key in first and kind == "GPU" and is_plain_share(p) and is_plain_share(first[key]):
                continue  # two shares of one GPU: gpu_shares checks they fit
            if key in first:
                other = first[key].member
                yield (
                    f"{p.who}: {kind} {name} is also given to job {first[key].job.id} "
                    f"role {other.role} member {other.index}"
                )
            else:
                first[key] = p
