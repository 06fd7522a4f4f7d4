"""GPU↔NIC pairs: each pair names a GPU and a NIC of the member with their true PCIe distance; with a
NIC per GPU the pairs match every GPU to its own NIC."""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import Device, NodeView, Placed
from solver.domain.model import NicMode


def pairs(nodes: dict[str, NodeView], p: Placed) -> Iterator[str]:
    listed = p.member.pairs
    view = nodes.get(p.member.node)
    if not listed or view is None:
        return  # a baseline's plan may give none; the solver's always does (tests/test_pairs.py)
    gpus, nics = set(p.member.gpus), set(p.member.nics)
    for pair in listed:
        if pair.gpu not in gpus or pair.nic not in nics:
            yield f"{p.who}: pair {pair.gpu}↔{pair.nic} names a device the member does not hold"
            continue
        gpu, nic = view.gpus[pair.gpu], view.nics[pair.nic]
        true = view.distance(
            Device(gpu.id, gpu.pcie_switch, gpu.numa), Device(nic.name, nic.pcie_switch, nic.numa)
        )
        if pair.distance != true:
            said = pair.distance.name
            yield f"{p.who}: pair {pair.gpu}↔{pair.nic} says {said} but they are {true.name} apart"
    role = next((r for r in p.job.roles if r.name == p.member.role), None)
    one_each = sorted(x.gpu for x in listed) == sorted(gpus) and sorted(x.nic for x in listed) == sorted(nics)
    if role is not None and role.member.nics.mode == NicMode.PER_GPU and not one_each:
        yield f"{p.who}: with a NIC per GPU the pairs must give every GPU its own NIC"
